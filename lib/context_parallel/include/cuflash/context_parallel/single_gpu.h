// The single-GPU mode of context-parallel (ring) attention: the N ranks of the plan (plan.h) run
// one after another on one GPU, in one process, each block (a query chunk against a key chunk)
// through the library's own forward() and backward() at its global diagonal
// (ForwardArgs::diagonal_offset), the partial results of a query chunk merged by
// merge_attention_partials() as a rank of the ring merges them while the K/V shards pass by. It
// computes the same attention as forward() and backward() of the whole problem, within their
// rounding, and exercises the partitioning, the balance and the merges on the real kernels
// without several GPUs; it is not faster than one call.
//
// Forward, per rank and query chunk: each kept block's O (in the dtype) and LSE go into fp32
// partials; the chunk's running result merges with each new block in ring order, and the last
// merge writes the chunk's rows of O and LSE. A query chunk that sees no key gets O = 0 and
// LSE = +inf, as forward() gives such rows.
// Backward, from the whole problem's O and LSE: each block's backward() with the LSE and O rows
// of its queries yields exactly its terms of dQ, dK and dV (P = exp(S - LSE) and
// D_i = rowsum(dO_i * O_i) are the whole problem's), which are summed in fp32 in ring order and
// written in the dtype at the end.
//
// Dense problems only: a varlen batch, paged K/V, cache_seqlens, key splits above 1, an
// explicit diagonal_offset and the backward's GradientSums are refused (cuflash::Error, kind
// unsupported or invalid_argument).
// Asynchronous on `stream`, allocating nothing: the workspace comes with the arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/context_parallel/ring.h"
#include "cuflash/host_runner.h"
#include "cuflash/problem.h"
#include "cuflash/types.h"

namespace cuflash::context_parallel {

// Bytes of device scratch single_gpu_forward() takes: one block's O in the dtype and three fp32
// partial results (O and LSE) of the largest query chunk, each rounded up to 256 bytes.
size_t single_gpu_forward_workspace_size(const AttentionShape& shape, DType dtype, int ranks);

// Bytes single_gpu_backward() takes: fp32 sums of dQ, dK and dV (the blocks' backward() calls
// add to them), the LSE rows of a rank's two query chunks, and backward()'s own workspace for
// the largest block (backward_workspace_size(..., deterministic)), each rounded up to 256 bytes.
size_t single_gpu_backward_workspace_size(const AttentionShape& shape, DType dtype, int ranks,
                                          bool deterministic = false);

// forward(args) computed by `ranks` context-parallel ranks (>= 1) one after another.
// args.workspace: at least single_gpu_forward_workspace_size() bytes, 256-byte aligned (the
// blocks' forward() calls run unsplit and take none of their own).
void single_gpu_forward(const ForwardArgs& args, int ranks, cudaStream_t stream = nullptr);

// backward(args) computed likewise, from the whole problem's O (args.out) and LSE (args.lse).
// args.workspace: at least single_gpu_backward_workspace_size(..., args.deterministic) bytes,
// 256-byte aligned. With args.deterministic dQ, dK and dV are the same bits on every run (the
// blocks' sums run in a fixed order too).
void single_gpu_backward(const BackwardArgs& args, int ranks, cudaStream_t stream = nullptr);

// The rows [first_row, ...) of every (batch, head) of a [batch, heads, seq, head_dim] tensor of
// `dtype`: the same strides, from row first_row on (a chunk of the sequence).
TensorRef tensor_rows(const TensorRef& tensor, int64_t first_row, DType dtype);

// The passes of the host runner and the benchmark (host_runner.h) that compute with `ranks`
// ranks: single_gpu_forward(), single_gpu_backward() and their workspace sizes.
DevicePasses single_gpu_passes(int ranks);

// The passes the problem asks for: ring_passes(problem.gpus, copies) (ring.h) when gpus is
// above 0, single_gpu_passes(problem.ranks) when ranks is, else library_passes() (forward() and
// backward() of the whole problem).
DevicePasses device_passes(const Problem& problem,
                           ShardCopies copies = ShardCopies::every_call);

}  // namespace cuflash::context_parallel
