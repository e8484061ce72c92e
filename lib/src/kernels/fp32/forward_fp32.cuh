// FP32 attention forward on CUDA cores (FlashAttention-2 schedule, fp32 FMA throughout).
//
// One CTA owns kBlockM query rows of one (batch, head): Q stays in shared memory while key/value
// tiles of kBlockN rows stream through it. Per key tile:
//   S = Q K^T                      (kBlockM, kBlockN)  registers, 4 rows x kKeysPerThread each
//   online softmax in base 2       running max / sum per row, O rescaled in registers
//   P -> shared memory, O += P V   (kBlockM, head_dim) registers, 4 rows x head_dim/16 each
// Finally O /= rowsum and LSE = ln(sum_j exp(scale * q.k_j)) are written. No atomics: the result
// is bitwise identical run to run.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "cuflash/types.h"
#include "tile_ops_fp32.cuh"

namespace cuflash::detail::fp32 {

template <int kHeadDim>
struct ForwardTile {
  static constexpr int kBlockM = 64;  // query rows per CTA
  // Key rows per step. 32 at head_dim 128 keeps shared memory at 75 KB: two CTAs per SM.
  static constexpr int kBlockN = kHeadDim <= 64 ? 64 : 32;
  static constexpr int kRowsPerThread = kBlockM / kThreadGridRows;  // query rows ty * 4 + i
  static constexpr int kKeysPerThread = kBlockN / kThreadGridCols;  // keys tx + 16 * j
  static constexpr int kMinBlocksPerSm = 2;

  static constexpr int kPitchD = kHeadDim + kSmemPad;  // row pitch of q_s, k_s, v_s
  static constexpr int kPitchN = kBlockN + kSmemPad;   // row pitch of p_s
  // Shared memory layout, offsets in floats.
  static constexpr int kQOffset = 0;                             // q_s (kBlockM, kPitchD)
  static constexpr int kKOffset = kQOffset + kBlockM * kPitchD;  // k_s (kBlockN, kPitchD)
  static constexpr int kVOffset = kKOffset + kBlockN * kPitchD;  // v_s (kBlockN, kPitchD)
  static constexpr int kPOffset = kVOffset + kBlockN * kPitchD;  // p_s (kBlockM, kPitchN)
  static constexpr int kSmemFloats = kPOffset + kBlockM * kPitchN;
  static constexpr int kSmemBytes = kSmemFloats * static_cast<int>(sizeof(float));

  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "compiled head dims");
  static_assert(kBlockM % kThreadGridRows == 0 && kBlockN % kThreadGridCols == 0,
                "tiles split evenly over the (16, 16) thread grid");
  static_assert(kSmemBytes <= 99 * 1024, "fits the 99 KB per block of sm_86 / sm_89 too");
};

struct ForwardParams {
  DeviceTensor q;    // [B, H, Sq, D]
  DeviceTensor k;    // [B, Hkv, Sk, D]
  DeviceTensor v;    // [B, Hkv, Sk, D]
  DeviceTensor out;  // [B, H, Sq, D]
  float* lse;        // [B, H, Sq] contiguous
  int64_t heads;
  int64_t heads_kv;
  int64_t batch_heads;  // B * H
  MaskGeometry mask;
  float scale_log2;  // softmax scale * log2(e)
};

inline ForwardParams make_forward_params(const ForwardArgs& args) {
  const AttentionShape& shape = args.shape;
  const int seq_q = checked_seq_len(shape.seq_q, "seq_q");
  const int seq_k = checked_seq_len(shape.seq_k, "seq_k");
  const MaskGeometry mask{seq_q, seq_k, args.mask != Mask::none,
                          static_cast<int>(causal_offset(args.mask, seq_q, seq_k))};
  return ForwardParams{device_tensor(args.q), device_tensor(args.k),   device_tensor(args.v),
                       device_tensor(args.out), args.lse,              shape.heads,
                       shape.heads_kv,          shape.batch * shape.heads, mask,
                       args.scale * kLog2e};
}

// Scores to base-2 logits; under a partial tile, hidden (query, key) pairs get kMaskedScore.
// s: (kRows, kCols), row i = query first_row + i, column j = key first_key + j * 16.
template <int kRows, int kCols>
__device__ __forceinline__ void scale_and_mask(float (&s)[kRows][kCols], float scale_log2,
                                               const MaskGeometry& mask, bool partial,
                                               int first_row, int first_key) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int key_end = mask.key_end(first_row + i);
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const bool hidden = partial && first_key + j * kThreadGridCols >= key_end;
      s[i][j] = hidden ? kMaskedScore : s[i][j] * scale_log2;
    }
  }
}

// Folds one tile of base-2 logits into each row's running max and (thread-partial) sum, rescales
// the row's O accumulator, and turns the logits into unnormalized probabilities exp2(s - max).
// s: (kRows, kCols); o: (kRows, kDims).
template <int kRows, int kCols, int kDims>
__device__ __forceinline__ void online_softmax_step(float (&s)[kRows][kCols],
                                                    float (&running_max)[kRows],
                                                    float (&running_sum)[kRows],
                                                    float (&o)[kRows][kDims]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float tile_max = s[i][0];
#pragma unroll
    for (int j = 1; j < kCols; ++j) tile_max = fmaxf(tile_max, s[i][j]);
    const float new_max = fmaxf(running_max[i], row_max(tile_max));
    // A row that has seen only hidden keys still has max -inf: subtracting 0 keeps every exp2
    // at exactly 0 instead of the NaN of (-inf) - (-inf).
    const float base = new_max == kMaskedScore ? 0.f : new_max;
    const float rescale = exp2f(running_max[i] - base);
    running_max[i] = new_max;
    float tile_sum = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      s[i][j] = exp2f(s[i][j] - base);
      tile_sum += s[i][j];
    }
    running_sum[i] = running_sum[i] * rescale + tile_sum;
#pragma unroll
    for (int n = 0; n < kDims; ++n) o[i][n] *= rescale;
  }
}

// Writes a thread's probabilities to p_s (kBlockM, kPitchN): rows ty * 4 + i, keys tx + 16 * j.
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void store_probabilities(float* p_s, const float (&p)[kRows][kCols]) {
  float* row0 = p_s + thread_row() * kRows * kPitch + thread_col();
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) row0[i * kPitch + j * kThreadGridCols] = p[i][j];
}

// Normalizes O, writes it and the natural-log LSE. Rows that see no key get O = 0, LSE = +inf.
template <int kHeadDim>
__device__ __forceinline__ void finish_rows(
    const ForwardParams& params, int64_t batch_head, int64_t batch, int64_t head, int m0,
    float (&o)[ForwardTile<kHeadDim>::kRowsPerThread][HeadDimColumns<kHeadDim>::kPerThread],
    const float (&running_max)[ForwardTile<kHeadDim>::kRowsPerThread],
    const float (&running_sum)[ForwardTile<kHeadDim>::kRowsPerThread]) {
  constexpr int kRows = ForwardTile<kHeadDim>::kRowsPerThread;
  const int first_row = m0 + thread_row() * kRows;
  float inverse_sum[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float sum = row_sum(running_sum[i]);
    const int row = first_row + i;
    const bool sees_keys = params.mask.row_sees_keys(row);
    if (!sees_keys) zero(o[i]);  // 0 * (Inf or NaN in a hidden V row) must not leak out
    inverse_sum[i] = sees_keys ? 1.f / sum : 0.f;
    if (thread_col() == 0 && row < params.mask.seq_q)
      params.lse[batch_head * params.mask.seq_q + row] =
          sees_keys ? running_max[i] * kLn2 + logf(sum) : kInfinity;
  }
  const DeviceTensor& out = params.out;
  store_rows<kHeadDim, kRows>(out.head_rows(batch, head), out.seq_stride, first_row,
                              params.mask.seq_q, o, inverse_sum);
}

// One CTA's work for one (batch, head): query rows [m0, m0 + kBlockM).
template <int kHeadDim>
__device__ __forceinline__ void forward_block(const ForwardParams& params, float* smem,
                                              int64_t batch_head, int m0) {
  using Tile = ForwardTile<kHeadDim>;
  using Cols = HeadDimColumns<kHeadDim>;
  constexpr int kRows = Tile::kRowsPerThread;
  const int64_t batch = batch_head / params.heads;
  const int64_t head = batch_head % params.heads;
  const int64_t head_kv = head / (params.heads / params.heads_kv);
  const MaskGeometry& mask = params.mask;

  float* q_s = smem + Tile::kQOffset;  // (kBlockM, kPitchD)
  float* k_s = smem + Tile::kKOffset;  // (kBlockN, kPitchD)
  float* v_s = smem + Tile::kVOffset;  // (kBlockN, kPitchD)
  float* p_s = smem + Tile::kPOffset;  // (kBlockM, kPitchN)
  const float* q = params.q.head_rows(batch, head) + m0 * params.q.seq_stride;
  const float* k = params.k.head_rows(batch, head_kv);
  const float* v = params.v.head_rows(batch, head_kv);
  load_tile<Tile::kBlockM, kHeadDim, Tile::kPitchD>(q_s, q, params.q.seq_stride, mask.seq_q - m0);

  float o[kRows][Cols::kPerThread];  // (4, head_dim / 16) of the O tile
  float running_max[kRows];          // base-2 row max so far
  float running_sum[kRows];          // this thread's share of sum_j exp2(s_j - running_max)
  zero(o);
  zero(running_sum);
#pragma unroll
  for (int i = 0; i < kRows; ++i) running_max[i] = kMaskedScore;

  const int last_row = min(m0 + Tile::kBlockM, mask.seq_q) - 1;
  const int key_end = mask.key_end(last_row);  // keys past it are hidden from every row here
  const int first_row = m0 + thread_row() * kRows;
  for (int n0 = 0; n0 < key_end; n0 += Tile::kBlockN) {
    const int keys_valid = mask.seq_k - n0;
    load_tile<Tile::kBlockN, kHeadDim, Tile::kPitchD>(k_s, k + n0 * params.k.seq_stride,
                                                      params.k.seq_stride, keys_valid);
    load_tile<Tile::kBlockN, kHeadDim, Tile::kPitchD>(v_s, v + n0 * params.v.seq_stride,
                                                      params.v.seq_stride, keys_valid);
    __syncthreads();

    float s[kRows][Tile::kKeysPerThread];  // (4, kBlockN / 16) of S: keys tx + 16 * j
    zero(s);
    mma_nt<kRows, Tile::kKeysPerThread, kHeadDim>(
        s, q_s + thread_row() * kRows * Tile::kPitchD, Tile::kPitchD,
        k_s + thread_col() * Tile::kPitchD, kThreadGridCols * Tile::kPitchD);
    const bool partial = mask.tile_is_partial(m0, Tile::kBlockM, n0, Tile::kBlockN);
    scale_and_mask(s, params.scale_log2, mask, partial, first_row, n0 + thread_col());
    online_softmax_step(s, running_max, running_sum, o);
    store_probabilities<kRows, Tile::kKeysPerThread, Tile::kPitchN>(p_s, s);
    __syncthreads();

    mma_nn<kHeadDim, kRows, Tile::kBlockN>(o, p_s + thread_row() * kRows * Tile::kPitchN,
                                           Tile::kPitchN, v_s + thread_col() * Cols::kVec,
                                           Tile::kPitchD);
    __syncthreads();  // k_s, v_s, p_s are overwritten next step
  }
  finish_rows<kHeadDim>(params, batch_head, batch, head, m0, o, running_max, running_sum);
}

// grid: (ceil(Sq / kBlockM), min(B * H, 65535)); block: 256 threads.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, ForwardTile<kHeadDim>::kMinBlocksPerSm)
    forward_fp32_kernel(const ForwardParams params) {
  extern __shared__ float4 smem_vec4[];  // float4: 16-byte alignment for vector access
  float* smem = reinterpret_cast<float*>(smem_vec4);
  // Under a causal mask the last query blocks see the most keys: start them first.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  for (int64_t batch_head = blockIdx.y; batch_head < params.batch_heads; batch_head += gridDim.y)
    forward_block<kHeadDim>(params, smem, batch_head, m_block * ForwardTile<kHeadDim>::kBlockM);
}

}  // namespace cuflash::detail::fp32

namespace cuflash::detail {

template <int kHeadDim>
void launch_forward_fp32(const ForwardArgs& args, cudaStream_t stream) {
  using Tile = fp32::ForwardTile<kHeadDim>;
  const fp32::ForwardParams params = fp32::make_forward_params(args);
  const auto kernel = fp32::forward_fp32_kernel<kHeadDim>;
  fp32::allow_dynamic_smem(kernel, Tile::kSmemBytes, "forward_fp32_kernel");
  const int64_t m_blocks = (params.mask.seq_q + Tile::kBlockM - 1) / Tile::kBlockM;
  const dim3 grid(static_cast<unsigned>(m_blocks),
                  static_cast<unsigned>(fp32::grid_y_for(params.batch_heads)));
  kernel<<<grid, fp32::kThreads, Tile::kSmemBytes, stream>>>(params);
  fp32::throw_if_cuda_error(cudaGetLastError(), "forward_fp32_kernel");
}

}  // namespace cuflash::detail
