// The backward pass's device scratch, which the caller allocates (backward_workspace_size()):
// an fp32 dQ accumulator of batch*heads*seq_q*D floats at offset 0 ([B, H, Sq, D], contiguous,
// D = dq_accum_columns(): the columns of the kernels that run (or more), whose padding columns
// receive zeros, so that the atomics need no column test), then, at the next 256-byte
// boundary, the row sums D_i = rowsum(dO_i * O_i) of batch*heads*seq_q floats ([B, H, Sq]), and
// in deterministic mode, at the next boundary, the dQ semaphores: one int per (batch, head,
// query block) that counts the key blocks whose dQ has been added to the block's accumulator
// (backward_steps.cuh). Last, in a section of its own, the counter of the tiles that walking
// backward CTAs have taken (sm90/backward.cuh, KeyBlockWalk), zeroed by the row-sum kernel.
// Deterministic mode reserves room for up to three more accumulators (at most
// kDqGroupsExtraBytes) after the first and four semaphore sections, which small problems use
// for groups of key blocks (dq_sum_groups()).
// A varlen batch (VarlenBatch) keeps these sizes, of its longest sequence times the batch, but
// stores the accumulator and the row sums as [heads, total_q] rows like its LSE
// (ProblemParams::row_index()), which total_q <= batch * seq_q lets fit; its semaphores are
// [batch, heads, query blocks of the longest].
#pragma once

#include <algorithm>
#include <cstddef>

#include "cuflash/attention.h"
#include "head_dims.h"
#include "int_math.h"

namespace cuflash::detail {

// Alignment of the sections of the backward workspace.
inline constexpr size_t kWorkspaceAlignment = 256;

// The semaphores are indexed by the launched kernel's query blocks, which have at least this
// many rows in every configuration (each backward kernel asserts it), so that one section size
// serves them all.
inline constexpr int64_t kMinDqBlockRows = 16;

constexpr size_t round_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Deterministic mode's key groups (dq_sum_groups()), one group otherwise: each group of `keys`
// consecutive keys has an fp32 dQ accumulator and a section of semaphores of its own.
struct DqGroups {
  int count;                // G: dq_sum_groups()
  int64_t keys;             // keys per group (dq_group_keys())
  int64_t accum_floats;     // from one group's accumulator to the next
  int64_t semaphore_ints;   // from one group's semaphores to the next
  bool first_turn_stores;   // dq_first_turn_stores(): no zeroing of the accumulators
};

struct BackwardWorkspace {
  float* dq_accum;     // [G][B, H, Sq, D] fp32, contiguous, D the launched kernel's kHeadDim
  float* row_dot;      // [B, H, Sq] fp32: D_i = rowsum(dO_i * O_i)
  int* dq_semaphores;  // [G][B, H, query blocks] in deterministic mode; null otherwise
  DqGroups dq_groups;
  int* tile_counter;  // one int: the walking kernels' tiles taken beyond their first
};

// Columns of a dQ accumulator row: the most of the kernels that may run, the mma.sync ones at
// compiled_head_dim() and the wgmma ones at their tiles' columns (of the next of their head
// dims), so that one size serves every device and dtype. A head_dim no kernel takes (backward()
// refuses it) counts as the next multiple of kHeadDimGranule, or itself above every kernel's:
// the size then never shrinks as the head_dim grows, as with every other dimension.
inline int64_t dq_accum_columns(const AttentionShape& s) {
  const int compiled = compiled_head_dim(ceil_div(s.head_dim, kHeadDimGranule) * kHeadDimGranule);
  if (compiled == 0) return s.head_dim;
  return std::max(compiled, wgmma_tile_columns(wgmma_head_dim(kWgmmaBackwardHeadDims, compiled)));
}

inline size_t dq_accum_bytes(const AttentionShape& s) {
  const size_t elements = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) *
                          static_cast<size_t>(s.seq_q) * static_cast<size_t>(dq_accum_columns(s));
  return round_up(elements * sizeof(float), kWorkspaceAlignment);
}

inline size_t row_dot_bytes(const AttentionShape& s) {
  const size_t rows = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) *
                      static_cast<size_t>(s.seq_q);
  return round_up(rows * sizeof(float), kWorkspaceAlignment);
}

inline size_t dq_semaphore_bytes(const AttentionShape& s) {
  const size_t blocks = static_cast<size_t>((s.seq_q + kMinDqBlockRows - 1) / kMinDqBlockRows);
  const size_t count = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) * blocks;
  return round_up(count * sizeof(int), kWorkspaceAlignment);
}

// Deterministic mode sums the dQ parts of a query block in a fixed order, one key block after
// the other: the last key block's add waits for a round trip (reduce, release, acquire) of every
// key block before it. Where the grid fills the GPU many times over, other CTAs hide that chain;
// on small problems nothing does: without a mask every key block waits, and under a causal mask
// the heaviest key blocks start together and key block n waits n round trips before its first
// add. There (dq_band_has_no_left_end()) the key blocks are split into up to four groups of
// consecutive keys, each summed in order into an accumulator of its own, and the dQ conversion
// adds, in group order, the groups' accumulators that hold the row (dq_groups_holding_row()):
// shorter chains, the same bits on every run. The count depends on the shape and the mask alone
// (the same order on every device), through the memory the extra accumulators take: at most
// kDqGroupsExtraBytes, which only small problems fit several times. The workspace reserves
// that extra, min(3 accumulators, kDqGroupsExtraBytes), and four semaphore sections whatever
// the count, so that its size grows with every dimension of the shape (callers size one
// workspace for the largest of several blocks, context_parallel/).
// Groups start at multiples of kDqGroupKeyAlignment keys, which every backward kernel's key
// block divides, and hold at least kMinDqGroupBlocks key blocks of 128 (H200, `seed` at S = 1k
// without a mask: four groups of 256 keys ran at 0.93-0.97x the default's speed on the wgmma
// kernels and 0.83-0.84x on mma.sync, two of 512 at 0.87 and 0.80-0.81x).
inline constexpr int kMaxDqGroups = 4;
inline constexpr size_t kDqGroupsExtraBytes = size_t{48} << 20;
inline constexpr int64_t kDqGroupKeyAlignment = 128;
inline constexpr int64_t kMinDqGroupBlocks = 2;

inline size_t dq_group_extra_bytes(const AttentionShape& s, bool deterministic) {
  if (!deterministic) return 0;
  return std::min((kMaxDqGroups - 1) * dq_accum_bytes(s), kDqGroupsExtraBytes);
}

// Whether the band has no left end (no mask, a causal one, a window bounded on the right only)
// in a dense batch with keys: then a query block that meets any key block of a group meets the
// group's first, and whichever key block takes a group's first turn at a query block covers every
// row of it, so the first turns store their parts rather than add them, and no accumulator needs
// zeroing first. The rows a group's accumulator holds follow from the row alone: those that see one
// of its keys (dq_groups_holding_row(), backward_steps.cuh); the dQ conversion reads no other.
inline bool dq_band_has_no_left_end(const BackwardArgs& args) {
  return args.window.left < 0 && !args.varlen.enabled() && args.shape.seq_k > 0;
}

// In deterministic mode where the band has no left end, the first turn of each group at a query
// block stores its part instead of adding it (dq_band_has_no_left_end()).
inline bool dq_first_turn_stores(const BackwardArgs& args) {
  return args.deterministic && dq_band_has_no_left_end(args);
}

// The groups wanted; dq_groups_of() keeps those that hold keys.
inline int dq_sum_groups(const BackwardArgs& args) {
  const AttentionShape& s = args.shape;
  if (!dq_first_turn_stores(args) || dq_accum_bytes(s) == 0) return 1;
  const int64_t fit = 1 + static_cast<int64_t>(dq_group_extra_bytes(s, true) / dq_accum_bytes(s));
  const int64_t key_blocks = (s.seq_k + kDqGroupKeyAlignment - 1) / kDqGroupKeyAlignment;
  return static_cast<int>(std::clamp<int64_t>(std::min(fit, key_blocks / kMinDqGroupBlocks), 1,
                                              kMaxDqGroups));
}

// Keys per group: at least seq_k with one group, so that every key block is in group 0.
inline int64_t dq_group_keys(const AttentionShape& s, int groups) {
  const int64_t keys = (s.seq_k + groups - 1) / groups;
  return std::max<int64_t>(
      (keys + kDqGroupKeyAlignment - 1) / kDqGroupKeyAlignment * kDqGroupKeyAlignment,
      kDqGroupKeyAlignment);
}

// The groups that hold keys, of dq_sum_groups()'s count at dq_group_keys() each. Rounding a
// group's keys up to whole blocks can leave the last groups empty (1100 keys in four groups:
// 384 each, three hold them all); an empty group's accumulator is neither written (its first
// turn never comes) nor zeroed, so the dQ conversion must not add it.
inline DqGroups dq_groups_of(const BackwardArgs& args) {
  const int wanted = dq_sum_groups(args);
  DqGroups groups{};
  groups.keys = dq_group_keys(args.shape, wanted);
  groups.count =
      static_cast<int>(std::clamp<int64_t>(ceil_div(args.shape.seq_k, groups.keys), 1, wanted));
  groups.accum_floats = static_cast<int64_t>(dq_accum_bytes(args.shape) / sizeof(float));
  groups.semaphore_ints = static_cast<int64_t>(dq_semaphore_bytes(args.shape) / sizeof(int));
  groups.first_turn_stores = dq_first_turn_stores(args);
  return groups;
}

// The tile counter's section.
inline constexpr size_t kTileCounterBytes = kWorkspaceAlignment;

inline size_t workspace_bytes(const AttentionShape& s, bool deterministic) {
  return dq_accum_bytes(s) + dq_group_extra_bytes(s, deterministic) + row_dot_bytes(s) +
         (deterministic ? kMaxDqGroups * dq_semaphore_bytes(s) : 0) + kTileCounterBytes;
}

inline BackwardWorkspace split_workspace(const BackwardArgs& args) {
  const AttentionShape& s = args.shape;
  auto* base = static_cast<unsigned char*>(args.workspace);
  const size_t row_dot_offset = dq_accum_bytes(s) + dq_group_extra_bytes(s, args.deterministic);
  const size_t semaphore_offset = row_dot_offset + row_dot_bytes(s);
  BackwardWorkspace w{};
  w.dq_accum = reinterpret_cast<float*>(base);
  w.row_dot = reinterpret_cast<float*>(base + row_dot_offset);
  w.dq_semaphores = args.deterministic ? reinterpret_cast<int*>(base + semaphore_offset) : nullptr;
  w.dq_groups = dq_groups_of(args);
  const size_t counter_offset =
      semaphore_offset + (args.deterministic ? kMaxDqGroups * dq_semaphore_bytes(s) : 0);
  w.tile_counter = reinterpret_cast<int*>(base + counter_offset);
  return w;
}

}  // namespace cuflash::detail
