// The causal mask, the window and the end of the keys, applied to a warp's block of scores in
// mma accumulator layout (shared by the mma.sync and wgmma forward kernels).
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail {

// Whether the block of queries [q0, q0 + rows) x keys [k0, k0 + cols) holds a pair the band
// (causal mask, window) hides: its first row has the band's leftmost right end, its last row
// the rightmost left end. kLeftBound: the band may have a left end (the kVariants kernels; the
// default ones never see a window bounded on the left, uses_variant_kernels()).
template <bool kLeftBound>
__device__ __forceinline__ bool crosses_band(const ProblemParams& p, int64_t q0, int rows,
                                             int64_t k0, int cols) {
  const bool crosses_right = k0 + cols - 1 > q0 + p.band_last;
  if constexpr (kLeftBound) return crosses_right || k0 < q0 + rows - 1 + p.band_first;
  return crosses_right;
}

// ... or a key past the end: then the block goes through mask_scores().
template <bool kLeftBound>
__device__ __forceinline__ bool needs_mask(const ProblemParams& p, int64_t q0, int rows,
                                           int64_t k0, int cols) {
  return k0 + cols > p.seq_k || crosses_band<kLeftBound>(p, q0, rows, k0, cols);
}

// Sets the scores of masked (query, key) pairs to -inf. s holds this thread's part of a warp's
// 16 x (8 * kTiles) block of keys k0..; `row` is the query index of fragment rows group, group+8.
template <bool kLeftBound, int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], const ProblemParams& p,
                                            int64_t k0, int64_t row, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t query = row + 8 * half;
    const int64_t visible_end = min64(p.seq_k, query + p.band_last + 1);
    const int first_col =
        kLeftBound ? static_cast<int>(clamp64(query + p.band_first - k0, 0, 8 * kTiles)) : 0;
    const int end_col = static_cast<int>(clamp64(visible_end - k0, 0, 8 * kTiles));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * t + 2 * (lane % 4) + e;
        if (col < first_col || col >= end_col) s[t][2 * half + e] = kMaskedScore;
      }
    }
  }
}

}  // namespace cuflash::detail
