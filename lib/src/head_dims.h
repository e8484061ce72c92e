// The head dimensions with compiled kernels, for every dtype and both directions: the one list.
// The launcher table (dispatch.cu), is_supported_head_dim(), supported_head_dims() and
// tuned_head_dims() are derived from it, and sources.cmake reads the line below to generate one
// instantiation file per (direction, dtype, head_dim), so keep it on one line.
//
// Every multiple of 8 from 8 to the last entry runs: on the kernels of the smallest compiled
// head dim at least as large (compiled_head_dim()), which get the head_dim of the call, load the
// columns past it as zeros (16-byte chunks of 8 fp16/bf16 or 4 fp32 elements: since head_dim is
// a multiple of 8 a chunk is wholly inside or outside) and never store them; the wgmma kernels
// at the next of their own head dims (below), their TMA loads filling those columns with zeros.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cuflash::detail {

inline constexpr int kHeadDims[] = {32, 64, 96, 128, 192, 256};

// head_dim must be a multiple of this on the GPU (one 16-byte chunk of a 16-bit row).
inline constexpr int kHeadDimGranule = 8;
inline constexpr int kMaxHeadDim = kHeadDims[sizeof(kHeadDims) / sizeof(kHeadDims[0]) - 1];

// The compiled head dim whose kernels run a call of `head_dim`: the smallest listed one at least
// as large; 0 when head_dim is not a positive multiple of kHeadDimGranule up to kMaxHeadDim.
constexpr int compiled_head_dim(int64_t head_dim) {
  if (head_dim <= 0 || head_dim % kHeadDimGranule != 0) return 0;
  for (int d : kHeadDims) {
    if (head_dim <= d) return d;
  }
  return 0;
}

// The head dims of the wgmma (sm90) kernels, forward and backward (sm90/traits.cuh has a
// configuration for each). wgmma tiles are whole 64-column blocks, so calls of a compiled head
// dim without wgmma kernels run on the next of these, the columns past their head_dim
// zero-filled by TMA and never stored: at 96 the 128 kernels take 0.50 of mma.sync's time
// forward and 0.82-0.86 backward (H200, bf16, B16 H16 S1024). Not at 32: padded to 64, wgmma
// takes 1.07-1.17 of the time of mma.sync at 32.
inline constexpr int kWgmmaForwardHeadDims[] = {64, 128, 192, 256};
// Backward above 128 (and at 128 on small grids): the column-split kernel
// (sm90/backward_column_split.cuh). 96 runs on 128-column tiles with products of 96 columns
// (BackwardTraits<96>).
inline constexpr int kWgmmaBackwardHeadDims[] = {64, 96, 128, 192, 256};

// The columns of a wgmma kernel's tiles (whole 64-column blocks), which its dQ accumulator
// rows also have: 128 for the backward's 96.
constexpr int wgmma_tile_columns(int wgmma_head_dim) { return (wgmma_head_dim + 63) / 64 * 64; }

// The smallest of `dims` at least head_dim; 0 when none is.
template <size_t N>
constexpr int smallest_at_least(const int (&dims)[N], int64_t head_dim) {
  for (int d : dims) {
    if (head_dim <= d) return d;
  }
  return 0;
}

// The wgmma head dim among `dims` that runs calls of compiled head dim `compiled` (0: none, the
// mma.sync kernels run them).
template <size_t N>
constexpr int wgmma_head_dim(const int (&dims)[N], int compiled) {
  return compiled < dims[0] ? 0 : smallest_at_least(dims, compiled);
}

}  // namespace cuflash::detail
