// The split-KV forward's key-split count and its choice of pipeline depth
// (lib/src/kernels/split/split_count.h) on an H200's 132 SMs: the decisions the performance log
// measured for the decode sweep, and the bounds every count keeps.
#include <catch2/catch.hpp>

#include <cstdint>

#include "kernels/split/split_count.h"

namespace split = cuflash::detail::split;

namespace {

constexpr int64_t kMultiprocessors = 132;
constexpr int64_t kShallowSlots = kMultiprocessors * 4;  // Narrow, D=64: four CTAs an SM
constexpr int64_t kDeepSlots = kMultiprocessors * 3;     // NarrowDeep: three

constexpr int64_t key_blocks(int64_t keys) { return (keys + 63) / 64; }

// The automatic count of the Narrow configuration at D=64 (four CTAs an SM, load-bound).
int64_t narrow_splits(int64_t ctas, int64_t keys, int64_t query_rows) {
  return split::auto_splits(ctas, key_blocks(keys), kMultiprocessors, 4, query_rows, true);
}

}  // namespace

TEST_CASE("split count: a small grid is split to fill one wave, never past its key blocks",
          "[unit][split]") {
  // B=1, 32 kv heads, 4k keys: 16 splits fill 512 of the 528 slots.
  CHECK(split::least_cost_splits(32, key_blocks(4096), kShallowSlots, 32) == 16);
  // B=1, 8 kv heads: 64 splits of one key block each.
  CHECK(split::least_cost_splits(8, key_blocks(4096), kShallowSlots, 32) == 64);
  // Three key blocks allow three splits at most; one key block none.
  CHECK(split::least_cost_splits(4, 3, kShallowSlots, 4) == 3);
  CHECK(split::least_cost_splits(4, 1, kShallowSlots, 4) == 1);
  // Long keys stop at the cap.
  CHECK(split::least_cost_splits(1, key_blocks(1 << 20), kShallowSlots, 1) ==
        split::kMaxAutoSplits);
}

TEST_CASE("split count: a grid that fills the GPU is not split", "[unit][split]") {
  // B=64, GQA-4: 512 kv heads in one wave of four CTAs an SM.
  CHECK(split::least_cost_splits(512, key_blocks(4096), kShallowSlots, 2048) == 1);
  CHECK(split::least_cost_splits(512, key_blocks(131072), kShallowSlots, 2048) == 1);
  // B=64 MHA: 2048 CTAs, 3.9 waves already.
  CHECK(split::least_cost_splits(2048, key_blocks(4096), kShallowSlots, 2048) == 1);
}

TEST_CASE("split count: the deep pipeline takes grids of several waves and long streams",
          "[unit][split]") {
  // Several waves of four CTAs an SM: B=64 MHA (2048 kv heads), and forced splits past a wave.
  CHECK(split::deep_pipeline_pays(2048, 1, key_blocks(4096), kShallowSlots));
  CHECK(split::deep_pipeline_pays(300, 3, key_blocks(517), kShallowSlots));
  // One CTA streaming 128k keys: B=64 GQA-4 131072 keys.
  CHECK(split::deep_pipeline_pays(512, 1, key_blocks(131072), kShallowSlots));
  // One wave that four CTAs an SM complete and three would not: B=64 GQA-4 4k and 32k.
  CHECK_FALSE(split::deep_pipeline_pays(512, 1, key_blocks(4096), kShallowSlots));
  CHECK_FALSE(split::deep_pipeline_pays(512, 1, key_blocks(32768), kShallowSlots));
  // Small grids split to one wave: B=1 and B=8 MHA at 128k keys.
  CHECK_FALSE(split::deep_pipeline_pays(32, 16, key_blocks(131072), kShallowSlots));
  CHECK_FALSE(split::deep_pipeline_pays(256, 2, key_blocks(131072), kShallowSlots));
  // Exactly one wave is still one wave.
  CHECK_FALSE(split::deep_pipeline_pays(kShallowSlots, 1, 64, kShallowSlots));
}

TEST_CASE("split count: on the deep pipeline's slots long streams of a full GPU split again",
          "[unit][split]") {
  // B=64 GQA-4 128k keys on three CTAs an SM: 512 CTAs are 1.3 waves; splitting into many
  // short runs evens the waves out (the count main measured at 3.68 ms).
  const int64_t splits =
      split::auto_splits(512, key_blocks(131072), kMultiprocessors, 3, 2048, true);
  CHECK(splits == 10);
  // B=64 MHA 4k: 2048 CTAs are 5.2 waves; two splits make 10.3.
  CHECK(split::auto_splits(2048, key_blocks(4096), kMultiprocessors, 3, 2048, true) == 2);
}

TEST_CASE("split count: long load-bound streams fill two CTAs an SM, not every slot",
          "[unit][split]") {
  // B=8 MHA at 32k keys: one split of 512 key blocks on 256 CTAs, where four CTAs an SM would
  // take two splits; GQA-4 at 128k: four splits, not eight.
  CHECK(split::least_cost_splits(256, key_blocks(32768), kShallowSlots, 256) == 2);
  CHECK(narrow_splits(256, 32768, 256) == 1);
  CHECK(split::least_cost_splits(64, key_blocks(131072), kShallowSlots, 256) == 8);
  CHECK(narrow_splits(64, 131072, 256) == 4);
  // Short streams keep every slot: GQA-4 at 32k (8 splits of 64 blocks), B=1 MHA at 128k.
  CHECK(narrow_splits(64, 32768, 256) == 8);
  CHECK(narrow_splits(32, 131072, 32) == 16);
  // Never more splits than the count for every slot: B=64 GQA-4 at 128k stays at one.
  CHECK(narrow_splits(512, 131072, 2048) == 1);
  // Not where the products weigh (load_bound false), nor for two CTAs an SM already.
  CHECK(split::auto_splits(256, key_blocks(32768), kMultiprocessors, 4, 256, false) == 2);
  CHECK(split::auto_splits(256, key_blocks(32768), kMultiprocessors, 2, 256, true) ==
        split::least_cost_splits(256, key_blocks(32768), 2 * kMultiprocessors, 256));
}
