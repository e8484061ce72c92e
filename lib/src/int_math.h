// Integer arithmetic of the host-side plans (grids, key splits), free of CUDA so that host
// tests can include the plans built on it (split/split_count.h).
#pragma once

#include <cstdint>

namespace cuflash::detail {

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace cuflash::detail
