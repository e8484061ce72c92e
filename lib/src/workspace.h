// The backward pass's device scratch, which the caller allocates (backward_workspace_size()):
// an fp32 dQ accumulator of batch*heads*seq_q*D floats at offset 0 ([B, H, Sq, D], contiguous,
// D = dq_accum_columns(): the columns of the kernels that run (or more), whose padding columns
// receive zeros, so that the atomics need no column test), then, at the next 256-byte
// boundary, the row sums D_i = rowsum(dO_i * O_i) of batch*heads*seq_q floats ([B, H, Sq]), and
// in deterministic mode, at the next boundary, the dQ semaphores: one int per (batch, head,
// query block) that counts the key blocks whose dQ has been added to the block's accumulator
// (backward_steps.cuh).
// A varlen batch (VarlenBatch) keeps these sizes, of its longest sequence times the batch, but
// stores the accumulator and the row sums as [heads, total_q] rows like its LSE
// (ProblemParams::row_index()), which total_q <= batch * seq_q lets fit; its semaphores are
// [batch, heads, query blocks of the longest].
#pragma once

#include <algorithm>
#include <cstddef>

#include "cuflash/attention.h"
#include "head_dims.h"

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

struct BackwardWorkspace {
  float* dq_accum;     // [B, H, Sq, D] fp32, contiguous, D the launched kernel's kHeadDim
  float* row_dot;      // [B, H, Sq] fp32: D_i = rowsum(dO_i * O_i)
  int* dq_semaphores;  // [B, H, query blocks] in deterministic mode; null otherwise
};

// Columns of a dQ accumulator row: the most of the kernels that may run, the mma.sync ones at
// compiled_head_dim() and the wgmma ones at their tiles' columns (of the next of their head
// dims), so that one size serves every device and dtype (the head_dim itself for a head_dim no
// kernel takes, which backward() refuses).
inline int64_t dq_accum_columns(const AttentionShape& s) {
  const int compiled = compiled_head_dim(s.head_dim);
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

inline size_t workspace_bytes(const AttentionShape& s, bool deterministic) {
  return dq_accum_bytes(s) + row_dot_bytes(s) + (deterministic ? dq_semaphore_bytes(s) : 0);
}

inline BackwardWorkspace split_workspace(const BackwardArgs& args) {
  auto* base = static_cast<unsigned char*>(args.workspace);
  const size_t row_dot_offset = dq_accum_bytes(args.shape);
  const size_t semaphore_offset = row_dot_offset + row_dot_bytes(args.shape);
  return {reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + row_dot_offset),
          args.deterministic ? reinterpret_cast<int*>(base + semaphore_offset) : nullptr};
}

}  // namespace cuflash::detail
