// Shared-memory limits and row padding that both kernel families size their tiles with.
#pragma once

#include <cstddef>

namespace cuflash::detail {

// The most dynamic shared memory one CTA may use: sm_90's 227 KB. Default configurations stay
// within sm_80's 163 KB; larger ones (and those above the 99 KB of sm_86 / sm_89) are launched
// only where fits_dynamic_smem() says so. The 16-bit D=128 kernels and the fp32 D=128 backward
// need more than 99 KB.
inline constexpr size_t kMaxSmemBytes = 227 * 1024;

// Padding at the end of every shared-memory row: 16 bytes make consecutive rows start 16 bytes
// further into the bank pattern, so the eight rows an ldmatrix phase reads hit eight different
// 16-byte bank groups for every head_dim we compile, and the fp32 scalar fragment reads
// (sm80/mma_ops.cuh) hit 32 different banks.
inline constexpr int kSmemPadBytes = 16;
template <int kElementBytes>
inline constexpr int kSmemPadElements = kSmemPadBytes / kElementBytes;

}  // namespace cuflash::detail
