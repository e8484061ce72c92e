// Online softmax on mma accumulator fragments. A thread holds two rows of its warp's 16 (rows
// `group` and `group + 8`, see fragments.cuh); the four threads of a quad share those rows, so row
// reductions are two xor-shuffles.
#pragma once

#include <cmath>

#include "kernels/common/ptx.cuh"

namespace cuflash::detail {

inline constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(x) = log2(x) * ln(2)
inline constexpr float kMaskedScore = -INFINITY;      // score of a (query, key) pair masked out
inline constexpr float kEmptyRowLse = INFINITY;       // LSE of a row that sees no key
inline constexpr float kLazyMaxGrowth = 8.f;          // OnlineSoftmax::exponentiate<kTiles, true>

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Running max and sum of the two rows a thread holds, in log2 units of the scaled scores.
struct OnlineSoftmax {
  float row_max[2] = {kMaskedScore, kMaskedScore};  // -inf while every key so far was masked
  float row_sum[2] = {0.f, 0.f};  // this thread's share; the quad's total is taken at the end

  // Replaces the raw scores s (16 x 8*kTiles, this warp's rows) by exp2(s * scale_log2 - max)
  // with the max updated over this block, and rescales the output accumulators to the new max.
  template <int kTiles, int kOutTiles>
  __device__ __forceinline__ void update(float (&s)[kTiles][4], float (&out)[kOutTiles][4],
                                         float scale_log2) {
    float rescale[2];
    exponentiate(s, scale_log2, rescale);
    rescale_rows(out, rescale);
  }

  // The first half of update(): exponentiates s and returns the factor by which the output
  // accumulated so far must be multiplied, for kernels that apply it later (while a product
  // into the output is still running).
  //
  // kLazyMax: the running max is raised only when a block's max passes it by more than
  // kLazyMaxGrowth (log2 units), so that the factor is exactly 1 for most blocks and the caller
  // can skip the rescale. Exact all the same: P, the row sum and O are taken against the same
  // (stale) max, and P <= 2^kLazyMaxGrowth stays far inside the 16-bit types' range.
  template <int kTiles, bool kLazyMax = false>
  __device__ __forceinline__ void exponentiate(float (&s)[kTiles][4], float scale_log2,
                                               float (&rescale)[2]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float block_max = kMaskedScore;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        block_max = fmaxf(block_max, fmaxf(s[t][2 * half], s[t][2 * half + 1]));
      }
      const float scaled_block_max = quad_max(block_max) * scale_log2;
      // Not raised: factor 1 (a NaN block max raises nothing, as fmaxf ignores it).
      const bool raise = !kLazyMax || scaled_block_max > row_max[half] + kLazyMaxGrowth;
      const float new_max = raise ? fmaxf(row_max[half], scaled_block_max) : row_max[half];
      // A row that has only seen masked keys keeps max = -inf: subtract 0 instead so that
      // exp2(-inf - max) stays 0 rather than becoming NaN.
      const float reference = new_max == kMaskedScore ? 0.f : new_max;
      rescale[half] = raise ? fast_exp2(row_max[half] - reference) : 1.f;
      row_max[half] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
#pragma unroll
        for (int i = 2 * half; i < 2 * half + 2; ++i) {
          s[t][i] = fast_exp2(fmaf(s[t][i], scale_log2, -reference));
          sum += s[t][i];
        }
      }
      row_sum[half] = row_sum[half] * rescale[half] + sum;
    }
  }

  template <int kOutTiles>
  static __device__ __forceinline__ void rescale_rows(float (&out)[kOutTiles][4],
                                                      const float (&rescale)[2]) {
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) out[t][i] *= rescale[i / 2];
    }
  }

  // After the last key block: the factor that normalizes each output row (0 for a row that saw
  // no key, so its output is 0) and the row's natural-log sum-exp (+inf for such a row). A NaN
  // sum (NaN inputs) stays NaN in both.
  __device__ __forceinline__ void finish(float (&normalizer)[2], float (&lse)[2]) const {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(row_sum[half]);
      const bool empty = sum == 0.f;
      normalizer[half] = empty ? 0.f : 1.f / sum;
      lse[half] = empty ? kEmptyRowLse : (row_max[half] + __log2f(sum)) * kLn2;
    }
  }
};

}  // namespace cuflash::detail
