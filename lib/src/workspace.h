// The backward pass's device scratch, which the caller allocates (backward_workspace_size()):
// an fp32 dQ accumulator of batch*heads*seq_q*head_dim floats at offset 0 ([B, H, Sq, D],
// contiguous), then, at the next 256-byte boundary, the row sums D_i = rowsum(dO_i * O_i) of
// batch*heads*seq_q floats ([B, H, Sq]).
#pragma once

#include <cstddef>

#include "cuflash/attention.h"

namespace cuflash::detail {

// Alignment of the sections of the backward workspace.
inline constexpr size_t kWorkspaceAlignment = 256;

constexpr size_t round_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

struct BackwardWorkspace {
  float* dq_accum;  // [B, H, Sq, D] fp32, contiguous
  float* row_dot;   // [B, H, Sq] fp32: D_i = rowsum(dO_i * O_i)
};

inline size_t dq_accum_bytes(const AttentionShape& s) {
  const size_t elements = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) *
                          static_cast<size_t>(s.seq_q) * static_cast<size_t>(s.head_dim);
  return round_up(elements * sizeof(float), kWorkspaceAlignment);
}

inline size_t workspace_bytes(const AttentionShape& s) {
  const size_t rows = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) *
                      static_cast<size_t>(s.seq_q);
  return dq_accum_bytes(s) + round_up(rows * sizeof(float), kWorkspaceAlignment);
}

inline BackwardWorkspace split_workspace(const BackwardArgs& args) {
  auto* base = static_cast<unsigned char*>(args.workspace);
  return {reinterpret_cast<float*>(base),
          reinterpret_cast<float*>(base + dq_accum_bytes(args.shape))};
}

}  // namespace cuflash::detail
