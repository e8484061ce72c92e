#include "cuflash/context_parallel/single_gpu.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuflash/context_parallel/plan.h"
#include "cuflash/context_parallel/ring.h"
#include "cuflash/cuda_error.h"
#include "cuflash/error.h"
#include "chunk_merge.h"
#include "rows.h"

namespace cuflash::context_parallel {
namespace {

// Workspaces and their sections start at 256-byte boundaries, as attention.h asks of a
// workspace: the blocks' backward() takes one of its own inside this one.
constexpr size_t kAlignment = 256;

// Consecutive 256-byte aligned sections of a workspace; over a null base it only counts the
// bytes, so that the size functions and the calls lay the sections out with the same code.
class Sections {
 public:
  explicit Sections(void* base) : base_(static_cast<unsigned char*>(base)) {}

  void* take_bytes(size_t bytes) {
    void* section = base_ == nullptr ? nullptr : base_ + used_;
    used_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return section;
  }
  float* take_floats(int64_t count) {
    return static_cast<float*>(take_bytes(size_t(count) * sizeof(float)));
  }
  size_t used() const { return used_; }

 private:
  unsigned char* base_;
  size_t used_ = 0;
};

// The most positions one of the 2N chunks of `length` holds (split_into_chunks()).
int64_t largest_chunk(int64_t length, int ranks) {
  const int64_t chunks = 2 * int64_t(ranks);
  return (length + chunks - 1) / chunks;
}

size_t element_bytes(int64_t count, DType dtype) { return size_t(count) * dtype_size(dtype); }

// --- Forward scratch: a block's O and the partial slots of a query chunk (chunk_merge.h) -----

struct ForwardScratch {
  void* block_out;     // a block's O in the dtype: [B, H, largest query chunk, D]
  float* partial_out;  // ChunkMerge's fp32 partial O slots of a query chunk
  float* partial_lse;  // their LSE
};

ForwardScratch forward_scratch(Sections& sections, const AttentionShape& s, DType dtype,
                               int ranks) {
  const int64_t rows = largest_chunk(s.seq_q, ranks);
  ForwardScratch scratch;
  scratch.block_out =
      sections.take_bytes(element_bytes(s.batch * s.heads * rows * s.head_dim, dtype));
  scratch.partial_out = sections.take_floats(detail::ChunkMerge::out_floats(s, rows));
  scratch.partial_lse = sections.take_floats(detail::ChunkMerge::lse_floats(s, rows));
  return scratch;
}

// --- Backward scratch: fp32 sums of the gradients and LSE rows -------------------------------

struct BackwardScratch {
  float* dq_sum;  // [B, H, Sq, D]: every block's backward() adds its terms (BackwardArgs::sums)
  float* dk_sum;  // [B, Hkv, Sk, D]
  float* dv_sum;
  float* chunk_lse[2];  // LSE rows of the rank's two query chunks: [B, H, chunk]
  void* block_workspace;  // backward()'s own, for the largest block
  size_t block_workspace_bytes;
};

// The shape of the largest block: the largest chunks of both sequences.
AttentionShape largest_block(const AttentionShape& s, int ranks) {
  AttentionShape block = s;
  block.seq_q = largest_chunk(s.seq_q, ranks);
  block.seq_k = largest_chunk(s.seq_k, ranks);
  return block;
}

BackwardScratch backward_scratch(Sections& sections, const AttentionShape& s, DType dtype,
                                 int ranks, bool deterministic) {
  const AttentionShape block = largest_block(s, ranks);
  BackwardScratch scratch;
  scratch.dq_sum = sections.take_floats(s.q_elements());
  scratch.dk_sum = sections.take_floats(s.kv_elements());
  scratch.dv_sum = sections.take_floats(s.kv_elements());
  for (float*& lse : scratch.chunk_lse) lse = sections.take_floats(block.lse_elements());
  scratch.block_workspace_bytes = backward_workspace_size(block, dtype, deterministic);
  scratch.block_workspace = sections.take_bytes(scratch.block_workspace_bytes);
  return scratch;
}

// --- Arguments ----------------------------------------------------------------------------

[[noreturn]] void refuse(Error::Kind kind, const std::string& context, const std::string& what) {
  throw Error(kind, context + ": " + what);
}

void check_ranks(const std::string& context, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    refuse(Error::Kind::invalid_argument, context,
           "ranks must be from 1 to " + std::to_string(kMaxRanks) + ", got " +
               std::to_string(ranks));
  }
}

// What the size functions need to lay out the sections: ranks and sizes of at least 1.
void check_layout(const std::string& context, const AttentionShape& s, int ranks) {
  check_ranks(context, ranks);
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", s.batch}, {"heads", s.heads}, {"heads_kv", s.heads_kv},
      {"seq_q", s.seq_q}, {"seq_k", s.seq_k}, {"head_dim", s.head_dim}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) {
      refuse(Error::Kind::invalid_argument, context,
             std::string("shape.") + name + " must be positive, got " + std::to_string(value));
    }
  }
}

// make_plan() with its refusals (window bounds below -1) as the library's errors.
Plan plan_of(const std::string& context, const AttentionShape& s, Mask mask, Window window,
             int ranks) {
  try {
    return make_plan(s.seq_q, s.seq_k, mask, window, ranks);
  } catch (const std::invalid_argument& e) {
    refuse(Error::Kind::invalid_argument, context, e.what());
  }
}

// What the plan and the merges need beyond what forward(), backward() and
// merge_attention_partials() check on every block.
void check_common(const std::string& context, int ranks, const VarlenBatch& varlen,
                  const std::optional<int64_t>& diagonal_offset) {
  check_ranks(context, ranks);
  if (varlen.any_given()) {
    refuse(Error::Kind::unsupported, context, "a varlen batch is not supported (dense only)");
  }
  if (diagonal_offset) {
    refuse(Error::Kind::invalid_argument, context,
           "diagonal_offset is set: the blocks' diagonals come from the plan, the whole "
           "problem's from its mask");
  }
}

void check_workspace(const std::string& context, const void* workspace, size_t bytes,
                     size_t required) {
  if (workspace == nullptr) refuse(Error::Kind::invalid_argument, context, "workspace is null");
  if (reinterpret_cast<uintptr_t>(workspace) % kAlignment != 0) {
    refuse(Error::Kind::invalid_argument, context, "workspace must be 256-byte aligned");
  }
  if (bytes < required) {
    refuse(Error::Kind::invalid_argument, context,
           "workspace_bytes (" + std::to_string(bytes) + ") is smaller than the " +
               std::to_string(required) + " its size function gives");
  }
}

void check_forward(const ForwardArgs& args, int ranks) {
  const std::string context = "context_parallel::single_gpu_forward";
  check_common(context, ranks, args.varlen, args.diagonal_offset);
  if (args.paged.any_given() || args.cache_seqlens != nullptr) {
    refuse(Error::Kind::unsupported, context,
           "paged K/V and cache_seqlens are not supported (dense K/V only)");
  }
  if (args.splits < 0) {
    refuse(Error::Kind::invalid_argument, context,
           "splits must be >= 0, got " + std::to_string(args.splits));
  }
  if (args.splits > 1) {
    refuse(Error::Kind::unsupported, context,
           "splits > 1 is not supported: each block runs unsplit");
  }
  // The whole problem's tensors: each block's forward() sees only its chunks' rows, in which
  // strides that let heads or batches overlap across chunks would go unnoticed.
  check_dense_forward_args(args, context);
  check_workspace(context, args.workspace, args.workspace_bytes,
                  single_gpu_forward_workspace_size(args.shape, args.dtype, ranks));
}

void check_backward(const BackwardArgs& args, int ranks) {
  const std::string context = "context_parallel::single_gpu_backward";
  check_common(context, ranks, args.varlen, args.diagonal_offset);
  if (args.sums.any_given()) {  // a partial set is not "off" either
    refuse(Error::Kind::unsupported, context,
           "sums (fp32 gradient sums) are not supported: the blocks' gradients are summed in the "
           "workspace and written to dq, dk and dv");
  }
  // The whole problem's tensors, dq, dk and dv included: the blocks' backward() calls add to
  // fp32 sums in scratch and never see them; the sums are then stored through their strides.
  check_dense_backward_args(args, context);
  check_workspace(context, args.workspace, args.workspace_bytes,
                  single_gpu_backward_workspace_size(args.shape, args.dtype, ranks,
                                                     args.deterministic));
}

// --- Blocks -------------------------------------------------------------------------------

// A densely packed [batch, heads, rows, head_dim] block in scratch.
TensorRef dense_block(void* data, const AttentionShape& s, int64_t heads, int64_t rows) {
  return make_tensor_ref(data, Layout::bhsd, s.batch, heads, rows, s.head_dim);
}

// Rows [first_row, ...) of an fp32 sum over the whole sequence ([B, heads, seq, D], dense), as
// the tensor a block's backward() adds to.
TensorRef sum_rows(float* sums, const AttentionShape& s, int64_t heads, int64_t seq,
                   int64_t first_row) {
  TensorRef rows = make_tensor_ref(sums, Layout::bhsd, s.batch, heads, seq, s.head_dim);
  rows.data = sums + first_row * rows.seq_stride;
  return rows;
}

// The block's diagonal: the whole problem's, moved to the block's first query and key, so that
// its local positions i, j see each other as the global ones i + queries.begin, j + keys.begin.
int64_t block_diagonal(const Plan& plan, const Chunk& queries, const Chunk& keys) {
  return plan.band.offset + queries.begin - keys.begin;
}

// The arguments of one block: the chunks' lengths and rows of q, k, v (and out, dout), its own
// diagonal; everything else the whole problem's. Args is ForwardArgs or BackwardArgs.
template <typename Args>
Args block_args(const Args& whole, const Plan& plan, const Block& block) {
  const Chunk& queries = plan.query_chunks[size_t(block.query_chunk)];
  const Chunk& keys = plan.key_chunks[size_t(block.key_chunk)];
  Args args = whole;
  args.shape.seq_q = queries.size();
  args.shape.seq_k = keys.size();
  args.q = tensor_rows(whole.q, queries.begin, whole.dtype);
  args.k = tensor_rows(whole.k, keys.begin, whole.dtype);
  args.v = tensor_rows(whole.v, keys.begin, whole.dtype);
  args.diagonal_offset = block_diagonal(plan, queries, keys);
  return args;
}

// --- Forward ------------------------------------------------------------------------------

// One block's O and LSE, as the next fp32 partial result of its query chunk's merge.
void forward_block(const ForwardArgs& whole, const Plan& plan, const Block& block,
                   const ForwardScratch& scratch, detail::ChunkMerge& merge,
                   cudaStream_t stream) {
  ForwardArgs args = block_args(whole, plan, block);
  const AttentionShape& s = args.shape;
  args.out = dense_block(scratch.block_out, s, s.heads, s.seq_q);
  args.lse = merge.next_lse();
  args.splits = 1;  // the block is one chunk of keys already: no workspace of its own
  args.workspace = nullptr;
  args.workspace_bytes = 0;
  forward(args, stream);
  detail::widen_to_fp32(scratch.block_out, args.dtype, merge.next_out(), s.q_elements(), stream);
  merge.add(stream);
}

// The rank's result for one of its query chunks: the chunk's blocks in ring order, each merged
// into the running result as it comes, then the result written into the chunk's rows of O and
// LSE.
void forward_query_chunk(const ForwardArgs& whole, const Plan& plan, const RankPlan& rank,
                         int query_chunk, const ForwardScratch& scratch, cudaStream_t stream) {
  const Chunk& queries = plan.query_chunks[size_t(query_chunk)];
  if (queries.empty()) return;
  const AttentionShape& s = whole.shape;
  const int64_t rows = queries.size();
  detail::ChunkMerge merge(scratch.partial_out, scratch.partial_lse, s, rows);
  for (const RingStep& step : rank.steps) {
    for (const Block& block : step.blocks) {
      if (block.query_chunk == query_chunk) {
        forward_block(whole, plan, block, scratch, merge, stream);
      }
    }
  }
  const float* lse =
      merge.finish(tensor_rows(whole.out, queries.begin, whole.dtype), whole.dtype, stream);
  detail::copy_lse_rows(whole.lse + queries.begin, s.seq_q, lse, rows, rows, s.batch * s.heads,
                        stream);
}

// --- Backward -----------------------------------------------------------------------------

// One block's terms of dQ, dK and dV, from the whole problem's O, dO and LSE rows of its
// queries, added by its backward() in fp32 to the rows of its chunks in the sums: one rounding
// to the dtype at the end, as one call on the whole problem.
void backward_block(const BackwardArgs& whole, const Plan& plan, const Block& block,
                    const float* chunk_lse, const BackwardScratch& scratch,
                    cudaStream_t stream) {
  const Chunk& queries = plan.query_chunks[size_t(block.query_chunk)];
  const Chunk& keys = plan.key_chunks[size_t(block.key_chunk)];
  BackwardArgs args = block_args(whole, plan, block);
  args.out = tensor_rows(whole.out, queries.begin, whole.dtype);
  args.dout = tensor_rows(whole.dout, queries.begin, whole.dtype);
  args.lse = chunk_lse;
  const AttentionShape& w = whole.shape;
  args.dq = args.dk = args.dv = TensorRef{};
  args.sums.dq = sum_rows(scratch.dq_sum, w, w.heads, w.seq_q, queries.begin);
  args.sums.dk = sum_rows(scratch.dk_sum, w, w.heads_kv, w.seq_k, keys.begin);
  args.sums.dv = sum_rows(scratch.dv_sum, w, w.heads_kv, w.seq_k, keys.begin);
  args.workspace = scratch.block_workspace;
  args.workspace_bytes = scratch.block_workspace_bytes;
  backward(args, stream);
}

// The blocks of one rank, in ring order; each reads the LSE rows of its query chunk, copied
// packed (backward() takes a contiguous [B, H, rows] LSE).
void backward_rank(const BackwardArgs& whole, const Plan& plan, const RankPlan& rank,
                   const BackwardScratch& scratch, cudaStream_t stream) {
  const AttentionShape& s = whole.shape;
  for (size_t i = 0; i < rank.query_chunks.size(); ++i) {
    const Chunk& queries = plan.query_chunks[size_t(rank.query_chunks[i])];
    if (queries.empty()) continue;
    detail::copy_lse_rows(scratch.chunk_lse[i], queries.size(), whole.lse + queries.begin, s.seq_q,
                  queries.size(), s.batch * s.heads, stream);
  }
  for (const RingStep& step : rank.steps) {
    for (const Block& block : step.blocks) {
      const size_t which = block.query_chunk == rank.query_chunks[0] ? 0 : 1;
      backward_block(whole, plan, block, scratch.chunk_lse[which], scratch, stream);
    }
  }
}

void zero_floats(float* data, int64_t count, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(data, 0, size_t(count) * sizeof(float), stream),
             "single-GPU context parallelism: zeroing the gradient sums");
}

}  // namespace

TensorRef tensor_rows(const TensorRef& tensor, int64_t first_row, DType dtype) {
  TensorRef rows = tensor;
  rows.data = static_cast<unsigned char*>(tensor.data) +
              element_bytes(first_row * tensor.seq_stride, dtype);
  return rows;
}

size_t single_gpu_forward_workspace_size(const AttentionShape& shape, DType dtype, int ranks) {
  check_layout("context_parallel::single_gpu_forward_workspace_size", shape, ranks);
  Sections sections(nullptr);
  forward_scratch(sections, shape, dtype, ranks);
  return sections.used();
}

size_t single_gpu_backward_workspace_size(const AttentionShape& shape, DType dtype, int ranks,
                                          bool deterministic) {
  check_layout("context_parallel::single_gpu_backward_workspace_size", shape, ranks);
  Sections sections(nullptr);
  backward_scratch(sections, shape, dtype, ranks, deterministic);
  return sections.used();
}

void single_gpu_forward(const ForwardArgs& args, int ranks, cudaStream_t stream) {
  const std::string context = "context_parallel::single_gpu_forward";
  check_forward(args, ranks);
  const AttentionShape& s = args.shape;
  const Plan plan = plan_of(context, s, args.mask, args.window, ranks);
  Sections sections(args.workspace);
  const ForwardScratch scratch = forward_scratch(sections, s, args.dtype, ranks);
  for (const RankPlan& rank : plan.rank_plans) {
    for (const int query_chunk : rank.query_chunks) {
      forward_query_chunk(args, plan, rank, query_chunk, scratch, stream);
    }
  }
}

void single_gpu_backward(const BackwardArgs& args, int ranks, cudaStream_t stream) {
  const std::string context = "context_parallel::single_gpu_backward";
  check_backward(args, ranks);
  const AttentionShape& s = args.shape;
  const Plan plan = plan_of(context, s, args.mask, args.window, ranks);
  Sections sections(args.workspace);
  const BackwardScratch scratch =
      backward_scratch(sections, s, args.dtype, ranks, args.deterministic);
  zero_floats(scratch.dq_sum, s.q_elements(), stream);
  zero_floats(scratch.dk_sum, s.kv_elements(), stream);
  zero_floats(scratch.dv_sum, s.kv_elements(), stream);
  for (const RankPlan& rank : plan.rank_plans) backward_rank(args, plan, rank, scratch, stream);
  detail::store_sums(scratch.dq_sum, args.dq, args.dtype, s.batch, s.heads, s.seq_q, s.head_dim,
                     stream);
  detail::store_sums(scratch.dk_sum, args.dk, args.dtype, s.batch, s.heads_kv, s.seq_k,
                     s.head_dim, stream);
  detail::store_sums(scratch.dv_sum, args.dv, args.dtype, s.batch, s.heads_kv, s.seq_k,
                     s.head_dim, stream);
}

DevicePasses single_gpu_passes(int ranks) {
  check_ranks("context_parallel::single_gpu_passes", ranks);
  DevicePasses passes;
  passes.ranks = ranks;
  passes.forward_workspace_bytes = [ranks](const Problem& p) {
    return single_gpu_forward_workspace_size(p.shape, p.dtype, ranks);
  };
  passes.backward_workspace_bytes = [ranks](const Problem& p) {
    return single_gpu_backward_workspace_size(p.shape, p.dtype, ranks, p.deterministic);
  };
  passes.forward = [ranks](const ForwardArgs& args, cudaStream_t stream) {
    single_gpu_forward(args, ranks, stream);
  };
  passes.backward = [ranks](const BackwardArgs& args, cudaStream_t stream) {
    single_gpu_backward(args, ranks, stream);
  };
  return passes;
}

DevicePasses device_passes(const Problem& problem, ShardCopies copies) {
  if (problem.gpus > 0) return ring_passes(problem.gpus, copies);
  return problem.ranks > 0 ? single_gpu_passes(problem.ranks) : library_passes();
}

}  // namespace cuflash::context_parallel
