#include "cli/tensor_summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/io/parallel.h"

namespace cuflash::cli {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // elements summed by one task

struct PartialSums {
  double sum = 0, squares = 0, abs_max = 0;
  int64_t finite = 0, nonfinite = 0;
};

PartialSums sums_of(const io::NpyArray& array, size_t begin, size_t end, bool is_lse) {
  const size_t width = static_cast<size_t>(io::element_size(array.type));
  PartialSums s;
  for (size_t i = begin; i < end; ++i) {
    const double x = io::element_to_double(array.type, &array.bytes[i * width]);
    if (!std::isfinite(x)) {
      if (!(is_lse && x == INFINITY)) ++s.nonfinite;
      continue;
    }
    ++s.finite;
    s.sum += x;
    s.squares += x * x;
    s.abs_max = std::max(s.abs_max, std::abs(x));
  }
  return s;
}

}  // namespace

TensorSummary summarize_tensor(const io::NpyArray& array, bool is_lse) {
  const size_t count = array.bytes.size() / static_cast<size_t>(io::element_size(array.type));
  // Fixed-size chunks summed in chunk order: the figures are the same on any number of cores.
  const size_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<PartialSums> partials(chunks);
  io::parallel_ranges(chunks, 1, [&](size_t first, size_t end) {
    for (size_t c = first; c < end; ++c) {
      partials[c] = sums_of(array, c * kChunk, std::min(count, (c + 1) * kChunk), is_lse);
    }
  });
  PartialSums total;
  for (const PartialSums& p : partials) {
    total.sum += p.sum;
    total.squares += p.squares;
    total.abs_max = std::max(total.abs_max, p.abs_max);
    total.finite += p.finite;
    total.nonfinite += p.nonfinite;
  }
  TensorSummary summary;
  summary.nonfinite = total.nonfinite;
  summary.abs_max = total.abs_max;
  if (total.finite > 0) {
    summary.mean = total.sum / double(total.finite);
    summary.rms = std::sqrt(total.squares / double(total.finite));
  }
  return summary;
}

}  // namespace cuflash::cli
