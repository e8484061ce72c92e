// The order in which CTAs take (block, head) tiles (common/schedule.cuh, block_order_of()) and
// how many heads the wgmma backward interleaves (sm90/backward.cuh, interleaved_heads()), on
// the host: every tile of a grid exactly once in any grouping, the heaviest blocks of a group's
// heads first, and the groups each call gets. A GPU test compares grouped grids' gradients with
// those of each kv head alone (test_gpu_deterministic.cpp).
#include <catch2/catch.hpp>
#include <cstdint>
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
