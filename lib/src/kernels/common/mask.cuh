// The causal mask, the window and the end of the keys, applied to a warp's block of scores in
// mma accumulator layout (shared by the mma.sync and wgmma forward kernels).
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail {

// Whether the block of queries [q0, q0 + rows) x keys [k0, k0 + cols) holds a pair the band
// (causal mask, window) hides: its first row has the band's leftmost right end, its last row
// the rightmost left end. kLeftBound: the band may have a left end (the variant kernels, and the
// sm90 forward's window kernel; the default ones never see a window bounded on the left,
// uses_variant_kernels()).
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

// The key blocks j (keys from (first_key_block + j) * kBlockN) of a query block of rows
// [q0, q0 + kBlockM) that need no mask (needs_mask() false): [begin, end).
struct UnmaskedBlocks {
  int begin = 0;
  int end = 0;
  __device__ __forceinline__ bool contains(int j) const { return j >= begin && j < end; }
};

// Floor and ceiling of a / b for b > 0 and any a (the band's ends may lie left of key 0).
__device__ __forceinline__ int64_t floor_div64(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
__device__ __forceinline__ int64_t ceil_div64(int64_t a, int64_t b) { return -floor_div64(-a, b); }

template <int kBlockM, int kBlockN>
__device__ __forceinline__ UnmaskedBlocks unmasked_blocks(const ProblemParams& p, int64_t q0,
                                                          int64_t first_key_block,
                                                          int64_t key_blocks) {
  // Block j is unmasked iff its first key is at or right of the last row's left end, its last
  // key at or left of the first row's right end, and it ends inside the keys (crosses_band(),
  // needs_mask()).
  const int64_t begin = ceil_div64(q0 + kBlockM - 1 + p.band_first, kBlockN);
  const int64_t end = min64(floor_div64(q0 + p.band_last + 1, kBlockN), p.seq_k / kBlockN);
  UnmaskedBlocks blocks;
  blocks.begin = int(clamp64(begin - first_key_block, 0, key_blocks));
  blocks.end = int(clamp64(end - first_key_block, 0, key_blocks));
  return blocks;
}

// Sets the scores of masked (query, key) pairs to -inf. s holds this thread's part of a warp's
// 16 x (8 * kTiles) block of keys k0..; `row` is the query index of fragment rows group, group+8.
template <bool kLeftBound, int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], const ProblemParams& p,
                                            int64_t k0, int64_t row, int lane) {
  // The bounds are taken relative to this thread's first column (2 * (lane % 4)), so that each
  // element compares its compile-time offset 8 t + e with them (fewer live registers: the
  // forward masks while a product into O is in flight).
  const int64_t lane_k0 = k0 + 2 * (lane % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t query = row + 8 * half;
    const int64_t visible_end = min64(p.seq_k, query + p.band_last + 1);
    const int first = kLeftBound ? int(clamp64(query + p.band_first - lane_k0, 0, 8 * kTiles)) : 0;
    const int end = int(clamp64(visible_end - lane_k0, 0, 8 * kTiles));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int offset = 8 * t + e;
        if ((kLeftBound && offset < first) || offset >= end) s[t][2 * half + e] = kMaskedScore;
      }
    }
  }
}

}  // namespace cuflash::detail
