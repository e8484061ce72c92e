#include "cuflash/context_parallel/plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuflash::context_parallel {

namespace {

void check_arguments(int64_t seq_q, int64_t seq_k, Window window, int ranks) {
  if (seq_q < 1) throw std::invalid_argument("seq_q (" + std::to_string(seq_q) + ") must be >= 1");
  if (seq_k < 1) throw std::invalid_argument("seq_k (" + std::to_string(seq_k) + ") must be >= 1");
  if (ranks < 1 || ranks > kMaxRanks) {
    throw std::invalid_argument("ranks (" + std::to_string(ranks) + ") must be from 1 to " +
                                std::to_string(kMaxRanks));
  }
  if (window.left < -1 || window.right < -1) {
    throw std::invalid_argument("window bounds (" + std::to_string(window.left) + "," +
                                std::to_string(window.right) + ") must be >= -1 (-1: unbounded)");
  }
}

RingStep plan_step(const Plan& plan, const std::array<int, 2>& query_chunks, int kv_owner,
                   int64_t seq_k) {
  RingStep step;
  step.kv_owner = kv_owner;
  step.key_chunks = owned_chunks(kv_owner, plan.ranks);
  for (const int q : query_chunks) {
    for (const int k : step.key_chunks) {
      const Chunk& queries = plan.query_chunks[size_t(q)];
      const Chunk& keys = plan.key_chunks[size_t(k)];
      if (!block_visible(plan.band, queries, keys)) continue;
      step.blocks.push_back(Block{q, k, count_visible_pairs(plan.band, seq_k, queries, keys)});
    }
  }
  return step;
}

}  // namespace

std::array<int, 2> owned_chunks(int rank, int ranks) { return {rank, 2 * ranks - 1 - rank}; }

ShardRows shard_rows(const std::vector<Chunk>& chunks, int rank) {
  const int ranks = int(chunks.size()) / 2;
  ShardRows shard;
  shard.chunk_ids = owned_chunks(rank, ranks);
  for (int i = 0; i < 2; ++i) shard.chunks[size_t(i)] = chunks[size_t(shard.chunk_ids[size_t(i)])];
  return shard;
}

int64_t largest_shard(const std::vector<Chunk>& chunks) {
  int64_t largest = 0;
  for (int rank = 0; rank < int(chunks.size()) / 2; ++rank) {
    largest = std::max(largest, shard_rows(chunks, rank).size());
  }
  return largest;
}

std::vector<Chunk> split_into_chunks(int64_t length, int count) {
  const int64_t base = length / count;
  const int64_t larger = length % count;  // the first `larger` chunks take one position more
  std::vector<Chunk> chunks;
  int64_t begin = 0;
  for (int c = 0; c < count; ++c) {
    const int64_t size = base + (c < larger ? 1 : 0);
    chunks.push_back(Chunk{begin, begin + size});
    begin += size;
  }
  return chunks;
}

bool block_visible(const VisibleBand& band, const Chunk& queries, const Chunk& keys) {
  if (queries.empty() || keys.empty()) return false;
  // Query i sees key j when offset - left <= j - i <= offset + right; over the block, j - i takes
  // every value of [keys.begin - (queries.end - 1), (keys.end - 1) - queries.begin].
  const int64_t lowest = keys.begin - (queries.end - 1);
  const int64_t highest = (keys.end - 1) - queries.begin;
  return lowest <= band.offset + band.right && highest >= band.offset - band.left;
}

namespace {

// The sum of max(0, c + slope * r) over the integers r of [a, b), slope -1, 0 or 1.
int64_t sum_of_positive_part(int64_t c, int slope, int64_t a, int64_t b) {
  if (slope == 0) return c > 0 && b > a ? (b - a) * c : 0;
  // Where c + slope * r > 0: r >= 1 - c (slope 1) or r <= c - 1 (slope -1).
  const int64_t first = slope > 0 ? std::max(a, 1 - c) : a;
  const int64_t end = slope > 0 ? b : std::min(b, c);
  if (end <= first) return 0;
  // An arithmetic series from f(first) to f(end - 1).
  const int64_t at_first = c + slope * first;
  const int64_t at_last = c + slope * (end - 1);
  return (at_first + at_last) * (end - first) / 2;
}

}  // namespace

// Row r of the block sees the keys [lo(r), hi(r)): lo(r) = max(r + offset - left, keys.begin,
// 0) and hi(r) = min(r + offset + right + 1, keys.end, seq_k), each a constant on one side of
// its corner and r plus a constant on the other. Between the corners the count hi - lo is linear
// in r, so each of the (at most three) pieces sums in closed form: no walk over the rows, which
// a plan of long sequences would otherwise make on every call.
int64_t count_visible_pairs(const VisibleBand& band, int64_t seq_k, const Chunk& queries,
                            const Chunk& keys) {
  const int64_t low_shift = band.offset - band.left;        // lo(r) = r + low_shift, or
  const int64_t low_floor = std::max<int64_t>(keys.begin, 0);  // this, whichever is larger
  const int64_t high_shift = band.offset + band.right + 1;  // hi(r) = r + high_shift, or
  const int64_t high_ceiling = std::min(keys.end, seq_k);   // this, whichever is smaller
  const int64_t corners[] = {low_floor - low_shift, high_ceiling - high_shift};
  std::vector<int64_t> cuts{queries.begin, queries.end};
  for (int64_t corner : corners) {
    if (corner > queries.begin && corner < queries.end) cuts.push_back(corner);
  }
  std::sort(cuts.begin(), cuts.end());
  int64_t pairs = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t a = cuts[i], b = cuts[i + 1];
    // On [a, b) each bound keeps one form (the two agree at a corner): lo follows r from its
    // corner on, hi up to its corner.
    const bool low_follows = a + low_shift >= low_floor;
    const bool high_follows = a + high_shift < high_ceiling;
    const int64_t c = (high_follows ? high_shift : high_ceiling) -
                      (low_follows ? low_shift : low_floor);
    const int slope = int(high_follows) - int(low_follows);
    pairs += sum_of_positive_part(c, slope, a, b);
  }
  return pairs;
}

Plan make_plan(int64_t seq_q, int64_t seq_k, Mask mask, Window window, int ranks) {
  check_arguments(seq_q, seq_k, window, ranks);
  Plan plan;
  plan.ranks = ranks;
  plan.query_chunks = split_into_chunks(seq_q, 2 * ranks);
  plan.key_chunks = split_into_chunks(seq_k, 2 * ranks);
  AttentionShape shape;
  shape.seq_q = seq_q;
  shape.seq_k = seq_k;
  plan.band = visible_band(shape, mask, window);
  for (int rank = 0; rank < ranks; ++rank) {
    RankPlan rank_plan;
    rank_plan.query_chunks = owned_chunks(rank, ranks);
    for (int s = 0; s < ranks; ++s) {
      const int kv_owner = (rank - s + ranks) % ranks;
      rank_plan.steps.push_back(plan_step(plan, rank_plan.query_chunks, kv_owner, seq_k));
      for (const Block& block : rank_plan.steps.back().blocks) {
        rank_plan.visible_pairs += block.visible_pairs;
      }
    }
    plan.rank_plans.push_back(std::move(rank_plan));
  }
  return plan;
}

int64_t Plan::total_visible_pairs() const {
  int64_t total = 0;
  for (const RankPlan& r : rank_plans) total += r.visible_pairs;
  return total;
}

int64_t Plan::largest_rank_pairs() const {
  int64_t largest = 0;
  for (const RankPlan& r : rank_plans) largest = std::max(largest, r.visible_pairs);
  return largest;
}

double Plan::imbalance() const {
  const int64_t total = total_visible_pairs();
  if (total == 0) return 0.0;
  const double mean = double(total) / double(ranks);
  return double(largest_rank_pairs()) / mean - 1.0;
}

}  // namespace cuflash::context_parallel
