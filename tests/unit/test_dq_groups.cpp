// The deterministic backward's key groups (lib/src/workspace.h): each group's accumulator is
// written only by its own key blocks' first turns, so every group the dQ conversion adds must
// hold keys, and the groups must cover every key.
#include <catch2/catch.hpp>
#include <cstdint>

#include "workspace.h"

namespace {

using cuflash::AttentionShape;
using cuflash::BackwardArgs;
using cuflash::detail::dq_groups_of;
using cuflash::detail::DqGroups;

BackwardArgs deterministic_args(int64_t seq_q, int64_t seq_k, int64_t head_dim) {
  BackwardArgs args{};
  args.shape = AttentionShape{1, 4, 2, seq_q, seq_k, head_dim};
  args.deterministic = true;
  return args;
}

}  // namespace

TEST_CASE("dq groups: every group holds keys and together they hold them all", "[unit][dq]") {
  for (int64_t head_dim : {64, 128}) {
    for (int64_t seq_k = 1; seq_k <= 5000; seq_k += 7) {
      const DqGroups groups = dq_groups_of(deterministic_args(300, seq_k, head_dim));
      INFO("seq_k " << seq_k << " head_dim " << head_dim << ": " << groups.count << " groups of "
                    << groups.keys << " keys");
      REQUIRE(groups.count >= 1);
      CHECK((groups.count - 1) * groups.keys < seq_k);  // the last group starts before seq_k
      CHECK(groups.count * groups.keys >= seq_k);       // and ends at or past it
    }
  }
}

// 1100 keys are 9 blocks of 128: four groups wanted, 384 keys each after rounding, and three
// hold them all (the fourth would start at key 1152).
TEST_CASE("dq groups: 1100 keys sum in three groups of 384", "[unit][dq]") {
  const DqGroups groups = dq_groups_of(deterministic_args(300, 1100, 64));
  CHECK(groups.keys == 384);
  CHECK(groups.count == 3);
  CHECK(groups.first_turn_stores);
}

// The band without a left end (no mask, a causal mask, a window bounded on the right only)
// sums in groups whose first turns store; a window with a left end, or a varlen batch, keeps one
// group that adds to zeroed rows. 2100 keys: four groups of 640.
TEST_CASE("dq groups: causal masks and right-only windows sum in groups, left ends do not",
          "[unit][dq]") {
  const auto groups_with = [](cuflash::Mask mask, cuflash::Window window) {
    BackwardArgs args = deterministic_args(300, 2100, 64);
    args.mask = mask;
    args.window = window;
    return dq_groups_of(args);
  };
  for (const auto mask :
       {cuflash::Mask::none, cuflash::Mask::causal_bottom_right, cuflash::Mask::causal_top_left}) {
    const DqGroups in_groups = groups_with(mask, cuflash::Window{-1, 50});
    CHECK(in_groups.count == 4);
    CHECK(in_groups.keys == 640);
    CHECK(in_groups.first_turn_stores);
    const DqGroups left_end = groups_with(mask, cuflash::Window{700, -1});
    CHECK(left_end.count == 1);
    CHECK_FALSE(left_end.first_turn_stores);
  }
  CHECK(groups_with(cuflash::Mask::causal_bottom_right, cuflash::Window{}).count == 4);
  BackwardArgs varlen = deterministic_args(300, 2100, 64);
  const int32_t never_read[2] = {0, 300};  // (the host functions only test for a pointer)
  varlen.varlen.cu_seqlens_q = never_read;
  CHECK(dq_groups_of(varlen).count == 1);
  CHECK_FALSE(dq_groups_of(varlen).first_turn_stores);
  BackwardArgs not_deterministic = deterministic_args(300, 2100, 64);
  not_deterministic.deterministic = false;
  CHECK(dq_groups_of(not_deterministic).count == 1);
  CHECK_FALSE(dq_groups_of(not_deterministic).first_turn_stores);
}

// The workspace's size never shrinks as the head_dim grows, supported or not (callers size one
// workspace for the largest of several shapes): 250, which no kernel takes, needs as much as 248.
TEST_CASE("workspace size: never shrinks as the head_dim grows", "[unit][workspace]") {
  for (const bool deterministic : {false, true}) {
    for (const int64_t seq : {1, 300, 2100}) {
      size_t previous = 0;
      for (int64_t head_dim = 1; head_dim <= 300; ++head_dim) {
        const size_t bytes = cuflash::detail::workspace_bytes(
            AttentionShape{2, 4, 2, seq, seq, head_dim}, deterministic);
        INFO("head_dim " << head_dim << " seq " << seq << " deterministic " << deterministic);
        REQUIRE(bytes >= previous);
        previous = bytes;
      }
    }
  }
}
