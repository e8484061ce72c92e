// Plain kernel parameter structs of the tensor-core kernels, built on the host from the
// validated public arguments.
#pragma once

#include <type_traits>

#include <cstdint>

#include "cuflash/attention.h"
#include "cuflash/types.h"
#include "kernels/common/softmax.cuh"
#include "workspace.h"

namespace cuflash::detail {

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t clamp64(int64_t x, int64_t low, int64_t high) {
  return x < low ? low : (x > high ? high : x);
}

// A [batch, heads, seq, head_dim] tensor in global memory; strides in elements, head_dim
// contiguous.
template <typename Element>
struct GlobalTensor {
  Element* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t seq_stride;

  // The [seq, head_dim] slice of one (batch, head).
  __device__ __forceinline__ Element* slice(int64_t batch, int64_t head) const {
    return data + batch * batch_stride + head * head_stride;
  }
  // ... from token `first` on: a sequence of a varlen batch (ProblemParams::first_row and
  // first_key; 0 in a dense batch).
  __device__ __forceinline__ Element* slice(int64_t batch, int64_t head, int64_t first) const {
    return data + batch * batch_stride + head * head_stride + first * seq_stride;
  }
};

template <typename Element>
GlobalTensor<Element> global_tensor(const TensorRef& ref) {
  return {static_cast<Element*>(ref.data), ref.batch_stride, ref.head_stride, ref.seq_stride};
}

// Sizes, scale, mask and score modifications shared by forward and backward.
struct ProblemParams {
  int64_t batch;
  int64_t heads;
  int64_t heads_kv;
  int64_t heads_per_kv;  // query heads sharing one key/value head
  int64_t seq_q;
  int64_t seq_k;
  // The call's head_dim: a multiple of 8 up to the kernel's compiled kHeadDim. Columns from it
  // on are loaded as zeros and never stored (copy.cuh).
  int head_dim;
  float scale;       // softmax scale (> 0)
  float scale_log2;  // scale * log2(e): scores go straight into exp2
  bool causal;  // a causal mask: query blocks differ in cost (block_order())
  // Query i sees key j iff i + band_first <= j <= i + band_last: the band of VisibleBand
  // (problem.h) as two offsets from the query's index, so that the kernels' bounds each take one
  // addition (a side without a bound is kUnboundedBand away; band_last = offset under a causal
  // mask).
  int64_t band_first;  // offset - left
  int64_t band_last;   // offset + right
  int64_t offset;      // the diagonal's, for ALiBi's distances
  // Read by the kernels compiled for score modifications only (score_mod.cuh).
  float softcap_in;   // scale / softcap; 0 without a softcap
  float softcap_out;  // softcap * log2(e)
  const float* alibi_slopes;  // null without ALiBi
  int64_t alibi_batch_stride;
  // A variable-length packed batch (VarlenBatch): null offsets for a dense one. A kernel reads
  // the sequence lengths only through sequence_params() (sequence.cuh), which narrows seq_q,
  // seq_k, the band and first_row to its CTA's sequence; the grid's seq_q and seq_k are the
  // longest lengths.
  const int32_t* cu_seqlens_q;  // [batch + 1]
  const int32_t* cu_seqlens_k;  // [batch + 1]
  int64_t total_q;    // packed query tokens: rows per head of LSE [heads, total_q]
  int64_t first_row;  // the CTA's sequence's first query token (0 before sequence_params())
  int64_t first_key;  // ... and its first key token
  bool top_left;      // causal_top_left: every sequence's diagonal offset is 0
  int64_t max_seq_q;  // the grid's seq_q (the dQ semaphores' stride): seq_q when dense

  // Where row 0 of (batch, head) sits in the [B, H, Sq] row arrays (LSE, the backward's D_i;
  // times the compiled head dim in its dQ accumulator): [heads, total_q] rows in a varlen batch.
  __host__ __device__ __forceinline__ int64_t row_index(int64_t batch, int64_t head) const {
    return cu_seqlens_q != nullptr ? head * total_q + first_row : (batch * heads + head) * seq_q;
  }
};

// The band of the call: the mask's and window's (visible_band()), on the diagonal the call gives
// (ForwardArgs::diagonal_offset) when it gives one. Every kernel reads the diagonal through the
// band_first, band_last and offset of problem_params() alone: the sm80 and sm90 forward and
// backward (schedule.cuh: the key blocks a query block visits and the query blocks a key block
// meets; mask.cuh; score_mod.cuh's ALiBi distances) and the split-KV forward (band_last is its
// causal bound; it serves no window and no ALiBi, and without a causal mask every key is
// visible whatever the offset). Only the per-sequence diagonals of a varlen batch
// (sequence.cuh) and of cache_seqlens (split/forward.cuh) are placed otherwise, and forward()
// and backward() refuse an explicit offset with those.
template <typename Args>
VisibleBand call_band(const Args& args) {
  VisibleBand band = visible_band(args.shape, args.mask, args.window);
  if (args.diagonal_offset) band.offset = *args.diagonal_offset;
  return band;
}

// Args is ForwardArgs or BackwardArgs (validated; scale already effective).
template <typename Args>
ProblemParams problem_params(const Args& args) {
  const AttentionShape& shape = args.shape;
  ProblemParams p{};
  p.batch = shape.batch;
  p.heads = shape.heads;
  p.heads_kv = shape.heads_kv;
  p.heads_per_kv = shape.heads / shape.heads_kv;
  p.seq_q = shape.seq_q;
  p.seq_k = shape.seq_k;
  p.head_dim = static_cast<int>(shape.head_dim);
  p.scale = args.scale;
  p.scale_log2 = args.scale * kLog2e;
  p.causal = args.mask != Mask::none;
  const VisibleBand band = call_band(args);
  p.band_first = band.offset - band.left;
  p.band_last = band.offset + band.right;
  p.offset = band.offset;
  p.softcap_in = args.softcap > 0.f ? args.scale / args.softcap : 0.f;
  p.softcap_out = args.softcap * kLog2e;
  p.alibi_slopes = args.alibi.data;
  p.alibi_batch_stride = args.alibi.batch_stride;
  p.cu_seqlens_q = args.varlen.cu_seqlens_q;
  p.cu_seqlens_k = args.varlen.cu_seqlens_k;
  p.total_q = args.varlen.total_q;
  p.first_row = 0;
  p.first_key = 0;
  p.top_left = args.mask == Mask::causal_top_left;
  p.max_seq_q = shape.seq_q;
  return p;
}

// Whether the kernels compiled for the variants (kVariants) must run: a softcap, ALiBi or a
// window's left bound, and in the backward fp32 gradient sums (BackwardArgs::sums), whose
// epilogue only the variant kernels carry. The default kernels serve none, causal masks and
// windows bounded on the right only (the causal bound, moved), with the registers and
// instructions they always had (the sums' epilogue in them cost the sm90 backward 3-4 % at
// head_dim 128: performance log). The sm90 forward runs a window bounded on the left, and
// nothing else of the variants, on a kernel of its own (sm90/forward.cuh, ForwardKernel).
template <typename Args>
bool uses_variant_kernels(const Args& args) {
  bool variants = args.softcap > 0.f || args.alibi.data != nullptr || args.window.left >= 0;
  if constexpr (std::is_same_v<Args, BackwardArgs>) variants = variants || args.sums.enabled();
  return variants;
}

// Where a forward whose keys are split writes each split's result, for the merge
// (split/merge.cuh) to combine: O normalized over the split's keys and its LSE, fp32, rows
// [split, batch, head, query] of head_dim and of one value (split::partial_outputs()).
struct PartialOutputs {
  int64_t splits = 1;  // 1: no split, O and LSE go where the call says
  float* out = nullptr;
  float* lse = nullptr;
};

// The partial row of split `split` for the call's row `row` = (batch * heads + head) * seq_q +
// query (the row of O and LSE): rows [split, batch, head, query].
__host__ __device__ __forceinline__ int64_t partial_row(const ProblemParams& p, int64_t split,
                                                        int64_t row) {
  return split * p.batch * p.heads * p.seq_q + row;
}

// The key blocks [begin, end) of `blocks` that split `split` of `splits` takes: contiguous, even
// shares (one may be empty), the same in the split kernel and the sm90 forward's key splits.
struct KeyBlockShare {
  int64_t begin, end;
};
__host__ __device__ __forceinline__ KeyBlockShare key_block_share(int64_t blocks, int64_t split,
                                                                  int64_t splits) {
  return {split * blocks / splits, (split + 1) * blocks / splits};
}

template <typename Element>
struct ForwardParams {
  ProblemParams problem;
  GlobalTensor<const Element> q, k, v;
  GlobalTensor<Element> out;
  float* lse;            // [B, H, Sq] ([H, total_q] varlen: ProblemParams::row_index())
  int64_t num_m_blocks;  // query blocks per head (of the longest sequence when varlen)
  int64_t bh_offset;     // (batch * heads + head) of blockIdx.y == 0, for launches in chunks
};

template <typename Element>
struct BackwardParams {
  ProblemParams problem;
  GlobalTensor<const Element> q, k, v, out, dout;
  const float* lse;       // [B, H, Sq] ([H, total_q] varlen: ProblemParams::row_index())
  GlobalTensor<Element> dq, dk, dv;
  // BackwardArgs::sums: the gradients are added to these in fp32 instead (null data: off).
  GlobalTensor<float> dq_sum, dk_sum, dv_sum;
  float* dq_accum;        // [B, H, Sq, kHeadDim] fp32, contiguous (the launched kernel's head
                          // dim; [H, total_q, kHeadDim] in a varlen batch), that of key group 0
  float* row_dot;         // [B, H, Sq]: D_i = rowsum(dO_i * O_i) ([H, total_q] varlen)
  int* dq_semaphores;     // [B, H, query blocks of max_seq_q] in deterministic mode (key group
                          // 0's), else null
  DqGroups dq_groups;     // the key groups of deterministic mode (workspace.h)
  int64_t num_n_blocks;   // key blocks per kv head
  int64_t bh_offset;      // (batch * heads_kv + kv head) of blockIdx.y == 0
  int* tile_counter;      // the walking kernels' tiles taken (workspace.h), zeroed by the row sums
  // sm90: block_order()'s heads_together (interleaved_heads()); 1: plain order
  uint32_t heads_together = 1;
};

}  // namespace cuflash::detail
