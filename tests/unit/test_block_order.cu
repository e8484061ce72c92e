// The order in which CTAs take (block, head) tiles (common/schedule.cuh, block_order_of()) and
// how many heads the wgmma backward interleaves (sm90/backward.cuh, interleaved_heads()), on
// the host: every tile of a grid exactly once in any grouping, the heaviest blocks of a group's
// heads first, and the groups each call gets. A GPU test compares grouped grids' gradients with
// those of each kv head alone (test_gpu_deterministic.cpp).
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
    "wgmma backward: deterministic dQ sums rotated without a mask on as many key blocks as "
    "query blocks, in one key group, at most one key block an SM",
    "[unit][order]") {
  constexpr int kSms = 132;
  const auto rotates = [](const BackwardArgs& args) {
    return detail::sm90::dq_turns_rotate<128, 128>(args, kSms);
  };
  const auto unmasked = [](DType dtype, int64_t batch, int64_t heads, int64_t heads_kv,
                           int64_t seq_q, int64_t seq_k) {
    BackwardArgs args = deterministic(causal_call(dtype, batch, heads, heads_kv, seq_q, 64));
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
  // As many blocks with other lengths (1000 rows and 1023 keys: 8 each), GQA; a key block too
  // few or too many; more key blocks than SMs (8 on 7); key groups (seed at 1k: four).
  const BackwardArgs gqa = unmasked(DType::fp16, 8, 32, 8, 1000, 1023);
  CHECK(rotates(gqa));
  CHECK_FALSE((detail::sm90::dq_turns_rotate<128, 128>(gqa, 7)));
  CHECK_FALSE(rotates(unmasked(DType::fp16, 8, 32, 8, 1000, 1025)));
  CHECK_FALSE(rotates(unmasked(DType::fp16, 8, 32, 8, 1025, 1000)));
  CHECK_FALSE(rotates(unmasked(DType::fp16, 1, 8, 8, 1024, 1024)));
  CHECK(rotates(unmasked(DType::fp16, 1, 8, 8, 300, 300)));        // 3 key blocks: one group
  CHECK_FALSE(rotates(unmasked(DType::fp16, 1, 8, 8, 100, 100)));  // one key block
  // Kernels whose query blocks are shorter than their key blocks (head_dim 128: 64 rows).
  CHECK_FALSE((
      detail::sm90::dq_turns_rotate<64, 128>(unmasked(DType::bf16, 16, 16, 16, 1024, 1024), kSms)));
}

namespace {

// The deterministic dQ sums of one kv head without a mask (key and query blocks of 128),
// simulated in lockstep: at each step every key block whose next query block holds its turn
// (the semaphore as the step began) adds its part. Returns the steps until every key block has
// added to every query block of every query head, after checking that each (query head, query
// block) sees turns 0, 1, ..., n - 1 once each and that no step passes without an add (no key
// block waits forever).
int64_t steps_to_sum_dq(const BackwardArgs& args, detail::DqSumOrder order) {
  constexpr int kBlock = 128;
  const detail::ProblemParams p = detail::problem_params(args);
  const int64_t key_blocks = (p.seq_k + kBlock - 1) / kBlock;
  const int64_t query_blocks = (p.seq_q + kBlock - 1) / kBlock;
  std::vector<detail::QueryBlockSchedule<kBlock>> schedules;
  for (int64_t k = 0; k < key_blocks; ++k) {
    schedules.push_back(detail::query_block_schedule<kBlock, kBlock, false>(p, k * kBlock, order));
    REQUIRE(schedules.back().count == query_blocks * p.heads_per_kv);
  }
  std::vector<int> semaphore(size_t(p.heads_per_kv * query_blocks), 0);
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
      const int turn = order == detail::DqSumOrder::rotated
                           ? detail::dq_turn_rotated(schedule, q0, int(k))
                           : detail::dq_turn_from_first<kBlock>(p, q0, int(k), 0);
      REQUIRE(turn >= 0);
      REQUIRE(turn < key_blocks);
      const size_t sum = size_t(head * query_blocks + q0 / kBlock);
      if (at_start[sum] != turn) continue;
      ++semaphore[sum];
      ++done[size_t(k)];
      ++added;
    }
    INFO("step " << steps);
    REQUIRE(added > 0);
    left -= added;
  }
  for (const int adds : semaphore) CHECK(adds == key_blocks);
  return steps;
}

}  // namespace

TEST_CASE("deterministic dQ sums: rotated, no key block waits for a chain", "[unit][order]") {
  // GQA (two query heads a kv head), rows and keys of as many blocks (8, 8, 4 and 3).
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
    CHECK(steps_to_sum_dq(args, detail::DqSumOrder::rotated) == iterations);
    CHECK(steps_to_sum_dq(args, detail::DqSumOrder::first_key_first) == iterations + blocks - 1);
  }
}
