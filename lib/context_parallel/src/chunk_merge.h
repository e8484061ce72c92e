// The running merge of one query chunk's partial results, which the single-GPU mode and the ring
// both keep while the chunk's blocks arrive in ring order: three fp32 slots of [B, H, rows, D]
// (and their LSE rows). The running result is in slot 0 or 2 and each new block goes into slot 1,
// so that the running result and the new block are always two neighbouring slots, the
// [2, B, H, rows, D] partials merge_attention_partials() takes; their merge goes into the
// remaining slot, which becomes the running result. Asynchronous on the stream given.
#pragma once

#include <cstdint>
#include <optional>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/types.h"

namespace cuflash::context_parallel::detail {

class ChunkMerge {
 public:
  static constexpr int kSlots = 3;

  // Floats the slots of a chunk of `rows` rows take: O and LSE.
  static int64_t out_floats(const AttentionShape& s, int64_t rows) {
    return kSlots * s.batch * s.heads * rows * s.head_dim;
  }
  static int64_t lse_floats(const AttentionShape& s, int64_t rows) {
    return kSlots * s.batch * s.heads * rows;
  }

  // Slots at `out` and `lse` (out_floats() and lse_floats() each) for `rows` query rows.
  ChunkMerge(float* out, float* lse, const AttentionShape& s, int64_t rows);

  // Where the next block's O (fp32, dense [B, H, rows, D]) and LSE ([B, H, rows]) go.
  float* next_out() const { return slot_out(next_slot()); }
  float* next_lse() const { return slot_lse(next_slot()); }
  // Merges the block just written to next_out() / next_lse() into the running result.
  void add(cudaStream_t stream);
  // Writes the result, normalized, into `out` (the chunk's rows of O in `dtype`; O = 0 and
  // LSE = +inf for a chunk that saw no key) and returns its LSE ([B, H, rows], in the slots).
  const float* finish(const TensorRef& out, DType dtype, cudaStream_t stream);

 private:
  static constexpr int kNewBlockSlot = 1;
  int next_slot() const { return running_ ? kNewBlockSlot : 0; }
  float* slot_out(int slot) const { return out_ + slot * planes_rows_ * head_dim_; }
  float* slot_lse(int slot) const { return lse_ + slot * planes_rows_; }
  void merge(int first, int splits, const TensorRef& out, DType dtype, float* lse,
             cudaStream_t stream) const;

  float* out_;
  float* lse_;
  AttentionShape shape_;
  int64_t rows_;
  int64_t planes_rows_;  // B * H * rows
  int64_t head_dim_;
  std::optional<int> running_;  // the slot of the running result; none before the first block
};

}  // namespace cuflash::context_parallel::detail
