// The split-KV forward's key-split count and its choice between two depths of pipeline, from a
// model of waves of CTAs over the SMs: integer arithmetic only (no CUDA), so that host tests
// check the decisions the performance log measured. plan.h applies them to a call.
#pragma once

#include <algorithm>
#include <cstdint>

#include "int_math.h"

namespace cuflash::detail::split {

inline constexpr int64_t kMaxAutoSplits = 128;
// Cost, in the time one CTA takes for a key block, of a CTA's start (Q, pipeline fill) and
// epilogue, and of the merge kernel's launch.
inline constexpr double kCtaOverheadBlocks = 2.0;
inline constexpr double kMergeLaunchBlocks = 1.0;
// The merge reads and writes D fp32 (8 * D bytes) per row and split, where a CTA moves
// 2 * 64 * D 16-bit elements (256 * D bytes) per key block: a split row costs 1/32 block.
inline constexpr double kMergeRowsPerBlock = 32.0;

// The split count with the least modelled time for `ctas` CTAs (row blocks) of `blocks` key
// blocks each: CTAs run in waves of `slots`, a wave lasting as long as its CTAs' key blocks plus
// their overhead; splitting adds the merge of `query_rows` rows. Ties keep the fewer splits.
inline int64_t least_cost_splits(int64_t ctas, int64_t blocks, int64_t slots, int64_t query_rows) {
  const auto cost = [&](int64_t splits) {
    const double waves = double(ceil_div(ctas * splits, slots));
    double time = waves * (double(ceil_div(blocks, splits)) + kCtaOverheadBlocks);
    if (splits > 1) {
      time += kMergeLaunchBlocks +
              double(query_rows) * double(splits) / (kMergeRowsPerBlock * double(slots));
    }
    return time;
  };
  int64_t best = 1;
  double best_cost = cost(1);
  for (int64_t splits = 2; splits <= std::min(blocks, kMaxAutoSplits); ++splits) {
    const double c = cost(splits);
    if (c < best_cost) {
      best = splits;
      best_cost = c;
    }
  }
  return best;
}

// Long streams of loads keep an SM's share of the bandwidth busy with two CTAs (each with 48-96 KB
// of loads in flight), and read faster as two than as four (H200, performance log 2026-12-03,
// head_dim 64, B=8: MHA at 32k keys one split on two CTAs an SM 0.482 ms, two splits on four
// 0.487; GQA-4 at 128k four splits 0.4845, eight 0.4874): where the loads bound the time and
// each split would stream at least kLongSplitBlocks key blocks, the count that fills
// kStreamingCtasPerSm CTAs an SM where that is fewer.
inline constexpr int64_t kStreamingCtasPerSm = 2;
inline constexpr int64_t kLongSplitBlocks = 256;  // 16k keys

// The automatic split count of `ctas` CTAs of `blocks` key blocks each on `multiprocessors` SMs
// that hold `ctas_per_sm` CTAs of the configuration each. `load_bound`: the configuration's
// products are small next to its loads (the Narrow ones: at most 16 rows a CTA).
inline int64_t auto_splits(int64_t ctas, int64_t blocks, int64_t multiprocessors,
                           int64_t ctas_per_sm, int64_t query_rows, bool load_bound) {
  const int64_t splits = least_cost_splits(ctas, blocks, multiprocessors * ctas_per_sm, query_rows);
  if (!load_bound || ctas_per_sm <= kStreamingCtasPerSm ||
      ceil_div(blocks, splits) < kLongSplitBlocks) {
    return splits;
  }
  return std::min(
      splits, least_cost_splits(ctas, blocks, multiprocessors * kStreamingCtasPerSm, query_rows));
}

// Whether a configuration with a deeper pipeline and fewer CTAs an SM (SplitTraits<64>::
// NarrowDeep: four stages, three CTAs) should take the grid of the shallow one (Narrow: three
// stages, four CTAs) that `splits` key splits of `blocks` key blocks give `ctas` CTAs on
// `slots`. The shallow one wins where its extra CTAs put the whole grid in one wave; where the
// grid takes several waves anyway, or each CTA streams a long run of keys, the deeper one reads
// the cache faster (H200, performance log 2026-12-03: B=64 MHA 32k keys 3.69 against 3.75 ms;
// B=64 GQA-4 128k 3.68 against 3.72; but GQA-4 4k 0.124 against 0.133 the other way).
inline constexpr int64_t kLongStreamBlocks = 2048;  // 128k keys a CTA
inline bool deep_pipeline_pays(int64_t ctas, int64_t splits, int64_t blocks, int64_t slots) {
  return ctas * splits > slots || ceil_div(blocks, splits) >= kLongStreamBlocks;
}

}  // namespace cuflash::detail::split
