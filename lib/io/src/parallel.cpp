#include "cuflash/io/parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cuflash::io {

size_t parallel_range_count(size_t count, size_t min_per_thread) {
  if (count == 0) return 0;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<size_t>(count / std::max<size_t>(min_per_thread, 1), 1, cores);
}

void parallel_ranges(size_t count, size_t min_per_thread,
                     const std::function<void(size_t begin, size_t end)>& body) {
  const size_t ranges = parallel_range_count(count, min_per_thread);
  if (ranges == 0) return;
  const size_t chunk = (count + ranges - 1) / ranges;
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto run = [&](size_t begin, size_t end) {
    try {
      body(begin, end);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (size_t r = 1; r < ranges; ++r) {
    const size_t begin = std::min(count, r * chunk), end = std::min(count, begin + chunk);
    if (begin < end) workers.emplace_back(run, begin, end);
  }
  run(0, std::min(count, chunk));
  for (std::thread& w : workers) w.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace cuflash::io
