// Element-wise work of the single-GPU mode on dense row blocks: a block's result (in the dtype,
// [planes, rows, width], planes = batch * heads) widened to fp32, and fp32 sums over the whole
// sequence ([planes, seq, width]) stored in the dtype into a strided tensor.
// Asynchronous on `stream`; launch failures throw cuflash::Error.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/types.h"

namespace cuflash::context_parallel::detail {

// out[i] = in[i] as fp32, for `count` elements of `dtype`.
void widen_to_fp32(const void* in, DType dtype, float* out, int64_t count, cudaStream_t stream);

// `out`, a [batch, heads, seq, width] tensor of `dtype` with its own strides (as forward()
// takes them), = the fp32 sums [batch * heads, seq, width].
void store_sums(const float* sums, const TensorRef& out, DType dtype, int64_t batch,
                int64_t heads, int64_t seq, int64_t width, cudaStream_t stream);

// to[i] += from[i] for `count` floats (the ring's dK/dV sums of a shard's earlier holders).
void add_fp32(float* to, const float* from, int64_t count, cudaStream_t stream);

// `count` floats = value.
void fill(float* out, int64_t count, float value, cudaStream_t stream);

// LSE rows: `rows` floats of each of `planes` (batch * heads) rows of [planes, to_seq] from
// [planes, from_seq], e.g. a query chunk's rows between a whole LSE and a packed one.
void copy_lse_rows(float* to, int64_t to_seq, const float* from, int64_t from_seq, int64_t rows,
                   int64_t planes, cudaStream_t stream);

}  // namespace cuflash::context_parallel::detail
