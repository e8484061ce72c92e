// The causal mask and the end of the keys, applied to a warp's block of scores in mma
// accumulator layout (shared by the mma.sync and wgmma forward kernels).
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail {

// Sets the scores of masked (query, key) pairs to -inf. s holds this thread's part of a warp's
// 16 x (8 * kTiles) block of keys k0..; `row` is the query index of fragment rows group, group+8.
template <int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], const ProblemParams& p,
                                            int64_t k0, int64_t row, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t query = row + 8 * half;
    const int64_t visible_end = p.causal ? min64(p.seq_k, query + p.causal_offset + 1) : p.seq_k;
    const int visible_cols = static_cast<int>(clamp64(visible_end - k0, 0, 8 * kTiles));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (8 * t + 2 * (lane % 4) + e >= visible_cols) s[t][2 * half + e] = kMaskedScore;
      }
    }
  }
}

}  // namespace cuflash::detail
