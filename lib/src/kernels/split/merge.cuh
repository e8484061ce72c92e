// The merge of partial attention results (merge_attention_partials() and the split-KV forward's
// last step): for each row, partials O_s (normalized over their own keys) with natural-log
// sum-exps L_s combine into
//   L = log(sum_s exp(L_s)),   O = sum_s exp(L_s - L) O_s,
// computed against the largest L_s in exp2 units. A partial with L_s = -inf or +inf saw no key
// and weighs nothing; a row whose partials all saw none gets O = 0, L = +inf (the forward's
// convention); a NaN in L_s or O_s gives NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/fragments.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/softmax.cuh"

namespace cuflash::detail::split {

template <typename Element>
struct MergeParams {
  int64_t splits;
  int64_t heads;
  int64_t seq_q;
  int64_t rows;      // batch * heads * seq_q
  int64_t head_dim;  // a multiple of 8
  const float* partial_out;  // [splits, rows, head_dim]
  const float* partial_lse;  // [splits, rows]
  GlobalTensor<Element> out;
  float* lse;  // [rows]
};

// One thread per (row, 8 columns), grid-stride.
template <typename Element>
__global__ void __launch_bounds__(kElementwiseThreads)
    merge_partials_kernel(const MergeParams<Element> params) {
  const int64_t chunks_per_row = params.head_dim / 8;
  const int64_t total = params.rows * chunks_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += stride) {
    const int64_t row = index / chunks_per_row;
    const int64_t col = (index % chunks_per_row) * 8;
    float max_log2 = kMaskedScore;  // the largest L_s so far, in log2 units
    float weight_sum = 0.f;         // sum of exp2(L_s - max)
    float acc[8] = {};              // sum of exp2(L_s - max) O_s
    for (int64_t split = 0; split < params.splits; ++split) {
      const int64_t partial_row = split * params.rows + row;
      const float lse = params.partial_lse[partial_row];
      if (isinf(lse)) continue;  // saw no key
      const float lse_log2 = lse * kLog2e;
      if (lse_log2 > max_log2) {
        const float rescale = fast_exp2(max_log2 - lse_log2);  // 0 at the first partial
        weight_sum *= rescale;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] *= rescale;
        max_log2 = lse_log2;
      }
      const float weight = fast_exp2(lse_log2 - max_log2);  // NaN for a NaN L_s
      float values[8];
      load8(params.partial_out + partial_row * params.head_dim + col, values);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(weight, values[i], acc[i]);
      weight_sum += weight;
    }
    const bool empty = weight_sum == 0.f;
    const float normalizer = empty ? 0.f : 1.f / weight_sum;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= normalizer;
    const int64_t bh = row / params.seq_q;
    Element* out = params.out.slice(bh / params.heads, bh % params.heads) +
                   (row % params.seq_q) * params.out.seq_stride;
    store8(out + col, acc);
    if (col == 0) {
      params.lse[row] = empty ? kEmptyRowLse : (max_log2 + __log2f(weight_sum)) * kLn2;
    }
  }
}

template <typename Element>
void launch_merge(const MergeParams<Element>& params, cudaStream_t stream) {
  const int64_t threads = params.rows * (params.head_dim / 8);
  launch_kernel(&merge_partials_kernel<Element>, dim3(elementwise_blocks(threads)),
                kElementwiseThreads, 0, stream, params);
}

// Compiled once, in merge.cu, for every element type.
extern template void launch_merge<__half>(const MergeParams<__half>&, cudaStream_t);
extern template void launch_merge<__nv_bfloat16>(const MergeParams<__nv_bfloat16>&, cudaStream_t);
extern template void launch_merge<float>(const MergeParams<float>&, cudaStream_t);

}  // namespace cuflash::detail::split
