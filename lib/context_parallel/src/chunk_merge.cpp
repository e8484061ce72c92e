#include "chunk_merge.h"

#include <algorithm>
#include <limits>

#include "rows.h"

namespace cuflash::context_parallel::detail {

namespace {
// The LSE of a row without keys (forward()'s convention), which the merge weighs as nothing.
constexpr float kEmptyLse = std::numeric_limits<float>::infinity();
}  // namespace

ChunkMerge::ChunkMerge(float* out, float* lse, const AttentionShape& s, int64_t rows)
    : out_(out),
      lse_(lse),
      shape_(s),
      rows_(rows),
      planes_rows_(s.batch * s.heads * rows),
      head_dim_(s.head_dim) {}

void ChunkMerge::merge(int first, int splits, const TensorRef& out, DType dtype, float* lse,
                       cudaStream_t stream) const {
  MergePartialsArgs args;
  args.splits = splits;
  args.batch = shape_.batch;
  args.heads = shape_.heads;
  args.seq_q = rows_;
  args.head_dim = shape_.head_dim;
  args.dtype = dtype;
  args.partial_out = slot_out(first);
  args.partial_lse = slot_lse(first);
  args.out = out;
  args.lse = lse;
  merge_attention_partials(args, stream);
}

void ChunkMerge::add(cudaStream_t stream) {
  if (!running_) {  // the first block is the running result as it is
    running_ = 0;
    return;
  }
  const int merged = kSlots - 1 - *running_;  // the slot neither of the two takes
  merge(std::min(*running_, kNewBlockSlot), 2,
        make_tensor_ref(slot_out(merged), Layout::bhsd, shape_.batch, shape_.heads, rows_,
                        head_dim_),
        DType::fp32, slot_lse(merged), stream);
  running_ = merged;
}

const float* ChunkMerge::finish(const TensorRef& out, DType dtype, cudaStream_t stream) {
  if (!running_) {  // the chunk sees no key: a partial of +inf LSE weighs nothing
    fill(slot_lse(0), planes_rows_, kEmptyLse, stream);
    running_ = 0;
  }
  // The running result alone, merged once more: normalized into the dtype, its LSE through the
  // free slot 1.
  float* lse = slot_lse(kNewBlockSlot);
  merge(*running_, 1, out, dtype, lse, stream);
  return lse;
}

}  // namespace cuflash::context_parallel::detail
