// The order in which CTAs take (block, head) tiles (common/schedule.cuh, block_order_of()) and
// how many heads the wgmma backward interleaves (sm90/backward.cuh, interleaved_heads()), on
// the host: every tile of a grid exactly once in any grouping, the heaviest blocks of a group's
// heads first, and the groups each call gets. A GPU test compares grouped grids' gradients with
// those of each kv head alone (test_gpu_deterministic.cpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/sm90/backward.cuh"

namespace {

namespace detail = cuflash::detail;
using cuflash::AttentionShape;
using cuflash::BackwardArgs;
using cuflash::DType;
using cuflash::Mask;
using detail::block_order_of;
using detail::BlockOrder;

// The tiles of a grid of (blocks, heads) in launch order, with `heads_together`.
template <typename Index>
std::vector<BlockOrder> launch_order(Index blocks, Index heads, Index heads_together) {
  std::vector<BlockOrder> order;
  for (Index linear = 0; linear < blocks * heads; ++linear) {
    order.push_back(block_order_of<Index>(linear, blocks, heads, heads_together));
  }
  return order;
}

// Every tile once, and each head's blocks in increasing order: the deterministic backward's key
// block waits only for the key blocks before it in its head, which must have started before it
// (backward_steps.cuh, "Progress").
template <typename Index>
void check_every_tile_once(Index blocks, Index heads, Index heads_together) {
  INFO("grid " << blocks << " x " << heads << ", heads together " << heads_together);
  std::vector<int64_t> position(size_t(blocks * heads), -1);
  const std::vector<BlockOrder> order = launch_order(blocks, heads, heads_together);
  for (size_t i = 0; i < order.size(); ++i) {
    const BlockOrder& tile = order[i];
    REQUIRE(tile.block >= 0);
    REQUIRE(tile.block < int64_t(blocks));
    REQUIRE(tile.head >= 0);
    REQUIRE(tile.head < int64_t(heads));
    int64_t& at = position[size_t(tile.head * int64_t(blocks) + tile.block)];
    REQUIRE(at == -1);
    at = int64_t(i);
  }
  for (int64_t head = 0; head < int64_t(heads); ++head) {
    for (int64_t block = 1; block < int64_t(blocks); ++block) {
      REQUIRE(position[size_t(head * int64_t(blocks) + block - 1)] <
              position[size_t(head * int64_t(blocks) + block)]);
    }
  }
}

BackwardArgs causal_call(DType dtype, int64_t batch, int64_t heads, int64_t heads_kv, int64_t seq,
                         int64_t head_dim) {
  BackwardArgs args{};
  args.shape = AttentionShape{batch, heads, heads_kv, seq, seq, head_dim};
  args.dtype = dtype;
  args.mask = Mask::causal_bottom_right;
  return args;
}

BackwardArgs deterministic(BackwardArgs args) {
  args.deterministic = true;
  return args;
}

}  // namespace

TEST_CASE("block order: every tile once, in any grouping of the heads", "[unit][order]") {
  for (const int64_t blocks : {1, 2, 7, 32}) {
    for (const int64_t heads : {1, 3, 8, 40}) {
      for (const int64_t together :
           {int64_t{1}, int64_t{2}, int64_t{3}, heads - 1, heads, heads + 5}) {
        check_every_tile_once<int64_t>(blocks, heads, together);
        check_every_tile_once<uint32_t>(uint32_t(blocks), uint32_t(heads), uint32_t(together));
      }
    }
  }
}

TEST_CASE("block order: plain, interleaved and grouped", "[unit][order]") {
  // Plain: a head's blocks together, heads one after another.
  const std::vector<BlockOrder> plain = launch_order<int64_t>(3, 2, 1);
  CHECK(plain[1].block == 1);
  CHECK(plain[1].head == 0);
  CHECK(plain[3].block == 0);
  CHECK(plain[3].head == 1);
  // All heads together: every head's first block, then every head's second.
  for (const int64_t together : {4, 9}) {
    const std::vector<BlockOrder> all = launch_order<int64_t>(3, 4, together);
    for (size_t i = 0; i < all.size(); ++i) {
      CHECK(all[i].block == int64_t(i) / 4);
      CHECK(all[i].head == int64_t(i) % 4);
    }
  }
  // Groups of 4 of 10 heads (4, 4, 2): each group's heads interleaved, block by block, the
  // groups one after another; a block of a group starts after every earlier block of the group.
  const int64_t blocks = 5;
  const std::vector<BlockOrder> grouped = launch_order<int64_t>(blocks, 10, 4);
  for (size_t i = 0; i < grouped.size(); ++i) {
    const int64_t group = grouped[i].head / 4;
    const int64_t group_heads = group < 2 ? 4 : 2;
    const int64_t in_group = int64_t(i) - group * 4 * blocks;
    INFO("tile " << i);
    CHECK(grouped[i].block == in_group / group_heads);
    CHECK(grouped[i].head == group * 4 + in_group % group_heads);
  }
}

TEST_CASE(
    "wgmma backward: every head interleaved where all fit the bound, else groups in "
    "deterministic mode from 2k rows",
    "[unit][order]") {
  using detail::sm90::interleaved_heads;
  // Q, dO (2 bytes each) and fp32 dQ: 8 bytes per element of a head's Q.
  // 64 MiB in all: every head in both modes (seed, 16k, head_dim 64; 8k, head_dim 128).
  for (const BackwardArgs& args : {causal_call(DType::bf16, 1, 8, 8, 16384, 64),
                                   causal_call(DType::fp16, 1, 8, 8, 8192, 128)}) {
    CHECK(interleaved_heads(args) == 8);
    CHECK(interleaved_heads(deterministic(args)) == 8);
  }
  // 16 MiB a head: deterministic four at a time (seed, 16k, head_dim 128; fa, 16k, 16 heads),
  // the default plain.
  for (const int64_t heads : {8, 16}) {
    const BackwardArgs args = causal_call(DType::bf16, 1, heads, heads, 16384, 128);
    CHECK(interleaved_heads(args) == 1);
    CHECK(interleaved_heads(deterministic(args)) == 4);
  }
  // The GPU test's grids (test_gpu_deterministic.cpp): 4 MiB a grid row, 16 at a time; 2 MiB,
  // 32; GQA, a grid row is a kv head with its query heads (2 x 2 MiB), 16.
  CHECK(interleaved_heads(deterministic(causal_call(DType::bf16, 1, 40, 40, 4096, 128))) == 16);
  CHECK(interleaved_heads(deterministic(causal_call(DType::fp16, 2, 40, 40, 4096, 64))) == 32);
  CHECK(interleaved_heads(deterministic(causal_call(DType::fp16, 1, 48, 24, 2048, 128))) == 16);
  // Below 2k rows past the bound (fa, 1k and 512 rows, 256 MiB): plain in both modes.
  for (const int64_t seq : {512, 1024}) {
    const BackwardArgs args = causal_call(DType::bf16, 16384 / seq, 32, 32, seq, 64);
    CHECK(interleaved_heads(args) == 1);
    CHECK(interleaved_heads(deterministic(args)) == 1);
  }
  // A head past the bound on its own: plain order.
  CHECK(interleaved_heads(deterministic(causal_call(DType::bf16, 1, 2, 2, 131072, 128))) == 1);
  // Without a mask key blocks cost the same: plain order.
  BackwardArgs unmasked = deterministic(causal_call(DType::bf16, 1, 8, 8, 4096, 64));
  unmasked.mask = Mask::none;
  CHECK(interleaved_heads(unmasked) == 1);
}

TEST_CASE(
    "wgmma backward: deterministic dQ sums from the last key block down below 2k causal rows "
    "in plain order over two rounds of CTAs",
    "[unit][order]") {
  using detail::sm90::dq_sums_from_last_key;
  constexpr int kSms = 132;
  // The CTAs of a grid: its key blocks of 128.
  const auto ctas = [](const BackwardArgs& args) {
    const AttentionShape& s = args.shape;
    return s.batch * s.heads_kv * ((s.seq_k + 127) / 128);
  };
  // fa at 512 and 1k rows (4096 and 2048 CTAs in plain order), and the GPU test's grids
  // (test_gpu_deterministic.cpp: 1152 and 320 CTAs, plain order): from the last key block.
  BackwardArgs top_left = causal_call(DType::bf16, 1, 160, 40, 1000, 128);
  top_left.mask = Mask::causal_top_left;
  for (const BackwardArgs& args : {causal_call(DType::bf16, 32, 32, 32, 512, 64),
                                   causal_call(DType::fp16, 16, 16, 16, 1024, 128),
                                   causal_call(DType::fp16, 2, 72, 72, 1024, 64), top_left}) {
    INFO("B " << args.shape.batch << " H " << args.shape.heads << " S " << args.shape.seq_q);
    CHECK(dq_sums_from_last_key(deterministic(args), ctas(args), kSms));
    CHECK_FALSE(dq_sums_from_last_key(args, ctas(args), kSms));  // the default has no order
  }
  // From the first key block up: fewer than two rounds of CTAs (seed at 1k rows: 64; 33 kv heads
  // of 1k rows in plain order, 264 CTAs, would take the last key block first, 32 not), an
  // interleaved grid (seed's 8 heads at 1k), 2k rows, no mask, variants.
  const BackwardArgs seed_1k = deterministic(causal_call(DType::fp16, 1, 8, 8, 1024, 64));
  CHECK_FALSE(dq_sums_from_last_key(seed_1k, ctas(seed_1k), kSms));
  CHECK_FALSE(dq_sums_from_last_key(seed_1k, 264, kSms));  // interleaved
  const BackwardArgs gqa = deterministic(causal_call(DType::fp16, 1, 1056, 33, 1024, 64));
  CHECK(dq_sums_from_last_key(gqa, ctas(gqa), kSms));
  const BackwardArgs fewer = deterministic(causal_call(DType::fp16, 1, 1024, 32, 1024, 64));
  CHECK_FALSE(dq_sums_from_last_key(fewer, ctas(fewer), kSms));
  const BackwardArgs long_rows = deterministic(causal_call(DType::bf16, 8, 32, 32, 2048, 64));
  CHECK_FALSE(dq_sums_from_last_key(long_rows, ctas(long_rows), kSms));
  BackwardArgs unmasked = deterministic(causal_call(DType::bf16, 16, 32, 32, 1024, 64));
  unmasked.mask = Mask::none;
  CHECK_FALSE(dq_sums_from_last_key(unmasked, ctas(unmasked), kSms));
  BackwardArgs windowed = deterministic(causal_call(DType::bf16, 16, 32, 32, 1024, 64));
  windowed.window = {256, 0};
  CHECK_FALSE(dq_sums_from_last_key(windowed, ctas(windowed), kSms));
}

TEST_CASE(
    "wgmma backward: deterministic dQ sums rotated without a mask where a key group has at most "
    "as many key blocks as the head has query blocks, at most 16, and no more than SMs",
    "[unit][order]") {
  constexpr int kSms = 132;
  const auto rotates = [](const BackwardArgs& args) {
    return detail::dq_turns_rotate<128, 128>(args, kSms);
  };
  const auto unmasked = [](DType dtype, int64_t batch, int64_t heads, int64_t heads_kv,
                           int64_t seq_q, int64_t seq_k, int64_t head_dim = 64) {
    BackwardArgs args = deterministic(causal_call(dtype, batch, heads, heads_kv, seq_q, head_dim));
    args.shape.seq_k = seq_k;
    args.mask = Mask::none;
    return args;
  };
  // fa at head_dim 64 (16k tokens, 32 heads: 128 MiB of dQ, one key group), 512 to 2k rows:
  // 4 to 16 key blocks a head; from 4k rows (32 key blocks) from the first key block up.
  for (const int64_t seq : {512, 1024, 2048, 4096, 8192, 16384}) {
    INFO("S " << seq);
    const BackwardArgs args = unmasked(DType::bf16, 16384 / seq, 32, 32, seq, seq);
    CHECK(rotates(args) == (seq <= 2048));
    BackwardArgs by_default = args;
    by_default.deterministic = false;
    CHECK_FALSE(rotates(by_default));
    BackwardArgs causal = args;
    causal.mask = Mask::causal_bottom_right;
    CHECK_FALSE(rotates(causal));
    BackwardArgs windowed = args;
    windowed.window = {256, -1};
    CHECK_FALSE(rotates(windowed));
    // Bounded on the right alone (no variant): key blocks past a query block's band meet it not.
    for (const int64_t right : {int64_t{17}, int64_t{2000}}) {
      windowed.window = {-1, right};
      CHECK_FALSE(rotates(windowed));
    }
  }
  // One group of as many blocks with other lengths (1000 rows and 1023 keys: 8 each), GQA; a key
  // block more than query blocks, or fewer; more key blocks than SMs (8 on 7); one key block.
  const BackwardArgs gqa = unmasked(DType::fp16, 8, 32, 8, 1000, 1023);
  CHECK(rotates(gqa));
  CHECK_FALSE((detail::dq_turns_rotate<128, 128>(gqa, 7)));
  CHECK_FALSE(rotates(unmasked(DType::fp16, 8, 32, 8, 1000, 1025)));
  CHECK(rotates(unmasked(DType::fp16, 8, 32, 8, 1025, 1000)));
  CHECK(rotates(unmasked(DType::fp16, 1, 8, 8, 300, 300)));        // 3 key blocks: one group
  CHECK_FALSE(rotates(unmasked(DType::fp16, 1, 8, 8, 100, 100)));  // one key block
  // Key groups (seed at 1k: four of 256 keys): two key blocks of 128 a group, 8 query blocks.
  CHECK(rotates(unmasked(DType::fp16, 1, 8, 8, 1024, 1024)));
  // The column-split kernel at head_dim 128 (blocks of 64): seed 1k, four key blocks a group over
  // 16 query blocks; one group of 2k keys (B = 16, H = 16: 256 MiB of dQ) is 32 key blocks.
  const auto column_split_rotates = [](const BackwardArgs& args) {
    return detail::dq_turns_rotate<64, 64>(args, kSms);
  };
  CHECK(column_split_rotates(unmasked(DType::bf16, 1, 8, 8, 1024, 1024, 128)));
  CHECK(column_split_rotates(unmasked(DType::bf16, 1, 4, 2, 300, 301, 128)));
  CHECK_FALSE(column_split_rotates(unmasked(DType::bf16, 16, 16, 16, 2048, 2048, 128)));
  CHECK_FALSE(column_split_rotates(unmasked(DType::bf16, 1, 8, 8, 60, 1024, 128)));
  // The mma.sync kernels in fp32 (sm80/traits.cuh: query blocks of 32; key blocks of 64 at
  // head_dim 64, of 32 at 128 on a small grid): seed at 1k, four groups of 256 keys (4 or 8 key
  // blocks each); at 2k four groups of 512 keys (8 or 16 key blocks); at 4k, head_dim 128, four
  // groups of 1k keys, 32 key blocks of 32: too many.
  const auto fp32 = [&](int64_t seq, int64_t head_dim) {
    return unmasked(DType::fp32, 1, 8, 8, seq, seq, head_dim);
  };
  CHECK((detail::dq_turns_rotate<32, 64>(fp32(1024, 64), kSms)));
  CHECK((detail::dq_turns_rotate<32, 32>(fp32(1024, 128), kSms)));
  CHECK((detail::dq_turns_rotate<32, 64>(fp32(2048, 64), kSms)));
  CHECK((detail::dq_turns_rotate<32, 32>(fp32(2048, 128), kSms)));
  CHECK_FALSE((detail::dq_turns_rotate<32, 32>(fp32(4096, 128), kSms)));
}

namespace {

// The deterministic dQ sums of one kv head without a mask, in key groups of `group_keys` keys
// (a multiple of kBlockN; 0: one group), simulated in lockstep: at each step every key block
// whose next query block holds its turn (the group's semaphore as the step began) adds its part.
// Returns the steps until every key block has added to every query block of every query head,
// after checking that each (group, query head, query block) sees turns 0, 1, ..., g - 1 once
// each and that no step passes without an add (no key block waits forever).
template <int kBlockM, int kBlockN>
int64_t steps_to_sum_dq(const BackwardArgs& args, detail::DqSumOrder order,
                        int64_t group_keys = 0) {
  const detail::ProblemParams p = detail::problem_params(args);
  const int64_t keys = group_keys > 0 ? group_keys : p.seq_k;
  const int64_t key_blocks = (p.seq_k + kBlockN - 1) / kBlockN;
  const int64_t query_blocks = (p.seq_q + kBlockM - 1) / kBlockM;
  const int64_t groups = (p.seq_k + keys - 1) / keys;
  std::vector<detail::QueryBlockSchedule<kBlockM>> schedules;
  for (int64_t k = 0; k < key_blocks; ++k) {
    schedules.push_back(
        detail::query_block_schedule<kBlockM, kBlockN, false>(p, k * kBlockN, order, group_keys));
    REQUIRE(schedules.back().count == query_blocks * p.heads_per_kv);
  }
  const int64_t sums = p.heads_per_kv * query_blocks;
  std::vector<int> semaphore(size_t(groups * sums), 0);
  std::vector<int64_t> done(size_t(key_blocks), 0);
  int64_t steps = 0;
  for (int64_t left = key_blocks * schedules[0].count; left > 0; ++steps) {
    const std::vector<int> at_start = semaphore;
    int64_t added = 0;
    for (int64_t k = 0; k < key_blocks; ++k) {
      const auto& schedule = schedules[size_t(k)];
      const int64_t it = done[size_t(k)];
      if (it == schedule.count) continue;
      const int64_t head = schedule.head(p, 0, uint32_t(it));
      const int64_t q0 = schedule.q0(p, uint32_t(it));
      const int64_t group = k * kBlockN / keys;
      const int group_blocks =
          int(std::min((group + 1) * keys, p.seq_k) - group * keys + kBlockN - 1) / kBlockN;
      const int turn = order == detail::DqSumOrder::rotated
                           ? detail::dq_turn_rotated(schedule, q0)
                           : detail::dq_turn_from_first<kBlockN>(p, q0, int(k), group * keys);
      REQUIRE(turn >= 0);
      REQUIRE(turn < group_blocks);
      const size_t sum = size_t(group * sums + head * query_blocks + q0 / kBlockM);
      if (at_start[sum] != turn) continue;
      ++semaphore[sum];
      ++done[size_t(k)];
      ++added;
    }
    INFO("step " << steps);
    REQUIRE(added > 0);
    left -= added;
  }
  for (size_t sum = 0; sum < semaphore.size(); ++sum) {
    const int64_t group = int64_t(sum) / sums;
    const int64_t group_blocks =
        (std::min((group + 1) * keys, p.seq_k) - group * keys + kBlockN - 1) / kBlockN;
    CHECK(semaphore[sum] == group_blocks);
  }
  return steps;
}

}  // namespace

TEST_CASE("deterministic dQ sums: rotated, no key block waits for a chain", "[unit][order]") {
  using detail::DqSumOrder;
  // GQA (two query heads a kv head), rows and keys of as many blocks of 128 (8, 8, 4 and 3) in one
  // group: key block k at query block (k + t) mod n at step t.
  for (const auto& [seq_q, seq_k] :
       {std::pair<int64_t, int64_t>{1024, 1024}, {1000, 1023}, {512, 512}, {300, 300}}) {
    BackwardArgs args = deterministic(causal_call(DType::bf16, 1, 2, 1, seq_q, 64));
    args.shape.seq_k = seq_k;
    args.mask = Mask::none;
    const int64_t blocks = (seq_k + 127) / 128;
    const int64_t iterations = 2 * blocks;
    INFO("Sq " << seq_q << " Sk " << seq_k);
    // Rotated: every key block adds at every step; from the first key block up the last one
    // starts n - 1 steps late.
    CHECK(steps_to_sum_dq<128, 128>(args, DqSumOrder::rotated) == iterations);
    CHECK(steps_to_sum_dq<128, 128>(args, DqSumOrder::first_key_first) == iterations + blocks - 1);
  }
  // Fewer key blocks a group than query blocks: groups of 256 keys (two key blocks of 128, four
  // of 64; the last group shorter at 900 keys), one group of fewer key blocks than query blocks
  // (6 on 8: starts 0, 1, 2, 4, 5, 6), and the column-split kernel's blocks of 64.
  struct Case {
    int64_t seq_q, seq_k, group_keys;
    int block;
  };
  for (const Case& c :
       {Case{1024, 1024, 256, 128}, Case{1024, 1024, 256, 64}, Case{1000, 900, 256, 64},
        Case{1000, 700, 0, 128}, Case{300, 301, 0, 64}, Case{1024, 1024, 1024, 64}}) {
    BackwardArgs args = deterministic(causal_call(DType::bf16, 1, 2, 1, c.seq_q, 64));
    args.shape.seq_k = c.seq_k;
    args.mask = Mask::none;
    INFO("Sq " << c.seq_q << " Sk " << c.seq_k << " group keys " << c.group_keys << " block "
               << c.block);
    const int64_t keys = c.group_keys > 0 ? c.group_keys : c.seq_k;
    const int64_t group_blocks = (std::min(keys, c.seq_k) + c.block - 1) / c.block;
    const int64_t iterations = 2 * ((c.seq_q + c.block - 1) / c.block);
    const auto steps = [&](DqSumOrder order) {
      return c.block == 128 ? steps_to_sum_dq<128, 128>(args, order, c.group_keys)
                            : steps_to_sum_dq<64, 64>(args, order, c.group_keys);
    };
    CHECK(steps(DqSumOrder::rotated) == iterations);
    CHECK(steps(DqSumOrder::first_key_first) == iterations + group_blocks - 1);
  }
  // The mma.sync kernels' blocks in fp32: query blocks of 32, key blocks of 64 or 32, groups of
  // 256 keys (4 or 8 key blocks over 32 query blocks; at 900 keys the last group is shorter).
  for (const int64_t seq_k : {int64_t{1024}, int64_t{900}}) {
    BackwardArgs args = deterministic(causal_call(DType::fp32, 1, 2, 1, 1024, 64));
    args.shape.seq_k = seq_k;
    args.mask = Mask::none;
    INFO("Sk " << seq_k);
    const int64_t iterations = 2 * 32;
    CHECK(steps_to_sum_dq<32, 64>(args, DqSumOrder::rotated, 256) == iterations);
    CHECK(steps_to_sum_dq<32, 64>(args, DqSumOrder::first_key_first, 256) == iterations + 3);
    CHECK(steps_to_sum_dq<32, 32>(args, DqSumOrder::rotated, 256) == iterations);
    CHECK(steps_to_sum_dq<32, 32>(args, DqSumOrder::first_key_first, 256) == iterations + 7);
  }
}
