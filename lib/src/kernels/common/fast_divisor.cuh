// Division by a divisor fixed at launch, for the indices a kernel splits once per tile: a
// multiply-high, an add and a shift (Granlund and Montgomery's round-up method), where a 32-bit
// division by a runtime value is a sequence of some twenty instructions and a 64-bit one a
// routine with a branch.
#pragma once

#include <cassert>
#include <cstdint>

namespace cuflash::detail {

struct FastDivisor {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;  // floor(2^32 (2^shift - divisor) / divisor) + 1
  uint32_t shift = 0;       // ceil(log2(divisor))

  FastDivisor() = default;
  // 1 <= d <= 2^31 (a shift of 32 would be undefined).
  __host__ explicit FastDivisor(uint32_t d) : divisor(d) {
    assert(d >= 1 && d <= (uint32_t(1) << 31));
    while ((uint64_t(1) << shift) < d) ++shift;
    multiplier = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d) / d + 1);
  }

  // n / divisor, exact for n < 2^31 (so that the add cannot carry out of 32 bits).
  __host__ __device__ __forceinline__ uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = uint32_t((uint64_t(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

}  // namespace cuflash::detail
