// FP32 attention backward on CUDA cores (FlashAttention-2 schedule, fp32 FMA throughout).
//
// Three kernels on `stream`, after zeroing the dQ workspace with cudaMemsetAsync:
//  1. row_sums_fp32_kernel:  D_i = sum_d dO[i, d] * O[i, d]  -> workspace row sums [B, H, Sq].
//  2. backward_fp32_kernel:  one CTA per (batch, kv head, block of kBlockN keys). K and V stay in
//     shared memory; the CTA walks every query head of its GQA group and every block of kBlockM
//     queries that can see its keys, and per step computes (keys as rows, queries as columns)
//       S^T  = K Q^T,   P^T = exp2(S^T * scale * log2(e) - LSE_i * log2(e))    (kBlockN, kBlockM)
//       dP^T = V dO^T,  dS^T = P^T * (dP^T - D_i)                              (kBlockN, kBlockM)
//       dV += P^T dO,   dK += dS^T Q                 registers, summed over the whole GQA group
//       dQ += scale * dS K                           atomicAdd into the fp32 workspace
//     dK and dV are summed in a fixed order in registers, so they are deterministic.
//  3. dq_store_fp32_kernel:  copies the dQ workspace ([B, H, Sq, D], contiguous) to dq's strides.
//
// Why atomics for dQ: the alternative, a second pass with one CTA per query block, recomputes
// S and dP (two of the five products) and so costs about 40% more FMAs; on CUDA cores the FMAs
// dominate, while the atomics add one fp32 reduction per dQ element per key block, which L2
// absorbs. The price is that dQ's rounding can differ run to run (fp32 sums in varying order).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuflash/attention.h"
#include "cuflash/error.h"
#include "cuflash/types.h"
#include "tile_ops_fp32.cuh"

namespace cuflash::detail::fp32 {

// One tiling of the main kernel. Which one runs depends on the GPU's shared memory (see
// BackwardTiles): sm_80 / sm_90 take the larger query blocks (more FMAs per shared-memory load),
// GPUs with 99 KB per block (sm_86, sm_89) the smaller ones.
template <int kHeadDim_, int kBlockN_, int kBlockM_>
struct BackwardTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBlockN_;  // key rows per CTA, resident in shared memory
  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kKeysPerThread = kBlockN / kThreadGridRows;     // keys ty * R + i
  static constexpr int kQueriesPerThread = kBlockM / kThreadGridCols;  // S^T cols tx + 16 * j
  static constexpr int kDqRowsPerThread = kBlockM / kThreadGridRows;   // dQ rows ty * R + i
  static constexpr int kMinBlocksPerSm = kHeadDim <= 64 ? 2 : 1;

  static constexpr int kPitchD = kHeadDim + kSmemPad;  // row pitch of k_s, v_s, q_s, do_s
  static constexpr int kPitchM = kBlockM + kSmemPad;   // row pitch of pt_s, dst_s
  // Shared memory layout, offsets in floats.
  static constexpr int kKOffset = 0;                                 // k_s    (kBlockN, kPitchD)
  static constexpr int kVOffset = kKOffset + kBlockN * kPitchD;      // v_s    (kBlockN, kPitchD)
  static constexpr int kQOffset = kVOffset + kBlockN * kPitchD;      // q_s    (kBlockM, kPitchD)
  static constexpr int kDoOffset = kQOffset + kBlockM * kPitchD;     // do_s   (kBlockM, kPitchD)
  static constexpr int kPtOffset = kDoOffset + kBlockM * kPitchD;    // pt_s   (kBlockN, kPitchM)
  static constexpr int kDstOffset = kPtOffset + kBlockN * kPitchM;   // dst_s  (kBlockN, kPitchM)
  static constexpr int kLseOffset = kDstOffset + kBlockN * kPitchM;  // lse2_s (kBlockM,)
  static constexpr int kRowSumOffset = kLseOffset + kBlockM;         // rowsum_s (kBlockM,)
  static constexpr int kSmemFloats = kRowSumOffset + kBlockM;
  static constexpr int kSmemBytes = kSmemFloats * static_cast<int>(sizeof(float));

  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "compiled head dims");
  static_assert(kBlockN % kThreadGridRows == 0 && kBlockM % kThreadGridCols == 0,
                "tiles split evenly over the (16, 16) thread grid");
  static_assert(kDqRowsPerThread == 1 || kDqRowsPerThread == 2 || kDqRowsPerThread == 4,
                "a thread's dQ rows are read as one vector of dS^T");
  static_assert(kSmemBytes <= 227 * 1024, "fits the opt-in shared memory of sm_90");
};

// The tilings of one head_dim. Large: 72 KB (d32), 105 KB (d64), 117 KB (d128) of shared
// memory, for sm_80 and sm_90. Small: at most 77 KB, for the 99 KB per block of sm_86 / sm_89;
// at d32 the large one already fits.
template <int kHeadDim>
struct BackwardTiles {
  using Large = BackwardTile<kHeadDim, 64, kHeadDim <= 64 ? 64 : 32>;
  using Small = BackwardTile<kHeadDim, kHeadDim <= 64 ? 64 : 32, kHeadDim <= 32 ? 64 : 32>;
  static_assert(Small::kSmemBytes <= 99 * 1024, "the small tiling fits sm_86 / sm_89");
};

struct BackwardParams {
  DeviceTensor q, k, v, out, dout;  // [B, H, Sq, D] (q, out, dout); [B, Hkv, Sk, D] (k, v)
  DeviceTensor dq, dk, dv;          // outputs, shaped like q, k, v
  const float* lse;                 // [B, H, Sq] contiguous, natural log
  float* dq_accum;                  // workspace [B, H, Sq, D] contiguous
  float* row_sums;                  // workspace [B, H, Sq]: D_i = dot(dO_i, O_i)
  int64_t heads;
  int64_t heads_kv;
  int64_t batch_heads;     // B * H
  int64_t batch_heads_kv;  // B * Hkv
  MaskGeometry mask;
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
};

// Byte offset of the row sums in the workspace: after the dQ accumulator, on a 256-byte boundary.
inline size_t row_sums_offset(const AttentionShape& shape) {
  constexpr size_t kAlignment = 256;
  const size_t dq_bytes = static_cast<size_t>(shape.batch * shape.heads * shape.seq_q *
                                              shape.head_dim) * sizeof(float);
  return (dq_bytes + kAlignment - 1) / kAlignment * kAlignment;
}

inline BackwardParams make_backward_params(const BackwardArgs& args) {
  const AttentionShape& shape = args.shape;
  const int seq_q = checked_seq_len(shape.seq_q, "seq_q");
  const int seq_k = checked_seq_len(shape.seq_k, "seq_k");
  const MaskGeometry mask{seq_q, seq_k, args.mask != Mask::none,
                          static_cast<int>(causal_offset(args.mask, seq_q, seq_k))};
  auto* workspace = static_cast<unsigned char*>(args.workspace);
  BackwardParams params{};
  params.q = device_tensor(args.q);
  params.k = device_tensor(args.k);
  params.v = device_tensor(args.v);
  params.out = device_tensor(args.out);
  params.dout = device_tensor(args.dout);
  params.dq = device_tensor(args.dq);
  params.dk = device_tensor(args.dk);
  params.dv = device_tensor(args.dv);
  params.lse = args.lse;
  params.dq_accum = reinterpret_cast<float*>(workspace);
  params.row_sums = reinterpret_cast<float*>(workspace + row_sums_offset(shape));
  params.heads = shape.heads;
  params.heads_kv = shape.heads_kv;
  params.batch_heads = shape.batch * shape.heads;
  params.batch_heads_kv = shape.batch * shape.heads_kv;
  params.mask = mask;
  params.scale = args.scale;
  params.scale_log2 = args.scale * kLog2e;
  return params;
}

// ---- 1. row sums D_i ---------------------------------------------------------------------------

// kHeadDim / 4 lanes share a row, one float4 of O and dO each; grid-stride over B * H * Sq rows.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) row_sums_fp32_kernel(const BackwardParams params) {
  constexpr int kLanesPerRow = kHeadDim / 4;
  constexpr int kRowsPerCta = kThreads / kLanesPerRow;
  static_assert(kLanesPerRow <= kWarpSize, "a row's lanes are within one warp");
  const int lane = static_cast<int>(threadIdx.x) % kLanesPerRow;
  const int64_t total_rows = params.batch_heads * params.mask.seq_q;
  // `first` is the same for the whole CTA, so every lane runs every iteration and the
  // full-warp shuffles below are always converged.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerCta; first < total_rows;
       first += static_cast<int64_t>(gridDim.x) * kRowsPerCta) {
    const int64_t row = first + threadIdx.x / kLanesPerRow;  // flat (batch, head, query)
    float partial = 0.f;
    if (row < total_rows) {
      const int64_t query = row % params.mask.seq_q;
      const int64_t batch_head = row / params.mask.seq_q;
      const int64_t batch = batch_head / params.heads;
      const int64_t head = batch_head % params.heads;
      const int64_t column = lane * 4;
      float o[4], d_o[4];
      load_vec<4>(params.out.head_rows(batch, head) + query * params.out.seq_stride + column, o);
      load_vec<4>(params.dout.head_rows(batch, head) + query * params.dout.seq_stride + column,
                  d_o);
      partial = o[0] * d_o[0] + o[1] * d_o[1] + o[2] * d_o[2] + o[3] * d_o[3];
    }
#pragma unroll
    for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
      partial += __shfl_xor_sync(0xffffffffu, partial, offset, kLanesPerRow);
    if (row < total_rows && lane == 0) params.row_sums[row] = partial;
  }
}

// ---- 2. main kernel ----------------------------------------------------------------------------

// Stages query rows [m0, m0 + kBlockM) of one head: Q, dO, LSE in base 2 and row sums. Rows past
// seq_q get LSE +inf (P = 0) and zero Q / dO / D_i.
template <typename Tile>
__device__ __forceinline__ void load_query_block(const BackwardParams& params, float* smem,
                                                 int64_t batch, int64_t head, int m0) {
  constexpr int kHeadDim = Tile::kHeadDim;
  const int rows_valid = params.mask.seq_q - m0;
  const DeviceTensor& q = params.q;
  const DeviceTensor& dout = params.dout;
  load_tile<Tile::kBlockM, kHeadDim, Tile::kPitchD>(
      smem + Tile::kQOffset, q.head_rows(batch, head) + m0 * q.seq_stride, q.seq_stride,
      rows_valid);
  load_tile<Tile::kBlockM, kHeadDim, Tile::kPitchD>(
      smem + Tile::kDoOffset, dout.head_rows(batch, head) + m0 * dout.seq_stride,
      dout.seq_stride, rows_valid);
  const int64_t first_row = (batch * params.heads + head) * params.mask.seq_q + m0;
  for (int r = static_cast<int>(threadIdx.x); r < Tile::kBlockM; r += kThreads) {
    const bool valid = r < rows_valid;
    smem[Tile::kLseOffset + r] = valid ? params.lse[first_row + r] * kLog2e : kInfinity;
    smem[Tile::kRowSumOffset + r] = valid ? params.row_sums[first_row + r] : 0.f;
  }
}

// Turns S^T into P^T and dP^T into dS^T in place, zeroing hidden (query, key) pairs.
// s, dp: (kKeysPerThread, kQueriesPerThread); row i = key first_key + i, column j = query
// m0 + tx + 16 * j.
template <typename Tile>
__device__ __forceinline__ void probabilities_and_grads(
    const BackwardParams& params, const float* smem, bool partial, int first_key, int m0,
    float (&s)[Tile::kKeysPerThread][Tile::kQueriesPerThread],
    float (&dp)[Tile::kKeysPerThread][Tile::kQueriesPerThread]) {
  const MaskGeometry& mask = params.mask;
#pragma unroll
  for (int j = 0; j < Tile::kQueriesPerThread; ++j) {
    const int local_query = thread_col() + j * kThreadGridCols;
    const int query = m0 + local_query;
    const float lse2 = smem[Tile::kLseOffset + local_query];
    const float row_sum = smem[Tile::kRowSumOffset + local_query];
    const int key_end = query < mask.seq_q ? mask.key_end(query) : 0;
#pragma unroll
    for (int i = 0; i < Tile::kKeysPerThread; ++i) {
      const bool visible = !partial || first_key + i < key_end;
      const float p = exp2f(s[i][j] * params.scale_log2 - lse2);
      s[i][j] = visible ? p : 0.f;
      dp[i][j] = visible ? p * (dp[i][j] - row_sum) : 0.f;
    }
  }
}

// Writes a (kKeysPerThread, kQueriesPerThread) tile to a (kBlockN, kPitchM) shared array:
// rows ty * kKeysPerThread + i, columns tx + 16 * j.
template <typename Tile>
__device__ __forceinline__ void store_transposed_tile(
    float* dst, const float (&tile)[Tile::kKeysPerThread][Tile::kQueriesPerThread]) {
  float* row0 = dst + thread_row() * Tile::kKeysPerThread * Tile::kPitchM + thread_col();
#pragma unroll
  for (int i = 0; i < Tile::kKeysPerThread; ++i)
#pragma unroll
    for (int j = 0; j < Tile::kQueriesPerThread; ++j)
      row0[i * Tile::kPitchM + j * kThreadGridCols] = tile[i][j];
}

// dQ[m0 + rows] += scale * dS K, added into the fp32 workspace.
template <typename Tile>
__device__ __forceinline__ void accumulate_dq(const BackwardParams& params, const float* smem,
                                              int64_t batch_head, int m0) {
  constexpr int kHeadDim = Tile::kHeadDim;
  using Cols = HeadDimColumns<kHeadDim>;
  constexpr int kRows = Tile::kDqRowsPerThread;
  float dq[kRows][Cols::kPerThread];  // (kRows, head_dim / 16): rows ty * kRows + i
  zero(dq);
  mma_tn<kHeadDim, kRows, Tile::kBlockN>(dq, smem + Tile::kDstOffset + thread_row() * kRows,
                                         Tile::kPitchM,
                                         smem + Tile::kKOffset + thread_col() * Cols::kVec,
                                         Tile::kPitchD);
  const int first_row = m0 + thread_row() * kRows;
  float* accum = params.dq_accum + (batch_head * params.mask.seq_q + first_row) * kHeadDim +
                 thread_col() * Cols::kVec;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (first_row + i >= params.mask.seq_q) continue;
#pragma unroll
    for (int c = 0; c < Cols::kChunks; ++c) {
      float scaled[Cols::kVec];
#pragma unroll
      for (int e = 0; e < Cols::kVec; ++e) scaled[e] = dq[i][c * Cols::kVec + e] * params.scale;
      atomic_add_vec<Cols::kVec>(accum + i * kHeadDim + c * Cols::kChunkStride, scaled);
    }
  }
}

// One (key block, query block) step: adds this block's share to dK, dV (registers) and dQ.
template <typename Tile>
__device__ __forceinline__ void backward_step(
    const BackwardParams& params, float* smem, int64_t batch, int64_t head, int n0, int m0,
    float (&dk)[Tile::kKeysPerThread][HeadDimColumns<Tile::kHeadDim>::kPerThread],
    float (&dv)[Tile::kKeysPerThread][HeadDimColumns<Tile::kHeadDim>::kPerThread]) {
  constexpr int kHeadDim = Tile::kHeadDim;
  using Cols = HeadDimColumns<kHeadDim>;
  constexpr int kKeys = Tile::kKeysPerThread;
  constexpr int kQueries = Tile::kQueriesPerThread;
  load_query_block<Tile>(params, smem, batch, head, m0);
  __syncthreads();

  const float* k_rows = smem + Tile::kKOffset + thread_row() * kKeys * Tile::kPitchD;
  const float* v_rows = smem + Tile::kVOffset + thread_row() * kKeys * Tile::kPitchD;
  const float* q_rows = smem + Tile::kQOffset + thread_col() * Tile::kPitchD;
  const float* do_rows = smem + Tile::kDoOffset + thread_col() * Tile::kPitchD;
  float s[kKeys][kQueries];   // S^T, then P^T: keys ty * kKeys + i, queries tx + 16 * j
  float dp[kKeys][kQueries];  // dP^T, then dS^T
  zero(s);
  zero(dp);
  mma_nt<kKeys, kQueries, kHeadDim>(s, k_rows, Tile::kPitchD, q_rows,
                                    kThreadGridCols * Tile::kPitchD);
  mma_nt<kKeys, kQueries, kHeadDim>(dp, v_rows, Tile::kPitchD, do_rows,
                                    kThreadGridCols * Tile::kPitchD);
  const bool partial = m0 + Tile::kBlockM > params.mask.seq_q ||
                       params.mask.tile_is_partial(m0, Tile::kBlockM, n0, Tile::kBlockN);
  const int first_key = n0 + thread_row() * kKeys;
  probabilities_and_grads<Tile>(params, smem, partial, first_key, m0, s, dp);
  store_transposed_tile<Tile>(smem + Tile::kPtOffset, s);
  store_transposed_tile<Tile>(smem + Tile::kDstOffset, dp);
  __syncthreads();

  accumulate_dq<Tile>(params, smem, batch * params.heads + head, m0);
  const int a_offset = thread_row() * kKeys * Tile::kPitchM;
  const int b_offset = thread_col() * Cols::kVec;
  mma_nn<kHeadDim, kKeys, Tile::kBlockM>(dv, smem + Tile::kPtOffset + a_offset, Tile::kPitchM,
                                         smem + Tile::kDoOffset + b_offset, Tile::kPitchD);
  mma_nn<kHeadDim, kKeys, Tile::kBlockM>(dk, smem + Tile::kDstOffset + a_offset, Tile::kPitchM,
                                         smem + Tile::kQOffset + b_offset, Tile::kPitchD);
  __syncthreads();  // q_s, do_s, pt_s, dst_s are overwritten next step
}

// One CTA's work for one (batch, kv head): keys [n0, n0 + kBlockN) against every query of the
// kv head's group that can see them.
template <typename Tile>
__device__ __forceinline__ void backward_kv_block(const BackwardParams& params, float* smem,
                                                  int64_t batch_head_kv, int n0) {
  constexpr int kHeadDim = Tile::kHeadDim;
  using Cols = HeadDimColumns<kHeadDim>;
  constexpr int kKeys = Tile::kKeysPerThread;
  const int64_t batch = batch_head_kv / params.heads_kv;
  const int64_t head_kv = batch_head_kv % params.heads_kv;
  const int64_t group = params.heads / params.heads_kv;
  const int keys_valid = params.mask.seq_k - n0;
  load_tile<Tile::kBlockN, kHeadDim, Tile::kPitchD>(
      smem + Tile::kKOffset, params.k.head_rows(batch, head_kv) + n0 * params.k.seq_stride,
      params.k.seq_stride, keys_valid);
  load_tile<Tile::kBlockN, kHeadDim, Tile::kPitchD>(
      smem + Tile::kVOffset, params.v.head_rows(batch, head_kv) + n0 * params.v.seq_stride,
      params.v.seq_stride, keys_valid);  // made visible by the barrier in backward_step

  float dk[kKeys][Cols::kPerThread];  // (kKeys, head_dim / 16): keys ty * kKeys + i
  float dv[kKeys][Cols::kPerThread];
  zero(dk);
  zero(dv);
  // Queries before the first one that sees key n0 see none of this block.
  const int m_begin = params.mask.first_query_seeing(n0) / Tile::kBlockM * Tile::kBlockM;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t head = head_kv * group + g;
    for (int m0 = m_begin; m0 < params.mask.seq_q; m0 += Tile::kBlockM)
      backward_step<Tile>(params, smem, batch, head, n0, m0, dk, dv);
  }

  float dk_scale[kKeys];  // dK = scale * dS^T Q; dV needs no scale
  float dv_scale[kKeys];
#pragma unroll
  for (int i = 0; i < kKeys; ++i) dk_scale[i] = params.scale, dv_scale[i] = 1.f;
  const int first_key = n0 + thread_row() * kKeys;
  const DeviceTensor& dk_out = params.dk;
  const DeviceTensor& dv_out = params.dv;
  store_rows<kHeadDim, kKeys>(dk_out.head_rows(batch, head_kv), dk_out.seq_stride, first_key,
                              params.mask.seq_k, dk, dk_scale);
  store_rows<kHeadDim, kKeys>(dv_out.head_rows(batch, head_kv), dv_out.seq_stride, first_key,
                              params.mask.seq_k, dv, dv_scale);
  __syncthreads();  // k_s, v_s are reloaded for the next (batch, kv head)
}

// grid: (ceil(Sk / kBlockN), min(B * Hkv, 65535)); block: 256 threads.
template <typename Tile>
__global__ void __launch_bounds__(kThreads, Tile::kMinBlocksPerSm)
    backward_fp32_kernel(const BackwardParams params) {
  extern __shared__ float4 smem_vec4[];  // float4: 16-byte alignment for vector access
  float* smem = reinterpret_cast<float*>(smem_vec4);
  const int n0 = static_cast<int>(blockIdx.x) * Tile::kBlockN;
  for (int64_t bh_kv = blockIdx.y; bh_kv < params.batch_heads_kv; bh_kv += gridDim.y)
    backward_kv_block<Tile>(params, smem, bh_kv, n0);
}

// ---- 3. dQ workspace -> dq ---------------------------------------------------------------------

// One float4 per thread, grid-stride over the contiguous [B, H, Sq, D] accumulator.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) dq_store_fp32_kernel(const BackwardParams params) {
  constexpr int kVecsPerRow = kHeadDim / 4;
  const int64_t total_vecs = params.batch_heads * params.mask.seq_q * kVecsPerRow;
  for (int64_t vec = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; vec < total_vecs;
       vec += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = vec / kVecsPerRow;  // flat (batch, head, query)
    const int64_t column = vec % kVecsPerRow * 4;
    const int64_t query = row % params.mask.seq_q;
    const int64_t batch_head = row / params.mask.seq_q;
    const DeviceTensor& dq = params.dq;
    float* dst = dq.head_rows(batch_head / params.heads, batch_head % params.heads) +
                 query * dq.seq_stride + column;
    *reinterpret_cast<float4*>(dst) = reinterpret_cast<const float4*>(params.dq_accum)[vec];
  }
}

// Enough CTAs to fill any current GPU several times; grid-stride loops cover the rest.
constexpr int64_t kMaxElementwiseCtas = 1 << 16;

inline unsigned elementwise_grid(int64_t work_items, int64_t items_per_cta) {
  const int64_t ctas = (work_items + items_per_cta - 1) / items_per_cta;
  return static_cast<unsigned>(ctas < kMaxElementwiseCtas ? ctas : kMaxElementwiseCtas);
}

// Opt-in shared memory per block of the current device, in bytes.
inline int max_smem_per_block() {
  int device = 0;
  int bytes = 0;
  throw_if_cuda_error(cudaGetDevice(&device), "backward_fp32 cudaGetDevice");
  throw_if_cuda_error(
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
      "backward_fp32 cudaDeviceGetAttribute");
  return bytes;
}

// The whole backward pass (zero dQ, row sums, main kernel, dQ copy) with one tiling.
template <typename Tile>
void launch_backward_with(const BackwardArgs& args, cudaStream_t stream) {
  constexpr int kHeadDim = Tile::kHeadDim;
  const BackwardParams params = make_backward_params(args);
  const int64_t rows = params.batch_heads * params.mask.seq_q;

  throw_if_cuda_error(
      cudaMemsetAsync(params.dq_accum, 0, static_cast<size_t>(rows) * kHeadDim * sizeof(float),
                      stream),
      "backward_fp32 dQ workspace memset");

  constexpr int kRowsPerCta = kThreads / (kHeadDim / 4);
  row_sums_fp32_kernel<kHeadDim>
      <<<elementwise_grid(rows, kRowsPerCta), kThreads, 0, stream>>>(params);
  throw_if_cuda_error(cudaGetLastError(), "row_sums_fp32_kernel");

  const auto kernel = backward_fp32_kernel<Tile>;
  allow_dynamic_smem(kernel, Tile::kSmemBytes, "backward_fp32_kernel");
  const int64_t n_blocks = (params.mask.seq_k + Tile::kBlockN - 1) / Tile::kBlockN;
  const dim3 grid(static_cast<unsigned>(n_blocks),
                  static_cast<unsigned>(grid_y_for(params.batch_heads_kv)));
  kernel<<<grid, kThreads, Tile::kSmemBytes, stream>>>(params);
  throw_if_cuda_error(cudaGetLastError(), "backward_fp32_kernel");

  dq_store_fp32_kernel<kHeadDim>
      <<<elementwise_grid(rows * (kHeadDim / 4), kThreads), kThreads, 0, stream>>>(params);
  throw_if_cuda_error(cudaGetLastError(), "dq_store_fp32_kernel");
}

}  // namespace cuflash::detail::fp32

namespace cuflash::detail {

template <int kHeadDim>
void launch_backward_fp32(const BackwardArgs& args, cudaStream_t stream) {
  using Tiles = fp32::BackwardTiles<kHeadDim>;
  if (fp32::max_smem_per_block() >= Tiles::Large::kSmemBytes)
    fp32::launch_backward_with<typename Tiles::Large>(args, stream);
  else
    fp32::launch_backward_with<typename Tiles::Small>(args, stream);
}

}  // namespace cuflash::detail
