// The partition plan of context-parallel (ring) attention: which queries each rank owns, which
// keys and values it holds at each step of the ring, and which (query chunk, key chunk) blocks
// it computes. Pure host code; the reference's single-process forward and the GPU modes share it.
//
// Both sequences are cut into 2N contiguous chunks (N ranks), sizes differing by at most one.
// Rank r owns query chunks r and 2N-1-r and, as its K/V shard, key chunks r and 2N-1-r: under a
// causal mask an early chunk sees few keys and a late one many, so every rank gets about the
// same work (the "zig-zag" balance). At ring step s rank r holds the shard of rank (r - s) mod N
// (each step passes the shards one rank on), so after N steps every rank has seen every key.
// Blocks in which the mask or the window hides every (query, key) pair are left out of the plan.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cuflash/problem.h"
#include "cuflash/types.h"

namespace cuflash::context_parallel {

// The most ranks a plan takes: it holds ranks^2 ring steps (256: 65536), and one process runs
// every block of them in the single-GPU mode.
inline constexpr int kMaxRanks = 256;

// Positions [begin, end) of one sequence.
struct Chunk {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// One block a rank computes: its query chunk against a held key chunk.
struct Block {
  int query_chunk = 0;
  int key_chunk = 0;
  int64_t visible_pairs = 0;  // (query, key) pairs the mask and window let through; > 0
};

// What a rank holds and computes at one step of the ring.
struct RingStep {
  int kv_owner = 0;                  // the rank whose K/V shard is held
  std::array<int, 2> key_chunks{};   // that shard's key chunks
  std::vector<Block> blocks;         // the visible blocks among its 4 (query, key) chunk pairs
};

struct RankPlan {
  std::array<int, 2> query_chunks{};  // r and 2N-1-r
  std::vector<RingStep> steps;        // N steps; step 0 holds the rank's own shard
  int64_t visible_pairs = 0;          // summed over all its blocks: the rank's work
};

struct Plan {
  int ranks = 1;
  std::vector<Chunk> query_chunks;  // 2N chunks of [0, seq_q)
  std::vector<Chunk> key_chunks;    // 2N chunks of [0, seq_k)
  VisibleBand band;                 // the whole problem's mask and window (problem.h)
  std::vector<RankPlan> rank_plans;  // one per rank

  int64_t total_visible_pairs() const;
  int64_t largest_rank_pairs() const;
  // Largest rank's work over the mean rank's, minus one (0: perfect balance; 0 with no work).
  double imbalance() const;
};

// The chunks of rank `rank` of `ranks`: {rank, 2 ranks - 1 - rank}.
std::array<int, 2> owned_chunks(int rank, int ranks);

// `length` positions cut into `count` contiguous chunks whose sizes differ by at most one (some
// are empty when length < count).
std::vector<Chunk> split_into_chunks(int64_t length, int count);

// Whether some query of `queries` sees some key of `keys` (both may be empty: then not).
bool block_visible(const VisibleBand& band, const Chunk& queries, const Chunk& keys);
// The number of (query, key) pairs of the block that the band lets through.
int64_t count_visible_pairs(const VisibleBand& band, int64_t seq_k, const Chunk& queries,
                            const Chunk& keys);

// Throws std::invalid_argument (naming the argument) for lengths below 1, ranks outside
// 1..kMaxRanks, or window bounds below -1.
Plan make_plan(int64_t seq_q, int64_t seq_k, Mask mask, Window window, int ranks);

// The rows of one sequence a rank keeps on its own GPU (its shard): its two chunks, the first
// (chunk r) at local row 0 and the second (chunk 2N-1-r) right after it.
struct ShardRows {
  std::array<int, 2> chunk_ids{};  // owned_chunks(rank, ranks)
  std::array<Chunk, 2> chunks{};   // their global positions
  int64_t size() const { return chunks[0].size() + chunks[1].size(); }
  // The local row where chunk `chunk_id` (one of chunk_ids) starts.
  int64_t local_begin(int chunk_id) const {
    return chunk_id == chunk_ids[0] ? 0 : chunks[0].size();
  }
};

// Rank `rank`'s shard of a sequence cut into `chunks` (2N chunks: split_into_chunks()).
ShardRows shard_rows(const std::vector<Chunk>& chunks, int rank);
// The rows of the largest shard of any rank.
int64_t largest_shard(const std::vector<Chunk>& chunks);

}  // namespace cuflash::context_parallel
