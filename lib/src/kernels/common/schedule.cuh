// The work of one CTA, the same for both kernel families: which (batch, head) and which block
// of rows it owns, in which order CTAs start, which keys (forward) or query blocks (backward)
// it visits, and which columns of a fragment the causal mask, the window and the sequence ends
// leave visible. Blocks the band (mask and window) hides entirely are never visited.
#pragma once

#include <cstdint>

#include "kernels/common/copy.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail {

// Which (block, head) of a grid (blocks, heads) this CTA computes. CTAs start roughly in the
// order of their linear index (x fastest). Plain order (heads_together 1) keeps the CTAs running
// together on few heads (their K/V stay in L2); under a causal mask, where blocks differ in cost,
// an interleaved order walks the first block of `heads_together` heads, then their second
// block, ..., then the next heads_together heads the same way, so that the heaviest blocks of
// those heads start first (H200, fp32, D=128, B=1, H=8, 4k causal: see the performance log)
// while the running CTAs share the data of no more heads than that. heads_together >= gridDim.y
// interleaves all heads of the grid.
struct BlockOrder {
  int64_t block;
  int64_t head;
};

// The place of the CTA of linear index `linear` in a grid of (blocks, heads). Index: the type of
// the linear index's arithmetic. 64 bits in general: a varlen grid is as wide as its longest
// sequence for every one of up to 65535 heads and sequences, which can pass 2^32 CTAs. 32 bits (a
// few instructions where a 64-bit division is a routine) where the caller knows the grid is small
// enough: the sm90 backward interleaves only dense calls (interleaved_heads()).
template <typename Index = int64_t>
__host__ __device__ __forceinline__ BlockOrder block_order_of(Index linear, Index blocks,
                                                              Index heads, Index heads_together) {
  if (heads_together <= 1) return {int64_t(linear % blocks), int64_t(linear / blocks)};
  const Index group_ctas = heads_together * blocks;
  const Index group = linear / group_ctas;
  const Index first_head = group * heads_together;
  // (the last group may have fewer heads)
  const Index group_heads =
      heads - first_head < heads_together ? heads - first_head : heads_together;
  const Index in_group = linear - group * group_ctas;
  return {int64_t(in_group / group_heads), int64_t(first_head + in_group % group_heads)};
}

// This CTA's place in a grid of (blocks, heads) = (gridDim.x, gridDim.y).
template <typename Index = int64_t>
__device__ __forceinline__ BlockOrder block_order(Index heads_together) {
  if (heads_together <= 1) return {int64_t(blockIdx.x), int64_t(blockIdx.y)};
  return block_order_of<Index>(Index(blockIdx.y) * gridDim.x + blockIdx.x, Index(gridDim.x),
                               Index(gridDim.y), heads_together);
}

// A forward CTA's query block: rows [q0, q0 + kBlockM) of query head `head`. Blocks start
// heaviest first: under a causal mask the last rows see the most keys.
struct ForwardBlock {
  int64_t bh;  // batch * heads + head
  int64_t batch;
  int64_t head;
  int64_t kv_head;
  int64_t q0;
  // Key blocks [first_key_block, first_key_block + key_blocks) hold every key a row of the
  // block sees; key_blocks == 0 when no row sees one.
  int64_t first_key_block;
  int64_t key_blocks;
};

// forward_block() with the (batch, head, kv head) already worked out, at query block m_block of
// the head (in row order, not the heaviest-first order of BlockOrder::block). kLeftBound: as
// forward_block()'s.
template <int kBlockM, int kBlockN, bool kLeftBound>
__host__ __device__ __forceinline__ ForwardBlock forward_block_at(const ProblemParams& p,
                                                                  int64_t batch, int64_t head,
                                                                  int64_t kv_head,
                                                                  int64_t m_block) {
  ForwardBlock block;
  block.bh = batch * p.heads + head;
  block.batch = batch;
  block.head = head;
  block.kv_head = kv_head;
  block.q0 = m_block * kBlockM;
  // The band's ends move right with the rows: the first row has the leftmost key, the last
  // row the rightmost.
  const int64_t key_begin = kLeftBound ? block.q0 + p.band_first : 0;
  const int64_t key_end = min64(p.seq_k, block.q0 + kBlockM + p.band_last);
  block.first_key_block = key_begin > 0 ? key_begin / kBlockN : 0;
  block.key_blocks = key_end > key_begin && key_end > 0
                         ? (key_end + kBlockN - 1) / kBlockN - block.first_key_block
                         : 0;
  return block;
}

// kLeftBound: the band may have a left end (mask.cuh, crosses_band()).
template <int kBlockM, int kBlockN, bool kLeftBound>
__host__ __device__ __forceinline__ ForwardBlock
forward_block(const ProblemParams& p, int64_t bh_offset, int64_t num_m_blocks, BlockOrder order) {
  const int64_t bh = bh_offset + order.head;
  const int64_t head = bh % p.heads;
  return forward_block_at<kBlockM, kBlockN, kLeftBound>(
      p, bh / p.heads, head, head / p.heads_per_kv, num_m_blocks - 1 - order.block);
}

// The output of a query block none of whose rows sees a key: O = 0 (its `head_dim` columns)
// and LSE = +inf.
template <int kBlockM, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void store_empty_block(Element* out, int64_t out_seq_stride,
                                                  float* lse, int64_t q0, int64_t seq_q,
                                                  int thread, int head_dim = kHeadDim) {
  store_zero_rows<kBlockM, kHeadDim, kThreads>(out, out_seq_stride, q0, seq_q, thread, head_dim);
  if (thread < kBlockM && q0 + thread < seq_q) lse[q0 + thread] = kEmptyRowLse;
}

// A backward CTA's key block: keys [k0, k0 + kBlockN) of kv head `kv_head`. Blocks start in
// increasing order: under a causal mask the first ones see the most queries.
struct BackwardBlock {
  int64_t batch;
  int64_t kv_head;
  int64_t k0;
};

template <int kBlockN>
__device__ __forceinline__ BackwardBlock backward_block(const ProblemParams& p,
                                                        int64_t bh_offset, BlockOrder order) {
  const int64_t bh_kv = bh_offset + order.head;  // batch * heads_kv + kv head
  return {bh_kv / p.heads_kv, bh_kv % p.heads_kv, order.block * kBlockN};
}

// The order of the dQ sums at a query block (backward_steps.cuh):
//   unordered:        not deterministic; atomics in whatever order the CTAs arrive.
//   first_key_first:  deterministic mode. The query block's first key block adds first; CTAs
//                     start in block_order() (under a causal mask the heaviest, first key blocks
//                     first); key blocks visit their query blocks downwards.
//   last_key_first:   deterministic mode of the wgmma kernels on short causal grids of many
//                     heads (sm90/backward.cuh, dq_sums_from_last_key()). The query block's last
//                     key block adds first; CTAs start with a kv head's last key block
//                     (backward_block_order()); key blocks visit their query blocks upwards.
//   rotated:          deterministic mode of the wgmma kernels where every key block of a kv head
//                     meets every query block, n of them, and a key group holds g <= n key
//                     blocks (sm90/backward.cuh, dq_turns_rotate()): the group's key block j
//                     starts at query block s_j = floor(j n / g) and visits them upwards,
//                     wrapping around; at each query block the group's key blocks take their
//                     turns in the order they get there, steps apart (the s_j differ), so no
//                     chain of waits builds up. With g = n: key block k visits query block
//                     (k + t) mod n at step t and takes turn t there.
// first_key_first and last_key_first: a key block only ever waits for key blocks whose CTAs
// started before it. rotated: key block j waits for other key blocks of its group, some of
// which start after it; those of a group are consecutive CTAs, so with at most one CTA an SM and
// no more key blocks a group than SMs the group's CTAs still all get an SM (dq_turns_rotate()).
enum class DqSumOrder { unordered, first_key_first, last_key_first, rotated };

// The backward's CTA order: block_order(), with a kv head's key blocks from the last one down
// for DqSumOrder::last_key_first.
template <typename Index = int64_t>
__device__ __forceinline__ BlockOrder backward_block_order(Index heads_together,
                                                           DqSumOrder sum_order) {
  BlockOrder order = block_order<Index>(heads_together);
  if (sum_order == DqSumOrder::last_key_first) order.block = int64_t(gridDim.x) - 1 - order.block;
  return order;
}

// The query blocks a key block meets, in the order the CTA visits them: for each query head of
// the kv head's group, the blocks [first_m_block, first_m_block + blocks_per_head) that hold a
// row seeing one of its keys. Unordered: head after head, blocks in increasing order. In
// deterministic mode each block with all heads of the group, so that a key block's turns at a
// query block come together, in the direction that keeps the hand-overs off its path:
// - first_key_first, blocks downwards: every key block of a causal head starts on the last query
//   block, key block n one hand-over after key block n - 1, and ends kBlockN / kBlockM
//   iterations of work earlier than it (1 to 4 with these kernels' blocks), which absorbs the
//   hand-over; the heaviest key blocks start first, as in the default mode. Where a head's key
//   blocks start together, key block n waits n hand-overs before its first product.
// - last_key_first, blocks upwards: under a causal mask key block n starts on its own diagonal,
//   where it has the first turn, and meets each later query block one or two of its iterations
//   after key block n + 1 did: no wait where a head's key blocks start together. The light key
//   blocks start first, which leaves the heavy ones to run alone at the end where a grid has few
//   heads and long sequences (H200, fp32, B = 1, H = 8, causal, S = 4k, 0.64-0.67x the default
//   backward's speed), but not where they are short (performance log).
// - rotated, blocks upwards from floor(j n / g) for key block j of a key group of g, wrapping
//   around: without a mask each key block of the group gets to a query block at its own step,
//   and takes its turn there in that order (dq_turn_rotated()).
// The head is worked out at each iteration rather than kept: the kernels that use this sit at
// the register limit.
template <int kBlockM>
struct QueryBlockSchedule {
  int64_t first_m_block;
  int64_t blocks_per_head;
  int64_t count;  // iterations
  DqSumOrder sum_order;
  // rotated: the query block visited first (relative to first_m_block), the key block's index
  // in its key group and the group's key blocks (DqSumOrder, dq_turn_rotated())
  int64_t first_visit;
  int group_index;
  int group_blocks;
  // Iteration `it`'s head and first query row, in the arithmetic of the counter's type: the
  // sm90 kernels count in 32 bits (count < 2^32: a query block is 64 rows of a Q that fits in
  // memory), where a division is a few instructions rather than a 64-bit routine.
  template <typename Counter>
  __host__ __device__ int64_t head(const ProblemParams& p, int64_t kv_head, Counter it) const {
    const Counter in_group = sum_order != DqSumOrder::unordered ? it % Counter(p.heads_per_kv)
                                                                : it / Counter(blocks_per_head);
    return kv_head * p.heads_per_kv + int64_t(in_group);
  }
  template <typename Counter>
  __host__ __device__ int64_t q0(const ProblemParams& p, Counter it) const {
    int64_t block = 0;
    if (sum_order == DqSumOrder::unordered) {
      block = first_m_block + int64_t(it % Counter(blocks_per_head));
    } else {
      const int64_t step = int64_t(it / Counter(p.heads_per_kv));
      if (sum_order == DqSumOrder::rotated) {
        const int64_t visit = first_visit + step;  // both below blocks_per_head
        block = first_m_block + (visit < blocks_per_head ? visit : visit - blocks_per_head);
      } else {
        block = sum_order == DqSumOrder::last_key_first
                    ? first_m_block + step
                    : first_m_block + blocks_per_head - 1 - step;
      }
    }
    return block * kBlockM;
  }
};

// group_keys: the keys of a key group (DqGroups::keys), for DqSumOrder::rotated; 0: one group.
template <int kBlockM, int kBlockN, bool kLeftBound>
__host__ __device__ __forceinline__ QueryBlockSchedule<kBlockM> query_block_schedule(
    const ProblemParams& p, int64_t k0, DqSumOrder sum_order, int64_t group_keys = 0) {
  QueryBlockSchedule<kBlockM> schedule{};
  // Rows [row_begin, row_end) see a key of [k0, last_key]: the first row sees the block's
  // first key at the band's right end, the last its last key at the band's left end.
  const int64_t num_m_blocks = (p.seq_q + kBlockM - 1) / kBlockM;
  if (k0 - p.band_last > 0) {
    schedule.first_m_block = min64((k0 - p.band_last) / kBlockM, num_m_blocks);
  }
  schedule.blocks_per_head = num_m_blocks - schedule.first_m_block;
  if constexpr (kLeftBound) {
    const int64_t row_begin = schedule.first_m_block * kBlockM;
    const int64_t last_key = min64(k0 + kBlockN, p.seq_k) - 1;
    const int64_t row_end = clamp64(last_key - p.band_first + 1, row_begin, p.seq_q);
    schedule.blocks_per_head =
        row_end > row_begin ? (row_end + kBlockM - 1) / kBlockM - schedule.first_m_block : 0;
  }
  schedule.count = schedule.blocks_per_head * p.heads_per_kv;
  schedule.sum_order = sum_order;
  if (sum_order == DqSumOrder::rotated && schedule.blocks_per_head > 0) {
    const int64_t keys = group_keys > 0 ? group_keys : p.seq_k;
    const int64_t group_begin = k0 / keys * keys;
    const int64_t group_end = min64(group_begin + keys, p.seq_k);
    schedule.group_index = static_cast<int>((k0 - group_begin) / kBlockN);
    schedule.group_blocks = static_cast<int>((group_end - group_begin + kBlockN - 1) / kBlockN);
    schedule.first_visit = schedule.group_index * schedule.blocks_per_head / schedule.group_blocks;
  }
  return schedule;
}

// Key block `key_block`'s turn at query block q0 in the deterministic dQ sums: its rank among
// the key blocks of its key group that meet the query block, counted from the first of the
// group's key blocks that adds (DqSumOrder). Key block k meets the query block iff
// k0 = k * kBlockN < seq_k, k0 < q0 + kBlockM + band_last (query_block_schedule(): the block
// of row k0 - band_last is at or before it) and k0 + kBlockN > q0 + band_first (row q0's first
// key, the lowest any row of the block sees). The blocks a query block meets are consecutive
// (each row's band is, and the next row's starts one key later). Key groups
// (dq_sum_groups(), workspace.h) are ranges [group_begin, group_end) of keys, multiples of
// kBlockN; with one group, [0, seq_k or more).
template <int kBlockN>
__host__ __device__ __forceinline__ int dq_turn_from_first(const ProblemParams& p, int64_t q0,
                                                           int key_block, int64_t group_begin) {
  const int64_t first_key = q0 + p.band_first;  // below 0 without a left bound
  const int64_t key_begin = first_key > group_begin ? first_key : group_begin;
  return key_block - static_cast<int>(key_begin / kBlockN);
}

// The same counted from the last of the group's key blocks that meet the query block
// (DqSumOrder::last_key_first): group_end is the group's end, a multiple of kBlockN.
template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ int dq_turn_from_last(const ProblemParams& p, int64_t q0,
                                                          int key_block, int64_t group_end) {
  const int64_t key_end = min64(min64(q0 + kBlockM + p.band_last, p.seq_k), group_end);
  return static_cast<int>((key_end + kBlockN - 1) / kBlockN - 1) - key_block;  // key_end > 0
}

// The same for DqSumOrder::rotated (every key block meeting every query block, n of them; g <= n
// key blocks in the group): key block j reaches query block b at step (b - s_j) mod n, with
// s_j = floor(j n / g) increasing in j. The first there is the last j with s_j <= b, j* =
// floor(((b + 1) g - 1) / n); then j* - 1, ..., 0, g - 1, ..., j* + 1, each a step or more
// later: key block j's turn is (j* - j) mod g. With g = n: j* = b, the turn (b - j) mod n.
// (32-bit arithmetic: g and n are a head's blocks, dq_turns_rotate() bounds g.)
template <int kBlockM>
__host__ __device__ __forceinline__ int dq_turn_rotated(const QueryBlockSchedule<kBlockM>& schedule,
                                                        int64_t q0) {
  const uint32_t block = static_cast<uint32_t>(q0 / kBlockM - schedule.first_m_block);
  const uint32_t blocks = static_cast<uint32_t>(schedule.group_blocks);
  const int first = static_cast<int>(((block + 1) * blocks - 1) /
                                     static_cast<uint32_t>(schedule.blocks_per_head));
  const int turn = first - schedule.group_index;
  return turn >= 0 ? turn : turn + schedule.group_blocks;
}

// Which of kColumns query columns from q0 the two key rows of a thread's transposed fragment
// (S^T, dP^T) see: query column c of key row r is visible iff r < Sk and
// r - band_last <= q0 + c <= r - band_first, i.e. first[half] <= c < end[half]. Without
// kLeftBound, end is kColumns and not kept: the kernels that use this sit at the register limit.
template <bool kLeftBound>
struct VisibleColumns {
  bool masked;  // the block needs a mask at all (needs_mask())
  int first[2];
  int end[kLeftBound ? 2 : 1];

  __device__ __forceinline__ bool hides(int half, int col) const {
    if constexpr (kLeftBound) return masked && (col < first[half] || col >= end[half]);
    return masked && col < first[half];
  }
};

template <bool kLeftBound, int kColumns>
__device__ __forceinline__ VisibleColumns<kLeftBound> visible_columns(
    const ProblemParams& p, bool masked, const int64_t (&fragment_key)[2], int64_t q0) {
  VisibleColumns<kLeftBound> visible;
  visible.masked = masked;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t key = fragment_key[half];
    const int64_t first = clamp64(key - p.band_last - q0, 0, kColumns);
    visible.first[half] = key < p.seq_k ? static_cast<int>(first) : kColumns;
    if constexpr (kLeftBound) {
      visible.end[half] = static_cast<int>(clamp64(key - p.band_first + 1 - q0, 0, kColumns));
    }
  }
  return visible;
}

}  // namespace cuflash::detail
