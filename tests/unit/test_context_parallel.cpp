// Context-parallel attention on the host: the partition plan (chunks, ownership, ring steps,
// skipped blocks, balance) checked against a visibility rule written out here from the
// definitions of the masks and the window.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuflash/context_parallel/plan.h"

namespace cp = cuflash::context_parallel;
using cuflash::Mask;
using cuflash::Window;

namespace {

// Whether query i sees key j, from the definitions (types.h, problem.h), not from VisibleBand.
bool sees(Mask mask, Window window, int64_t seq_q, int64_t seq_k, int64_t i, int64_t j) {
  const int64_t diagonal = mask == Mask::causal_top_left ? i : i + seq_k - seq_q;
  if (j < 0 || j >= seq_k) return false;
  if (mask != Mask::none && j > diagonal) return false;
  if (window.left >= 0 && j < diagonal - window.left) return false;
  if (window.right >= 0 && j > diagonal + window.right) return false;
  return true;
}

struct MaskCase {
  const char* name;
  Mask mask;
  Window window;
};

const std::vector<MaskCase> kMaskCases{
    {"none", Mask::none, {}},
    {"causal bottom-right", Mask::causal_bottom_right, {}},
    {"causal top-left", Mask::causal_top_left, {}},
    {"window (20, 5)", Mask::none, {20, 5}},
    {"causal + window (30, -1)", Mask::causal_bottom_right, {30, -1}},
    {"window (0, 0) on the diagonal only", Mask::none, {0, 0}},
};

struct Lengths {
  int64_t seq_q, seq_k;
};

const std::vector<Lengths> kLengths{{1, 1}, {7, 7}, {113, 113}, {1023, 1023}, {113, 1023},
                                    {1023, 113}};

std::string describe(const MaskCase& m, Lengths l, int ranks) {
  return std::string(m.name) + ", " + std::to_string(l.seq_q) + " x " + std::to_string(l.seq_k) +
         ", " + std::to_string(ranks) + " ranks";
}

}  // namespace

TEST_CASE("context-parallel chunks cover the sequence with sizes differing by at most one",
          "[context_parallel]") {
  for (const int64_t length : {int64_t(1), int64_t(7), int64_t(113), int64_t(1023),
                               int64_t(1) << 20}) {
    for (int count = 1; count <= 16; ++count) {
      const std::vector<cp::Chunk> chunks = cp::split_into_chunks(length, count);
      REQUIRE(int(chunks.size()) == count);
      REQUIRE(chunks.front().begin == 0);
      REQUIRE(chunks.back().end == length);
      int64_t smallest = length, largest = 0;
      for (size_t c = 0; c < chunks.size(); ++c) {
        if (c > 0) REQUIRE(chunks[c].begin == chunks[c - 1].end);
        smallest = std::min(smallest, chunks[c].size());
        largest = std::max(largest, chunks[c].size());
      }
      REQUIRE(largest - smallest <= 1);
    }
  }
}

TEST_CASE("context-parallel plan: every query row belongs to exactly one rank (zig-zag)",
          "[context_parallel]") {
  for (const int ranks : {1, 2, 3, 4, 8}) {
    for (const int64_t seq : {int64_t(1), int64_t(7), int64_t(113), int64_t(1023)}) {
      const cp::Plan plan = cp::make_plan(seq, seq + 5, Mask::none, {}, ranks);
      REQUIRE(int(plan.query_chunks.size()) == 2 * ranks);
      REQUIRE(int(plan.rank_plans.size()) == ranks);
      std::vector<int> owners(size_t(seq), 0);
      for (int r = 0; r < ranks; ++r) {
        const auto& chunks = plan.rank_plans[size_t(r)].query_chunks;
        REQUIRE(chunks[0] == r);
        REQUIRE(chunks[1] == 2 * ranks - 1 - r);
        for (const int c : chunks) {
          const cp::Chunk& rows = plan.query_chunks[size_t(c)];
          for (int64_t i = rows.begin; i < rows.end; ++i) ++owners[size_t(i)];
        }
      }
      for (const int owner_count : owners) REQUIRE(owner_count == 1);
    }
  }
}

TEST_CASE("context-parallel plan: the ring passes every K/V shard to every rank once",
          "[context_parallel]") {
  for (const int ranks : {1, 2, 3, 4, 8}) {
    const cp::Plan plan = cp::make_plan(100, 100, Mask::none, {}, ranks);
    for (int r = 0; r < ranks; ++r) {
      const cp::RankPlan& rank = plan.rank_plans[size_t(r)];
      REQUIRE(int(rank.steps.size()) == ranks);
      REQUIRE(rank.steps[0].kv_owner == r);  // its own shard first: no wait for a transfer
      std::vector<int> held(size_t(ranks), 0);
      for (size_t s = 0; s < rank.steps.size(); ++s) {
        const cp::RingStep& step = rank.steps[s];
        ++held[size_t(step.kv_owner)];
        REQUIRE(step.key_chunks == cp::owned_chunks(step.kv_owner, ranks));
        // What rank r holds at step s + 1 is what rank r - 1 held at step s: one hop a step.
        if (s + 1 < rank.steps.size()) {
          const int previous = (r - 1 + ranks) % ranks;
          REQUIRE(plan.rank_plans[size_t(previous)].steps[s].kv_owner ==
                  rank.steps[s + 1].kv_owner);
        }
      }
      for (const int times : held) REQUIRE(times == 1);
    }
  }
}

TEST_CASE("context-parallel plan: every visible pair is computed exactly once and skipped "
          "blocks hide every pair", "[context_parallel]") {
  for (const MaskCase& m : kMaskCases) {
    for (const Lengths l : kLengths) {
      for (const int ranks : {1, 2, 3, 4, 8}) {
        DYNAMIC_SECTION(describe(m, l, ranks)) {
          const cp::Plan plan = cp::make_plan(l.seq_q, l.seq_k, m.mask, m.window, ranks);
          std::vector<int> computed(size_t(l.seq_q * l.seq_k), 0);
          int64_t visible_in_plan = 0;
          for (const cp::RankPlan& rank : plan.rank_plans) {
            int64_t rank_pairs = 0;
            for (const cp::RingStep& step : rank.steps) {
              for (const cp::Block& block : step.blocks) {
                const cp::Chunk& rows = plan.query_chunks[size_t(block.query_chunk)];
                const cp::Chunk& keys = plan.key_chunks[size_t(block.key_chunk)];
                int64_t block_pairs = 0;
                for (int64_t i = rows.begin; i < rows.end; ++i) {
                  for (int64_t j = keys.begin; j < keys.end; ++j) {
                    ++computed[size_t(i * l.seq_k + j)];
                    block_pairs += sees(m.mask, m.window, l.seq_q, l.seq_k, i, j) ? 1 : 0;
                  }
                }
                CHECK(block_pairs > 0);  // a block in the plan has work
                CHECK(block.visible_pairs == block_pairs);
                rank_pairs += block_pairs;
              }
            }
            REQUIRE(rank.visible_pairs == rank_pairs);
            visible_in_plan += rank_pairs;
          }
          // Visible: in exactly one block. Hidden: in at most one (a block the plan keeps may
          // hold hidden pairs next to visible ones).
          int64_t visible = 0, visible_not_once = 0, hidden_twice = 0;
          for (int64_t i = 0; i < l.seq_q; ++i) {
            for (int64_t j = 0; j < l.seq_k; ++j) {
              const int times = computed[size_t(i * l.seq_k + j)];
              if (sees(m.mask, m.window, l.seq_q, l.seq_k, i, j)) {
                ++visible;
                visible_not_once += times != 1 ? 1 : 0;
              } else {
                hidden_twice += times > 1 ? 1 : 0;
              }
            }
          }
          REQUIRE(visible_not_once == 0);
          REQUIRE(hidden_twice == 0);
          REQUIRE(plan.total_visible_pairs() == visible);
          REQUIRE(visible_in_plan == visible);
        }
      }
    }
  }
}

TEST_CASE("context-parallel plan: a narrow window skips the blocks it cannot see",
          "[context_parallel]") {
  const int ranks = 4;
  const cp::Plan plan = cp::make_plan(1023, 1023, Mask::none, {16, 0}, ranks);
  int64_t blocks = 0;
  for (const cp::RankPlan& rank : plan.rank_plans) {
    for (const cp::RingStep& step : rank.steps) blocks += int64_t(step.blocks.size());
  }
  // Of the (2N)^2 chunk pairs only the diagonal ones and those just below it are in reach.
  REQUIRE(blocks < 2 * (2 * ranks));
  REQUIRE(blocks >= 2 * ranks);
}

TEST_CASE("context-parallel plan: causal work is balanced over the ranks", "[context_parallel]") {
  for (const Mask mask : {Mask::causal_bottom_right, Mask::causal_top_left}) {
    for (const int64_t seq : {int64_t(1) << 20, (int64_t(1) << 20) + 7, int64_t(1023),
                              int64_t(131), int64_t(113)}) {
      for (const int ranks : {2, 4, 8}) {
        const cp::Plan plan = cp::make_plan(seq, seq, mask, {}, ranks);
        INFO(seq << " positions, " << ranks << " ranks, imbalance " << plan.imbalance());
        REQUIRE(plan.total_visible_pairs() == seq * (seq + 1) / 2);
        REQUIRE(plan.imbalance() < 0.02);
        REQUIRE(plan.imbalance() >= 0.0);
      }
    }
  }
  SECTION("contiguous halves instead of the zig-zag would not be") {
    // Rank 0 with chunks 0 and 1 of 4 (the first half) against rank 1 with chunks 2 and 3.
    const cp::Plan plan = cp::make_plan(1024, 1024, Mask::causal_bottom_right, {}, 2);
    int64_t first_half = 0;
    for (const int c : {0, 1}) {
      first_half += cp::count_visible_pairs(plan.band, 1024, plan.query_chunks[size_t(c)],
                                            cp::Chunk{0, 1024});
    }
    const int64_t second_half = plan.total_visible_pairs() - first_half;
    REQUIRE(double(second_half) / double(first_half) > 2.5);
  }
}

TEST_CASE("context-parallel plan: invalid arguments name the argument", "[context_parallel]") {
  REQUIRE_THROWS_WITH(cp::make_plan(0, 8, Mask::none, {}, 2), Catch::Contains("seq_q"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 0, Mask::none, {}, 2), Catch::Contains("seq_k"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 8, Mask::none, {}, 0), Catch::Contains("ranks"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 8, Mask::none, {-2, 0}, 2), Catch::Contains("window"));
}
