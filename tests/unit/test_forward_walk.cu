// The wgmma forward's launch choices, worked out on the host (sm90/forward.cuh): tall tiles and
// persistent CTAs on 132 SMs (an H100 or H200 SXM) for the shapes that the GPU tests rely on to
// reach those kernels. A change of the estimates that moves one of these shapes fails here, on
// a machine without a GPU, instead of leaving a GPU test on a kernel it does not mean to check.
#include <cstdint>

#include <catch2/catch.hpp>

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
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 1100, 1100, 1, 48)));
  CHECK(takes_tall_tiles<64>(dense_call(64, Mask::causal_top_left, 1536, 1536, 2, 16)));
  // The launch-name test's causal grid stays on 128-row tiles.
  CHECK_FALSE(takes_tall_tiles<64>(dense_call(64, Mask::causal_bottom_right, 512, 512, 2, 8)));
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
