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
  int parts = 1;  // lanes per (row, 8 columns), set by launch_merge()
};

// The running merge of some partials of one row's 8 columns: the largest L_s in log2 units,
// sum_s exp2(L_s - max) and sum_s exp2(L_s - max) O_s.
struct MergeState {
  float max_log2 = kMaskedScore;
  float weight_sum = 0.f;
  float acc[8] = {};

  __device__ __forceinline__ void add(float lse, const float (&values)[8]) {
    if (isinf(lse)) return;  // saw no key
    const float lse_log2 = lse * kLog2e;
    if (lse_log2 > max_log2) {
      const float rescale = fast_exp2(max_log2 - lse_log2);  // 0 at the first partial
      weight_sum *= rescale;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] *= rescale;
      max_log2 = lse_log2;
    }
    const float weight = fast_exp2(lse_log2 - max_log2);  // NaN for a NaN L_s
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = fmaf(weight, values[i], acc[i]);
    weight_sum += weight;
  }

  // Takes in the state of the lane `lane_mask` away (every lane of the warp calls this).
  __device__ __forceinline__ void add_lane(int lane_mask) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max_log2, lane_mask);
    const float other_sum = __shfl_xor_sync(0xffffffffu, weight_sum, lane_mask);
    const float new_max = fmaxf(max_log2, other_max);
    // An empty state (no partial saw a key) weighs nothing, also against another empty one.
    const float mine = weight_sum == 0.f ? 0.f : fast_exp2(max_log2 - new_max);
    const float theirs = other_sum == 0.f ? 0.f : fast_exp2(other_max - new_max);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float other = __shfl_xor_sync(0xffffffffu, acc[i], lane_mask);
      acc[i] = acc[i] * mine + other * theirs;
    }
    weight_sum = weight_sum * mine + other_sum * theirs;
    max_log2 = new_max;
  }
};

// parts (a power of two, at most 32) neighbouring lanes share each (row, 8 columns): lane part
// merges splits part, part + parts, ...; the lanes then combine their states by shuffles, so
// that a few rows with many splits (one decoded token against a long cache) still spread over
// many threads. Grid-stride over whole warps, so that every lane of a warp takes part in every
// shuffle. The order of the additions depends on splits and parts alone: the same bits on
// every run.
template <typename Element>
__global__ void __launch_bounds__(kElementwiseThreads)
    merge_partials_kernel(const MergeParams<Element> params) {
  const int parts = params.parts;
  const int64_t chunks_per_row = params.head_dim / 8;
  const int64_t total = params.rows * chunks_per_row * parts;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t warp_first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x - lane;
       warp_first < total; warp_first += stride) {
    const int64_t index = warp_first + lane;
    const bool active = index < total;
    const int64_t chunk = index / parts;
    const int part = static_cast<int>(index % parts);
    const int64_t row = active ? chunk / chunks_per_row : 0;
    const int64_t col = (chunk % chunks_per_row) * 8;
    MergeState state;
    // Two partials a step, both loaded before either is added: their loads are in flight
    // together (the merge waits on memory, and most lanes have at most two partials).
    for (int64_t split = part; active && split < params.splits; split += 2 * parts) {
      const int64_t first_row = split * params.rows + row;
      const bool second = split + parts < params.splits;
      const int64_t second_row = second ? first_row + parts * params.rows : first_row;
      float first_values[8], second_values[8];
      load8(params.partial_out + first_row * params.head_dim + col, first_values);
      load8(params.partial_out + second_row * params.head_dim + col, second_values);
      const float first_lse = params.partial_lse[first_row];
      const float second_lse = params.partial_lse[second_row];
      state.add(first_lse, first_values);
      if (second) state.add(second_lse, second_values);
    }
    for (int lane_mask = parts / 2; lane_mask > 0; lane_mask /= 2) state.add_lane(lane_mask);
    if (!active || part != 0) continue;
    const bool empty = state.weight_sum == 0.f;
    const float normalizer = empty ? 0.f : 1.f / state.weight_sum;
#pragma unroll
    for (int i = 0; i < 8; ++i) state.acc[i] *= normalizer;
    const int64_t bh = row / params.seq_q;
    Element* out = params.out.slice(bh / params.heads, bh % params.heads) +
                   (row % params.seq_q) * params.out.seq_stride;
    store8(out + col, state.acc);
    if (col == 0) {
      params.lse[row] =
          empty ? kEmptyRowLse : (state.max_log2 + __log2f(state.weight_sum)) * kLn2;
    }
  }
}

// Lanes per (row, 8 columns): at most two splits each (one step of the loop) up to 64 splits,
// at most a warp. More lanes cost a shuffle round each, fewer a serial chain of dependent loads:
// with one lane of all 6 splits, the merge over 2048 rows took 8.6 us (ncu, B=64 MQA decode).
inline int merge_parts(int64_t splits) {
  int parts = 1;
  while (parts < 32 && 2 * parts < splits) parts *= 2;
  return parts;
}

template <typename Element>
void launch_merge(MergeParams<Element> params, cudaStream_t stream) {
  params.parts = merge_parts(params.splits);
  const int64_t threads = params.rows * (params.head_dim / 8) * params.parts;
  launch_kernel(&merge_partials_kernel<Element>, dim3(elementwise_blocks(threads)),
                kElementwiseThreads, 0, stream, params);
}

// Compiled once, in merge.cu, for every element type.
extern template void launch_merge<__half>(MergeParams<__half>, cudaStream_t);
extern template void launch_merge<__nv_bfloat16>(MergeParams<__nv_bfloat16>, cudaStream_t);
extern template void launch_merge<float>(MergeParams<float>, cudaStream_t);

}  // namespace cuflash::detail::split
