// Softcap and ALiBi on mma accumulator fragments, for the kernels compiled with kVariants
// (dispatched at launch, uses_variant_kernels(); the default kernels never see this code).
// ScoreMod::apply() gives scores in log2 units, ready for exp2 (the backward);
// ForwardScoreMod gives them in units that the forward softmax's multiply-add scales.
#pragma once

#include <cfloat>
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

// What a variant kernel does to its scores. Uniform over the grid; the kernels branch on it once
// per block of scores, outside the loops over elements, so that each loop carries one kind's
// instructions (a branch per element kept the softcap's code in the ALiBi and window loops).
enum class ScoreModKind {
  none,     // a window alone: the scores stay raw, the softmax scales them as the default kernels do
  alibi,    // scale, then the bias
  softcap,  // scale and cap, then the bias (slope 0 without ALiBi)
};

// The modifications of one (batch, query head). kHardwareTanh: the softcap's tanh is
// hardware_tanh() (fp16 / bf16 kernels) rather than fast_tanh() (fp32). fast_tanh() spends two
// MUFU operations per score (ex2, rcp) on top of the softmax's ex2, and the MUFU unit (16
// operations per clock and SM) then outlasts the tensor cores: on an H200, B=1 H=16 S=16k
// D=128 bf16 causal, softcap 30, forward 260 TFLOP/s with fast_tanh, 492 with hardware_tanh
// (backward 262 -> 343), and `verify` passed at fp16 and bf16 (and fp32) with softcaps of 30, 5
// and 2, the last two with saturated scores. fp32 keeps the exact form: its kernels are bound by
// their three TF32 products instead, and fp32 users ask for the accuracy.
template <bool kHardwareTanh>
struct ScoreMod {
  float scale_log2;   // scale * log2(e), used without a softcap
  float softcap_in;   // scale / softcap; 0: no softcap
  float softcap_out;  // softcap * log2(e)
  float slope_log2;   // ALiBi slope * log2(e); 0 without ALiBi

  __device__ __forceinline__ ScoreModKind kind() const {
    if (softcap_in != 0.f) return ScoreModKind::softcap;
    return slope_log2 != 0.f ? ScoreModKind::alibi : ScoreModKind::none;
  }

  // The log2-unit score of the raw product x = q.k of a pair at `distance` = query + offset -
  // key: softcap_out * tanh(x * softcap_in) (or x * scale_log2), minus slope_log2 * |distance|.
  // With a softcap, `softcap_slope` gets d(capped)/d(scaled) = 1 - tanh^2. Not for kind none.
  template <ScoreModKind kKind>
  __device__ __forceinline__ float apply(float x, float distance, float& softcap_slope) const {
    static_assert(kKind != ScoreModKind::none, "kind none leaves the scores to the softmax");
    float score = x * scale_log2;
    if constexpr (kKind == ScoreModKind::softcap) {
      const float t = kHardwareTanh ? hardware_tanh(x * softcap_in) : fast_tanh(x * softcap_in);
      score = softcap_out * t;
      softcap_slope = fmaf(-t, t, 1.f);
    }
    return fmaf(-slope_log2, fabsf(distance), score);
  }
};

// The ScoreMod of the kernels of `Element`.
template <typename Element>
using ScoreModFor = ScoreMod<sizeof(Element) == 2>;

template <typename Element>
__device__ __forceinline__ ScoreModFor<Element> score_mod(const ProblemParams& p, int64_t batch,
                                                          int64_t head) {
  const float slope = p.alibi_slopes == nullptr
                          ? 0.f
                          : p.alibi_slopes[batch * p.alibi_batch_stride + head];
  return {p.scale_log2, p.softcap_in, p.softcap_out, slope * kLog2e};
}

// Which loop the forward's modify_scores() runs (once per block of scores, as ScoreModKind): a
// softcap without ALiBi has a loop of its own that spends nothing on a bias.
enum class ForwardScoreModKind { none, alibi, softcap, softcap_alibi };

// The forward's form of a ScoreMod. Its scores leave in "score units" that the softmax's fused
// multiply-add, spent on every score anyway, turns into log2 units: tanh(x * softcap_in) with a
// softcap (unit softcap * log2 e), the raw x without one (unit scale * log2 e), then minus slope
// * |distance| with ALiBi (the slope divided by the unit once, here). Against apply()'s log2
// units that saves a multiply per score, and a softcap without ALiBi spends nothing on a bias:
// on an H200 (B=1 H=16 S=16k D=128 bf16 causal) the forward took 2.044 -> 1.722 ms with ALiBi
// and 2.352 -> 2.179 with softcap 30. The backward keeps apply(): there the same change cost
// 2-5 % (its sm90 variant kernel spilled more; performance log).
template <bool kHardwareTanh>
struct ForwardScoreMod {
  float unit;        // log2 units per score unit: the softmax's scale
  float softcap_in;  // scale / softcap; 0: no softcap
  float slope;       // ALiBi slope in score units per key of distance; 0 without ALiBi

  // The unit is at least 2^-100 log2 e (the API's bounds on scale and softcap), yet a slope
  // divided by it may overflow: held at +-FLT_MAX it stays exact wherever it matters (a bias of
  // FLT_MAX score units is over 2^28 in log2 units, a weight of 0 beside the key at distance 0),
  // and infinity never meets a distance of 0 (inf * 0: NaN on the diagonal).
  __device__ __forceinline__ static ForwardScoreMod of(const ScoreMod<kHardwareTanh>& mod) {
    const float unit = mod.softcap_in != 0.f ? mod.softcap_out : mod.scale_log2;
    float slope = mod.slope_log2 / unit;  // once a CTA: an exact division (NaN stays NaN)
    if (fabsf(slope) > FLT_MAX) slope = copysignf(FLT_MAX, slope);
    return {unit, mod.softcap_in, slope};
  }

  __device__ __forceinline__ ForwardScoreModKind kind() const {
    if (softcap_in != 0.f) {
      return slope != 0.f ? ForwardScoreModKind::softcap_alibi : ForwardScoreModKind::softcap;
    }
    return slope != 0.f ? ForwardScoreModKind::alibi : ForwardScoreModKind::none;
  }

  template <ForwardScoreModKind kKind>
  __device__ __forceinline__ float apply(float x, float distance) const {
    constexpr bool kCap =
        kKind == ForwardScoreModKind::softcap || kKind == ForwardScoreModKind::softcap_alibi;
    constexpr bool kBias =
        kKind == ForwardScoreModKind::alibi || kKind == ForwardScoreModKind::softcap_alibi;
    float score = x;
    if constexpr (kCap) {
      score = kHardwareTanh ? hardware_tanh(x * softcap_in) : fast_tanh(x * softcap_in);
    }
    if constexpr (kBias) score = fmaf(-slope, fabsf(distance), score);
    return score;
  }
};

// The ForwardScoreMod of the kernels of `Element` (as ScoreModFor).
template <typename Element>
using ForwardScoreModFor = ForwardScoreMod<sizeof(Element) == 2>;

template <typename Element>
__device__ __forceinline__ ForwardScoreModFor<Element> forward_score_mod(const ProblemParams& p,
                                                                         int64_t batch,
                                                                         int64_t head) {
  return ForwardScoreModFor<Element>::of(score_mod<Element>(p, batch, head));
}

template <ForwardScoreModKind kKind, int kTiles, bool kHardwareTanh>
__device__ __forceinline__ void modify_scores_as(float (&s)[kTiles][4],
                                                 const ForwardScoreMod<kHardwareTanh>& mod,
                                                 const ProblemParams& p, int64_t k0, int64_t row,
                                                 int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Distances stay exact in float up to 2^24, far beyond where the bias has any weight left.
    const float base = float(row + 8 * half + p.offset - k0 - 2 * (lane % 4));
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[t][2 * half + e];
        x = mod.template apply<kKind>(x, base - float(8 * t + e));
      }
    }
  }
}

// Modifies this thread's part of a warp's 16 x (8 * kTiles) block of raw scores (keys k0..;
// `row` the query of fragment row `group`) into score units, for a softmax scaled by mod.unit
// (a window alone leaves the scores raw).
template <int kTiles, bool kHardwareTanh>
__device__ __forceinline__ void modify_scores(float (&s)[kTiles][4],
                                              const ForwardScoreMod<kHardwareTanh>& mod,
                                              const ProblemParams& p, int64_t k0, int64_t row,
                                              int lane) {
  switch (mod.kind()) {
    case ForwardScoreModKind::softcap:
      return modify_scores_as<ForwardScoreModKind::softcap>(s, mod, p, k0, row, lane);
    case ForwardScoreModKind::softcap_alibi:
      return modify_scores_as<ForwardScoreModKind::softcap_alibi>(s, mod, p, k0, row, lane);
    case ForwardScoreModKind::alibi:
      return modify_scores_as<ForwardScoreModKind::alibi>(s, mod, p, k0, row, lane);
    case ForwardScoreModKind::none:
      return;
  }
}

}  // namespace cuflash::detail
