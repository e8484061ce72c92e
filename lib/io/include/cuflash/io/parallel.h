// A loop split over the host's cores. Generating, converting and summarising tensors of
// gigabytes is memory-bound work that one core does at a fraction of the memory bandwidth.
#pragma once

#include <cstddef>
#include <functional>

namespace cuflash::io {

// Calls body(begin, end) on consecutive disjoint ranges that cover [0, count), each on its own
// thread (the caller's among them), with at most one range per core and at least
// `min_per_thread` items per range, so that small loops stay on the calling thread. Returns once
// every range is done; the first exception a body throws is rethrown then.
void parallel_ranges(size_t count, size_t min_per_thread,
                     const std::function<void(size_t begin, size_t end)>& body);

// The number of ranges parallel_ranges() splits `count` items into.
size_t parallel_range_count(size_t count, size_t min_per_thread);

}  // namespace cuflash::io
