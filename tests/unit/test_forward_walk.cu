// The wgmma forward's launch choices, worked out on the host (sm90/forward.cuh): tall tiles and
// persistent CTAs on 132 SMs (an H100 or H200 SXM) for the shapes that the GPU tests rely on to
// reach those kernels. A change of the estimates that moves one of these shapes fails here, on
// a machine without a GPU, instead of leaving a GPU test on a kernel it does not mean to check.
// And the 32-bit split of a dense launch's tiles (DenseTileSplit, on FastDivisor): the blocks of
// forward_block() for every tile.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <type_traits>

#include "kernels/sm90/forward.cuh"

namespace {

namespace detail = cuflash::detail;
namespace sm90 = cuflash::detail::sm90;
using cuflash::AttentionShape;
using cuflash::DType;
using cuflash::ForwardArgs;
using cuflash::Mask;
using cuflash::Window;

constexpr int64_t kMultiprocessors = 132;

ForwardArgs dense_call(int64_t head_dim, Mask mask, int64_t seq_q, int64_t seq_k, int64_t batch,
                       int64_t heads, Window window = {-1, -1}) {
  ForwardArgs args{};
  args.shape = AttentionShape{batch, heads, heads, seq_q, seq_k, head_dim};
  args.dtype = DType::bf16;
  args.mask = mask;
  args.window = window;
  return args;
}

template <int kHeadDim>
bool takes_tall_tiles(const ForwardArgs& args) {
  return sm90::tall_tiles_are_faster<kHeadDim>(detail::problem_params(args), args.shape,
                                               kMultiprocessors);
}

// Whether CTAs walk several 128-row tiles: more tiles than SMs and the walk's estimate ahead.
// kLeftBound: the window kernel's estimate.
template <int kHeadDim, bool kLeftBound = false>
bool walks_wide_tiles(const ForwardArgs& args) {
  using Traits = sm90::ForwardTraits<kHeadDim>;
  const sm90::TileWalk walk = sm90::forward_walk<Traits>(args.shape, kMultiprocessors);
  return walk.tiles > walk.ctas &&
         sm90::persistent_walk_is_faster<Traits, kLeftBound>(detail::problem_params(args), walk);
}

}  // namespace

TEST_CASE("wgmma forward: the tall-tile GPU test's shapes take tall tiles on 132 SMs",
          "[unit][forward_walk]") {
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::none, 384, 384, 1, 66)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::none, 300, 1023, 2, 66)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 1536, 1600, 1, 24)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 1100, 1100, 1, 64)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_top_left, 1536, 1536, 2, 16)));
  // The launch-name test's causal grid stays on 128-row tiles.
  CHECK_FALSE(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 512, 512, 2, 8)));
}

// The choice as timed on an H100 (kTallBlockCostPercent): the `fa` sweep's head_dim 64 causal grid
// of 2048 rows took 0.977-0.992 of its time on 128-row tiles (four rounds); 4096 rows stay tall.
TEST_CASE("wgmma forward: head_dim 64 causal takes tall tiles from 4096 rows of the fa sweep",
          "[unit][forward_walk]") {
  CHECK_FALSE(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 1024, 1024, 16, 32)));
  CHECK_FALSE(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 2048, 2048, 8, 32)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 4096, 4096, 4, 32)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::none, 2048, 2048, 8, 32)));
}

TEST_CASE("wgmma forward: the persistent GPU test's shapes walk 128-row tiles on 132 SMs",
          "[unit][forward_walk]") {
  for (const Mask mask : {Mask::none, Mask::causal_bottom_right, Mask::causal_top_left}) {
    INFO("mask " << static_cast<int>(mask));
    const ForwardArgs d64 = dense_call(64, mask, 1000, 257, 2, 16);
    CHECK_FALSE(takes_tall_tiles<64>(d64));
    CHECK(walks_wide_tiles<64>(d64));
    CHECK(walks_wide_tiles<128>(dense_call(128, mask, 1000, 257, 2, 16)));
    // Head_dim 96 with a window bounded on the left: the window kernel, on 128's tiles.
    const Window window{100, mask == Mask::none ? 30 : 0};
    CHECK(walks_wide_tiles<128, true>(dense_call(96, mask, 1000, 257, 2, 16, window)));
  }
  // Why 1000 rows: at 600 the head_dim 64 grid without a mask runs 128 tall tiles, one a CTA.
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::none, 600, 257, 2, 16)));
}

TEST_CASE("FastDivisor: n / d for n < 2^31", "[unit][forward_walk]") {
  std::mt19937 generator(7);
  int64_t checked = 0;
  auto check = [&](uint32_t d, uint32_t n) {
    if (detail::FastDivisor(d).quotient(n) != n / d) FAIL("d " << d << ", n " << n);
    ++checked;
  };
  constexpr uint32_t kLargest = 0x7fffffffu;
  for (uint32_t d = 1; d <= 5000; ++d) {
    for (const uint32_t n :
         {0u, 1u, d - 1, d, d + 1, 2 * d - 1, kLargest / d * d - 1, kLargest / d * d, kLargest}) {
      check(d, n);
    }
    for (int i = 0; i < 20; ++i) check(d, generator() & kLargest);
  }
  for (int i = 0; i < 100000; ++i) {  // divisors up to 2^31 - 1, powers of two among them
    const uint32_t d = i % 4 == 0 ? 1u << (i / 4 % 31) : generator() % kLargest + 1;
    check(d, generator() & kLargest);
    check(d, kLargest);
    check(d, d - 1);
  }
  CHECK(checked == 5000 * 29 + 300000);
}

TEST_CASE("wgmma forward: the 32-bit tile split gives forward_block()'s blocks",
          "[unit][forward_walk]") {
  using Traits = sm90::ForwardTraits<64>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  struct Case {
    Mask mask;
    int64_t seq_q, seq_k, batch, heads, heads_kv;
    Window window;
  };
  const Case cases[] = {{Mask::none, 1, 1, 1, 1, 1, {-1, -1}},
                        {Mask::causal_bottom_right, 1023, 1100, 3, 12, 4, {-1, -1}},
                        {Mask::causal_top_left, 513, 203, 5, 7, 7, {-1, -1}},
                        {Mask::none, 300, 1023, 2, 32, 1, {100, 30}},
                        {Mask::causal_bottom_right, 4096, 4096, 1, 6, 3, {255, 0}}};
  for (const Case& c : cases) {
    ForwardArgs args = dense_call(64, c.mask, c.seq_q, c.seq_k, c.batch, c.heads, c.window);
    args.shape.heads_kv = c.heads_kv;
    const detail::ProblemParams p = detail::problem_params(args);
    const sm90::TileWalk walk = sm90::forward_walk<Traits>(args.shape, kMultiprocessors);
    const sm90::DenseTileSplit split(walk.num_m_blocks, p);
    INFO("seq " << c.seq_q << "x" << c.seq_k << ", batch " << c.batch << ", heads " << c.heads
                << "/" << c.heads_kv << ", window " << c.window.left);
    REQUIRE(walk.tiles == walk.num_m_blocks * c.batch * c.heads);
    for (int64_t tile = 0; tile < walk.tiles; ++tile) {
      const auto expect = [&](auto left_bound) {
        constexpr bool kLeftBound = decltype(left_bound)::value;
        const detail::ForwardBlock a = split.block<kBlockM, kBlockN, kLeftBound>(p, tile);
        const detail::ForwardBlock b = detail::forward_block<kBlockM, kBlockN, kLeftBound>(
            p, 0, walk.num_m_blocks, walk.order(tile));
        if (a.bh != b.bh || a.batch != b.batch || a.head != b.head || a.kv_head != b.kv_head ||
            a.q0 != b.q0 || a.first_key_block != b.first_key_block ||
            a.key_blocks != b.key_blocks) {
          FAIL("tile " << tile << ", left bound " << kLeftBound);
        }
      };
      expect(std::false_type{});
      expect(std::true_type{});
    }
  }
}
