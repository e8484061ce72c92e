// Softcap and ALiBi on mma accumulator fragments, for the kernels compiled with kVariants
// (dispatched at launch, uses_variant_kernels(); the default kernels never see this code).
// Scores leave in log2 units, ready for exp2: the softmax then multiplies them by 1 instead of
// scale * log2(e).
#pragma once

#include <cstdint>

#include "kernels/common/params.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail {

// tanh(x) without tanhf's polynomial and branches per score: 1 - 2 / (2^(2 x log2 e) + 1) on
// the hardware's ex2 and a fast division, whose absolute error of about 1e-7 is a relative error
// of at most 2e-6 for |x| >= 1/16; below that, where the subtraction would cancel (and a large
// softcap multiplies the error back up), the series x - x^3/3 + 2x^5/15 (relative error below
// 1e-9 there). Saturates to +-1 (2^x gives inf or 0); NaN stays NaN.
__device__ __forceinline__ float fast_tanh(float x) {
  const float x2 = x * x;
  const float series = x * fmaf(x2, fmaf(x2, 2.f / 15.f, -1.f / 3.f), 1.f);
  const float exponential = 1.f - __fdividef(2.f, fast_exp2(2.f * kLog2e * x) + 1.f);
  return fabsf(x) < 0.0625f ? series : exponential;
}

// The modifications of one (batch, query head).
struct ScoreMod {
  float scale_log2;   // scale * log2(e), used without a softcap
  float softcap_in;   // scale / softcap; 0: no softcap
  float softcap_out;  // softcap * log2(e)
  float slope_log2;   // ALiBi slope * log2(e); 0 without ALiBi

  // The log2-unit score of the raw product x = q.k of a pair at `distance` = query + offset -
  // key: softcap_out * tanh(x * softcap_in) (or x * scale_log2), minus slope_log2 * |distance|.
  // `softcap_slope` gets d(capped)/d(scaled) = 1 - tanh^2 (1 without a softcap).
  __device__ __forceinline__ float operator()(float x, float distance,
                                              float& softcap_slope) const {
    float score = x * scale_log2;
    softcap_slope = 1.f;
    if (softcap_in != 0.f) {  // uniform over the grid
      const float t = fast_tanh(x * softcap_in);
      score = softcap_out * t;
      softcap_slope = fmaf(-t, t, 1.f);
    }
    return fmaf(-slope_log2, fabsf(distance), score);
  }
};

__device__ __forceinline__ ScoreMod score_mod(const ProblemParams& p, int64_t batch,
                                              int64_t head) {
  const float slope = p.alibi_slopes == nullptr
                          ? 0.f
                          : p.alibi_slopes[batch * p.alibi_batch_stride + head];
  return {p.scale_log2, p.softcap_in, p.softcap_out, slope * kLog2e};
}

// Modifies this thread's part of a warp's 16 x (8 * kTiles) block of raw scores (keys k0..;
// `row` the query of fragment row `group`) into log2-unit scores.
template <int kTiles>
__device__ __forceinline__ void modify_scores(float (&s)[kTiles][4], const ScoreMod& mod,
                                              const ProblemParams& p, int64_t k0, int64_t row,
                                              int lane) {
  float unused;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Distances stay exact in float up to 2^24, far beyond where the bias has any weight left.
    const float base = float(row + 8 * half + p.offset - k0 - 2 * (lane % 4));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[t][2 * half + e];
        x = mod(x, base - float(8 * t + e), unused);
      }
    }
  }
}

}  // namespace cuflash::detail
