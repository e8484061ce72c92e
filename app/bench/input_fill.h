// Benchmark inputs: seeded standard-normal values (never all zeros, which would flatter the
// kernels), rounded to the case's dtype and stored as raw elements ready for the GPU.
//
// `cuflash run` draws its inputs from a sequential generator in float64; the benchmark needs up
// to 4 x 32M elements per case, so it uses a counter-based generator instead: element i depends
// only on (seed, stream, i), the work splits over all CPU cores, and the values are the same
// however many there are. Box-Muller on two 24-bit uniforms from splitmix64 of the pair index.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/types.h"

namespace cuflash::bench {

// `count` elements of `dtype` (2 or 4 bytes each). `stream` separates the tensors of one case.
std::vector<unsigned char> standard_normal_bytes(size_t count, DType dtype, uint64_t seed,
                                                 uint64_t stream);

// The value of element `index` before rounding to a dtype (exposed for tests).
float standard_normal_at(uint64_t seed, uint64_t stream, size_t index);

}  // namespace cuflash::bench
