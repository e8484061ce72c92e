// Context-parallel attention on the host: the partition plan (chunks, ownership, ring steps,
// skipped blocks, balance) checked against a visibility rule written out here from the
// definitions of the masks and the window, and the single-process forward over the reference
// checked against the plain forward, with every mask, GQA, softcap and ALiBi.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuflash/context_parallel/plan.h"
#include "cuflash/reference/attention_ref.h"
#include "cuflash/reference/context_parallel.h"
#include "unit_test_util.h"

namespace cp = cuflash::context_parallel;
namespace ref = cuflash::reference;
using cuflash::Mask;
using cuflash::Problem;
using cuflash::VisibleBand;
using cuflash::Window;
using cuflash::kUnboundedBand;
using cuflash::unit_test::random_values;
using Vec = std::vector<double>;

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

TEST_CASE("context-parallel shards: each rank's local rows map one to one onto its chunks",
          "[context_parallel]") {
  for (const int ranks : {1, 2, 3, 8}) {
    for (const int64_t seq : {int64_t(1), int64_t(7), int64_t(113), int64_t(1023)}) {
      const std::vector<cp::Chunk> chunks = cp::split_into_chunks(seq, 2 * ranks);
      std::vector<int> seen(size_t(seq), 0);
      int64_t largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const cp::ShardRows shard = cp::shard_rows(chunks, r);
        REQUIRE(shard.chunk_ids == cp::owned_chunks(r, ranks));
        largest = std::max(largest, shard.size());
        // Local row l of chunk c holds global row chunks[c].begin + l - local_begin(c).
        int64_t local = 0;
        for (const int c : shard.chunk_ids) {
          REQUIRE(shard.local_begin(c) == local);
          for (int64_t i = chunks[size_t(c)].begin; i < chunks[size_t(c)].end; ++i) {
            ++seen[size_t(i)];
          }
          local += chunks[size_t(c)].size();
        }
        REQUIRE(local == shard.size());
      }
      for (const int count : seen) REQUIRE(count == 1);
      REQUIRE(cp::largest_shard(chunks) == largest);
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

TEST_CASE("context-parallel plan: visible pairs counted in closed form equal a row-by-row count",
          "[context_parallel]") {
  // Row r sees keys [max(band.begin(r), keys.begin), min(band.end(r), keys.end)).
  const auto by_rows = [](const VisibleBand& band, int64_t seq_k, const cp::Chunk& queries,
                          const cp::Chunk& keys) {
    int64_t pairs = 0;
    for (int64_t row = queries.begin; row < queries.end; ++row) {
      const int64_t first = std::max(band.begin(row), keys.begin);
      const int64_t end = std::min(band.end(row, seq_k), keys.end);
      pairs += std::max<int64_t>(end - first, 0);
    }
    return pairs;
  };
  std::mt19937_64 random(7);
  const auto pick = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(random);
  };
  int checked_nonzero = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t seq_q = pick(1, 300), seq_k = pick(1, 300);
    VisibleBand band;
    band.offset = pick(-seq_q, seq_k);
    band.left = pick(0, 4) == 0 ? kUnboundedBand : pick(0, 200);
    band.right = pick(0, 4) == 0 ? kUnboundedBand : pick(0, 200);
    const int64_t qb = pick(0, seq_q), kb = pick(0, seq_k);
    const cp::Chunk queries{qb, pick(qb, seq_q)}, keys{kb, pick(kb, seq_k)};
    const int64_t expected = by_rows(band, seq_k, queries, keys);
    INFO("offset " << band.offset << " left " << band.left << " right " << band.right
                   << " queries " << queries.begin << ".." << queries.end << " keys "
                   << keys.begin << ".." << keys.end << " seq_k " << seq_k);
    REQUIRE(cp::count_visible_pairs(band, seq_k, queries, keys) == expected);
    checked_nonzero += expected > 0;
  }
  CHECK(checked_nonzero > 5000);  // the trials reach visible blocks, not only empty ones
}

TEST_CASE("context-parallel plan: invalid arguments name the argument", "[context_parallel]") {
  REQUIRE_THROWS_WITH(cp::make_plan(0, 8, Mask::none, {}, 2), Catch::Contains("seq_q"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 0, Mask::none, {}, 2), Catch::Contains("seq_k"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 8, Mask::none, {}, 0), Catch::Contains("ranks"));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 8, Mask::none, {}, cp::kMaxRanks + 1),
                      Catch::Contains("ranks"));
  REQUIRE_NOTHROW(cp::make_plan(8, 8, Mask::none, {}, cp::kMaxRanks));
  REQUIRE_THROWS_WITH(cp::make_plan(8, 8, Mask::none, {-2, 0}, 2), Catch::Contains("window"));
}

namespace {

Problem cp_problem(const MaskCase& m, Lengths l) {
  Problem p;
  p.shape.batch = 2;
  p.shape.heads = 4;
  p.shape.heads_kv = 2;  // grouped-query attention throughout
  p.shape.seq_q = l.seq_q;
  p.shape.seq_k = l.seq_k;
  p.shape.head_dim = 8;
  p.mask = m.mask;
  p.window = m.window;
  return p;
}

// |a - b| within float64 rounding of the larger magnitude; +inf (rows that see no key) exactly.
int64_t count_differences(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  int64_t differences = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isinf(a[i]) || std::isinf(b[i])
                          ? a[i] == b[i]
                          : std::abs(a[i] - b[i]) <= 1e-12 * std::max(1.0, std::abs(b[i]));
    differences += same ? 0 : 1;
  }
  return differences;
}

void check_against_forward(const Problem& p, int ranks) {
  const Vec q = random_values(p.shape.q_elements(), 1);
  const Vec k = random_values(p.shape.kv_elements(), 2);
  const Vec v = random_values(p.shape.kv_elements(), 3);
  const ref::ForwardResult expected = ref::forward(p, q, k, v);
  const ref::ForwardResult got = ref::context_parallel_forward(p, ranks, q, k, v);
  CHECK(count_differences(got.out, expected.out) == 0);
  CHECK(count_differences(got.lse, expected.lse) == 0);
}

}  // namespace

TEST_CASE("context-parallel forward equals the plain forward: every mask and GQA and uneven chunks",
          "[context_parallel][reference]") {
  for (const MaskCase& m : kMaskCases) {
    for (const Lengths l : kLengths) {
      for (const int ranks : {1, 2, 3, 4}) {
        DYNAMIC_SECTION(describe(m, l, ranks)) { check_against_forward(cp_problem(m, l), ranks); }
      }
    }
  }
}

TEST_CASE("context-parallel forward equals the plain forward with softcap and ALiBi",
          "[context_parallel][reference][variants]") {
  for (const MaskCase& m : kMaskCases) {
    for (const Lengths l : {Lengths{113, 113}, Lengths{113, 1023}, Lengths{1023, 113}}) {
      for (const int ranks : {2, 3}) {
        DYNAMIC_SECTION(describe(m, l, ranks)) {
          Problem p = cp_problem(m, l);
          p.softcap = 1.5;
          // [batch, heads] slopes: each batch entry its own, so a wrong batch stride shows.
          for (int64_t i = 0; i < p.shape.batch * p.shape.heads; ++i) {
            p.alibi_slopes.push_back(0.05f * float(i + 1));
          }
          check_against_forward(p, ranks);
        }
      }
    }
  }
}

TEST_CASE("context-parallel forward keeps the no-key convention: O = 0 and LSE = +inf",
          "[context_parallel][reference]") {
  // Bottom-right causal with more queries than keys: the first seq_q - seq_k rows see nothing.
  const Problem p = cp_problem(kMaskCases[1], Lengths{1023, 113});
  const Vec q = random_values(p.shape.q_elements(), 4);
  const Vec k = random_values(p.shape.kv_elements(), 5);
  const Vec v = random_values(p.shape.kv_elements(), 6);
  const ref::ForwardResult got = ref::context_parallel_forward(p, 4, q, k, v);
  const int64_t empty_rows = p.shape.seq_q - p.shape.seq_k;
  for (int64_t plane = 0; plane < p.shape.batch * p.shape.heads; ++plane) {
    for (int64_t row = 0; row < p.shape.seq_q; ++row) {
      const double lse = got.lse[size_t(plane * p.shape.seq_q + row)];
      if (row < empty_rows) {
        REQUIRE(lse == std::numeric_limits<double>::infinity());
        for (int64_t d = 0; d < p.shape.head_dim; ++d) {
          REQUIRE(got.out[size_t((plane * p.shape.seq_q + row) * p.shape.head_dim + d)] == 0.0);
        }
      } else {
        REQUIRE(std::isfinite(lse));
      }
    }
  }
}

TEST_CASE("forward_block at an offset equals rows of the whole forward",
          "[context_parallel][reference]") {
  // Rows [40, 90) of a causal, windowed, ALiBi problem against all its keys: with the offset of
  // their global position the block's result is those rows of the full forward.
  Problem p = cp_problem({"causal + window", Mask::causal_bottom_right, {25, -1}}, {113, 150});
  p.alibi_slopes = {0.1f, 0.2f, 0.3f, 0.4f};
  const Vec q = random_values(p.shape.q_elements(), 7);
  const Vec k = random_values(p.shape.kv_elements(), 8);
  const Vec v = random_values(p.shape.kv_elements(), 9);
  const ref::ForwardResult full = ref::forward(p, q, k, v);
  const int64_t first = 40, rows = 50, d = p.shape.head_dim, planes = 8;
  Problem block = p;
  block.shape.seq_q = rows;
  Vec block_q, expected_out, expected_lse;
  for (int64_t plane = 0; plane < planes; ++plane) {
    const auto q_rows = q.begin() + (plane * p.shape.seq_q + first) * d;
    block_q.insert(block_q.end(), q_rows, q_rows + rows * d);
    const auto out_rows = full.out.begin() + (plane * p.shape.seq_q + first) * d;
    expected_out.insert(expected_out.end(), out_rows, out_rows + rows * d);
    const auto lse_rows = full.lse.begin() + plane * p.shape.seq_q + first;
    expected_lse.insert(expected_lse.end(), lse_rows, lse_rows + rows);
  }
  const int64_t offset = p.band().offset + first;
  const ref::ForwardResult got = ref::forward_block(block, offset, block_q, k, v);
  CHECK(count_differences(got.out, expected_out) == 0);
  CHECK(count_differences(got.lse, expected_lse) == 0);
  SECTION("the block's own offset would not do") {
    const ref::ForwardResult wrong =
        ref::forward_block(block, block.band().offset, block_q, k, v);
    CHECK(count_differences(wrong.out, expected_out) > 0);
  }
}

TEST_CASE("context-parallel forward: invalid arguments", "[context_parallel][reference]") {
  Problem p = cp_problem(kMaskCases[0], Lengths{7, 7});
  const Vec q = random_values(p.shape.q_elements(), 1);
  const Vec kv = random_values(p.shape.kv_elements(), 2);
  REQUIRE_THROWS_WITH(ref::context_parallel_forward(p, 0, q, kv, kv), Catch::Contains("ranks"));
  REQUIRE_THROWS_WITH(ref::context_parallel_forward(p, 2, Vec(3), kv, kv),
                      Catch::StartsWith("q has 3 elements, expected"));
  p.cache_seqlens = {7, 7};
  REQUIRE_THROWS_WITH(ref::context_parallel_forward(p, 2, q, kv, kv),
                      Catch::Contains("cache_seqlens"));
}
