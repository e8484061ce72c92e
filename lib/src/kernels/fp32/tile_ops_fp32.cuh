// Building blocks of the FP32 (CUDA-core FMA) attention kernels: constants, the thread layout of
// a CTA, vector loads/stores, shared-memory tile loaders, small register-tile matrix products and
// the causal-mask geometry. No tensor cores and no TF32: every product is an fp32 fmaf.
//
// Thread layout shared by all FP32 kernels: 256 threads form a (16, 16) grid,
//   tx = threadIdx.x % 16  (the 16 lanes of one half-warp),
//   ty = threadIdx.x / 16.
// A thread owns a few consecutive tile rows (ty-major) and a strided set of columns (tx-minor), so
// a row's 16 owners are the lanes of one half-warp: row reductions are 4 shuffles, and in every
// shared-memory read either all lanes of a phase read the same address (broadcast) or they read
// consecutive 16-byte vectors (conflict-free).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <cuda_runtime.h>

#include "cuflash/attention.h"
#include "cuflash/error.h"

namespace cuflash::detail::fp32 {

// exp(x) == exp2(x * kLog2e): the softmax runs in base 2 with log2(e) * scale folded into scores.
constexpr float kLog2e = 1.4426950408889634f;
// ln(2): turns a base-2 log-sum-exp back into the natural log the API returns.
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInfinity = std::numeric_limits<float>::infinity();
// Score of a key a query may not see: exp2(-inf) == 0 exactly.
constexpr float kMaskedScore = -kInfinity;

constexpr int kThreadGridRows = 16;  // ty extent
constexpr int kThreadGridCols = 16;  // tx extent: one half-warp per tile row
constexpr int kThreads = kThreadGridRows * kThreadGridCols;
constexpr int kWarpSize = 32;
static_assert(kThreadGridCols * 2 == kWarpSize, "a tile row's owners must be one half-warp");

// Extra floats at the end of every shared-memory row. Rows are then 16-byte aligned (float4
// access) but successive rows start 4 banks apart, so 8 lanes reading 8 different rows at the
// same column hit 32 distinct banks.
constexpr int kSmemPad = 4;

// Largest grid.y; (batch, head) pairs beyond it are covered by a grid-stride loop.
constexpr int kMaxGridY = 65535;
// Unroll factors of the k loops of the register-tile products: enough independent FMAs per
// iteration to cover shared-memory latency, few enough live fragments that no kernel spills at
// its __launch_bounds__ (checked with -Xptxas -v on sm_80 and sm_90).
constexpr int kUnrollNt = 1;  // one iteration already spans 4 k steps of every (i, j) pair
constexpr int kUnrollNn = 2;
constexpr int kUnrollTn = 4;

__device__ __forceinline__ int thread_col() { return static_cast<int>(threadIdx.x) % kThreadGridCols; }
__device__ __forceinline__ int thread_row() { return static_cast<int>(threadIdx.x) / kThreadGridCols; }

// How a thread covers the head_dim columns of an output tile (O, dQ, dK, dV): kChunks vectors
// of kVec floats; column of element e in chunk c = c * kChunkStride + tx * kVec + e. The 16
// lanes of a row then touch 16 * kVec contiguous floats per chunk (coalesced, conflict-free).
template <int kHeadDim>
struct HeadDimColumns {
  static_assert(kHeadDim % (kThreadGridCols * 2) == 0, "head_dim must be a multiple of 32");
  static constexpr int kPerThread = kHeadDim / kThreadGridCols;  // 2, 4 or 8
  static constexpr int kVec = kPerThread < 4 ? kPerThread : 4;
  static constexpr int kChunks = kPerThread / kVec;
  static constexpr int kChunkStride = kThreadGridCols * kVec;
};

// A [batch, heads, seq, head_dim] fp32 tensor on the device; strides in elements, head_dim
// contiguous. Offsets are 64-bit: batch * batch_stride alone can pass 2^31.
struct DeviceTensor {
  float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t seq_stride;

  // Row 0 of head `head` of batch `batch`.
  __device__ float* head_rows(int64_t batch, int64_t head) const {
    return data + batch * batch_stride + head * head_stride;
  }
};

inline DeviceTensor device_tensor(const TensorRef& ref) {
  return DeviceTensor{static_cast<float*>(ref.data), ref.batch_stride, ref.head_stride,
                      ref.seq_stride};
}

// ---- vector access -----------------------------------------------------------------------------

template <int N>
__device__ __forceinline__ void load_vec(const float* src, float* dst) {
  static_assert(N == 1 || N == 2 || N == 4, "vector loads are 1, 2 or 4 floats");
  if constexpr (N == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
  } else if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    dst[0] = v.x, dst[1] = v.y;
  } else {
    dst[0] = *src;
  }
}

template <int N>
__device__ __forceinline__ void store_vec(float* dst, const float* src) {
  static_assert(N == 2 || N == 4, "vector stores are 2 or 4 floats");
  if constexpr (N == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
  } else {
    *reinterpret_cast<float2*>(dst) = make_float2(src[0], src[1]);
  }
}

// Adds N floats to global memory. sm_90 has vector float reductions (one instruction, one L2
// transaction); older GPUs add element by element.
template <int N>
__device__ __forceinline__ void atomic_add_vec(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (N == 4) {
    atomicAdd(reinterpret_cast<float4*>(dst), make_float4(src[0], src[1], src[2], src[3]));
  } else if constexpr (N == 2) {
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(src[0], src[1]));
  } else {
    atomicAdd(dst, src[0]);
  }
#else
#pragma unroll
  for (int e = 0; e < N; ++e) atomicAdd(dst + e, src[e]);
#endif
}

// ---- global -> shared tiles --------------------------------------------------------------------

// Copies a (kRows, kWidth) row-major tile from global memory (rows `row_stride` floats apart,
// columns contiguous) into shared memory with row pitch kPitch. Rows at or past `rows_valid` are
// never read and are zero-filled, so they add exactly 0 to every product.
template <int kRows, int kWidth, int kPitch>
__device__ __forceinline__ void load_tile(float* smem, const float* gmem, int64_t row_stride,
                                          int rows_valid) {
  constexpr int kVecsPerRow = kWidth / 4;
  constexpr int kVecsPerThread = kRows * kVecsPerRow / kThreads;
  static_assert(kWidth % 4 == 0 && kPitch % 4 == 0, "rows must be float4 aligned");
  static_assert(kRows * kVecsPerRow % kThreads == 0, "every thread copies the same count");
  float4 staged[kVecsPerThread];  // all loads in flight before the first store
#pragma unroll
  for (int it = 0; it < kVecsPerThread; ++it) {
    const int vec = static_cast<int>(threadIdx.x) + it * kThreads;
    const int row = vec / kVecsPerRow;
    const int col = vec % kVecsPerRow * 4;
    staged[it] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < rows_valid)
      staged[it] = __ldg(reinterpret_cast<const float4*>(gmem + row * row_stride + col));
  }
#pragma unroll
  for (int it = 0; it < kVecsPerThread; ++it) {
    const int vec = static_cast<int>(threadIdx.x) + it * kThreads;
    *reinterpret_cast<float4*>(smem + vec / kVecsPerRow * kPitch + vec % kVecsPerRow * 4) =
        staged[it];
  }
}

// Stores a thread's (kRows, HeadDimColumns::kPerThread) register tile, scaled by row_scale[i],
// to global rows first_row + i (rows `row_stride` floats apart); rows at or past `rows_valid`
// are skipped.
template <int kHeadDim, int kRows>
__device__ __forceinline__ void store_rows(
    float* gmem, int64_t row_stride, int first_row, int rows_valid,
    const float (&acc)[kRows][HeadDimColumns<kHeadDim>::kPerThread], const float (&row_scale)[kRows]) {
  using Cols = HeadDimColumns<kHeadDim>;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (first_row + i >= rows_valid) continue;
    float* row = gmem + (first_row + i) * row_stride + thread_col() * Cols::kVec;
#pragma unroll
    for (int c = 0; c < Cols::kChunks; ++c) {
      float scaled[Cols::kVec];
#pragma unroll
      for (int e = 0; e < Cols::kVec; ++e) scaled[e] = acc[i][c * Cols::kVec + e] * row_scale[i];
      store_vec<Cols::kVec>(row + c * Cols::kChunkStride, scaled);
    }
  }
}

// ---- register-tile products over shared memory -------------------------------------------------

// "NT" product, C += A * B^T with both operands k-contiguous:
//   acc[i][j] += sum_k a[i * a_row_step + k] * b[j * b_row_step + k],  k in [0, kDepth).
// acc: (kRows, kCols). Reads float4 along k: kRows + kCols vector loads per 4 * kRows * kCols FMAs.
template <int kRows, int kCols, int kDepth>
__device__ __forceinline__ void mma_nt(float (&acc)[kRows][kCols], const float* a, int a_row_step,
                                       const float* b, int b_row_step) {
  static_assert(kDepth % 4 == 0, "depth is read as float4");
#pragma unroll kUnrollNt
  for (int k = 0; k < kDepth; k += 4) {
    float a_frag[kRows][4];  // (kRows, 4)
    float b_frag[kCols][4];  // (kCols, 4)
#pragma unroll
    for (int i = 0; i < kRows; ++i) load_vec<4>(a + i * a_row_step + k, a_frag[i]);
#pragma unroll
    for (int j = 0; j < kCols; ++j) load_vec<4>(b + j * b_row_step + k, b_frag[j]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < kCols; ++j) acc[i][j] = fmaf(a_frag[i][kk], b_frag[j][kk], acc[i][j]);
  }
}

// "NN" product, C += A * B with A k-contiguous and B row-major over the head_dim columns:
//   acc[i][n] += sum_k a[i * a_row_step + k] * b[k * ldb + column(n)],  k in [0, kDepth),
// where `b` already points at the thread's first column (tx * kVec) and column(n) walks the
// HeadDimColumns chunks. acc: (kRows, kPerThread).
template <int kHeadDim, int kRows, int kDepth>
__device__ __forceinline__ void mma_nn(float (&acc)[kRows][HeadDimColumns<kHeadDim>::kPerThread],
                                       const float* a, int a_row_step, const float* b, int ldb) {
  using Cols = HeadDimColumns<kHeadDim>;
  static_assert(kDepth % 4 == 0, "depth is read as float4");
#pragma unroll kUnrollNn
  for (int k = 0; k < kDepth; k += 4) {
    float a_frag[kRows][4];  // (kRows, 4)
#pragma unroll
    for (int i = 0; i < kRows; ++i) load_vec<4>(a + i * a_row_step + k, a_frag[i]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      float b_frag[Cols::kPerThread];  // (kPerThread,) of row k + kk
#pragma unroll
      for (int c = 0; c < Cols::kChunks; ++c)
        load_vec<Cols::kVec>(b + (k + kk) * ldb + c * Cols::kChunkStride, b_frag + c * Cols::kVec);
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int n = 0; n < Cols::kPerThread; ++n)
          acc[i][n] = fmaf(a_frag[i][kk], b_frag[n], acc[i][n]);
    }
  }
}

// "TN" product, C += A * B with A stored transposed (the thread's kRows rows contiguous in each
// row of `at`) and B row-major over the head_dim columns:
//   acc[i][n] += sum_k at[k * ldat + i] * b[k * ldb + column(n)],  k in [0, kDepth).
// acc: (kRows, kPerThread).
template <int kHeadDim, int kRows, int kDepth>
__device__ __forceinline__ void mma_tn(float (&acc)[kRows][HeadDimColumns<kHeadDim>::kPerThread],
                                       const float* at, int ldat, const float* b, int ldb) {
  using Cols = HeadDimColumns<kHeadDim>;
#pragma unroll kUnrollTn
  for (int k = 0; k < kDepth; ++k) {
    float a_frag[kRows];  // (kRows,) column k of A
    load_vec<kRows>(at + k * ldat, a_frag);
    float b_frag[Cols::kPerThread];  // (kPerThread,) row k of B
#pragma unroll
    for (int c = 0; c < Cols::kChunks; ++c)
      load_vec<Cols::kVec>(b + k * ldb + c * Cols::kChunkStride, b_frag + c * Cols::kVec);
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int n = 0; n < Cols::kPerThread; ++n) acc[i][n] = fmaf(a_frag[i], b_frag[n], acc[i][n]);
  }
}

// ---- reductions over a tile row (the 16 lanes of a half-warp) ----------------------------------

__device__ __forceinline__ float row_max(float value) {
#pragma unroll
  for (int offset = kThreadGridCols / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset, kThreadGridCols));
  return value;
}

__device__ __forceinline__ float row_sum(float value) {
#pragma unroll
  for (int offset = kThreadGridCols / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset, kThreadGridCols);
  return value;
}

template <int N>
__device__ __forceinline__ void zero(float (&values)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) values[i] = 0.f;
}

template <int R, int C>
__device__ __forceinline__ void zero(float (&values)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) zero(values[i]);
}

// ---- masking -----------------------------------------------------------------------------------

// Which (query, key) pairs are visible. Under a causal mask query i sees key j iff
// j <= i + offset (offset = seq_k - seq_q bottom-right, 0 top-left); keys past seq_k never exist.
struct MaskGeometry {
  int seq_q;
  int seq_k;
  bool causal;
  int offset;  // |seq_k - seq_q| < 2^31 since both are positive ints

  // One past the last key query `row` sees (0 when it sees none).
  __host__ __device__ int key_end(int row) const {
    if (!causal) return seq_k;
    const int64_t end = static_cast<int64_t>(row) + offset + 1;
    return static_cast<int>(end < 0 ? 0 : (end < seq_k ? end : seq_k));
  }
  __device__ bool row_sees_keys(int row) const { return key_end(row) > 0; }
  __device__ bool visible(int row, int key) const { return key < key_end(row); }
  // First query that sees `key` (seq_q when none does).
  __device__ int first_query_seeing(int key) const {
    if (!causal) return 0;
    const int64_t first = static_cast<int64_t>(key) - offset;
    return static_cast<int>(first < 0 ? 0 : (first < seq_q ? first : seq_q));
  }
  // Whether some pair of the (rows [m0, m0 + block_m), keys [n0, n0 + block_n)) tile, with
  // rows and keys inside the problem, is hidden, so the tile needs per-element masking.
  __device__ bool tile_is_partial(int m0, int block_m, int n0, int block_n) const {
    if (n0 + block_n > seq_k) return true;
    return causal && static_cast<int64_t>(n0) + block_n - 1 > static_cast<int64_t>(m0) + offset;
  }
};

// ---- host helpers ------------------------------------------------------------------------------

inline void throw_if_cuda_error(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(Error::Kind::cuda, std::string(what) + ": " + cudaGetErrorString(status));
}

// Sequence lengths are ints on the device; tile arithmetic adds up to two block sizes to them.
constexpr int64_t kMaxSeqLen = std::numeric_limits<int>::max() / 2;

inline int checked_seq_len(int64_t seq_len, const char* name) {
  if (seq_len > kMaxSeqLen)
    throw Error(Error::Kind::unsupported,
                std::string(name) + " is too long for the fp32 kernels (max " +
                    std::to_string(kMaxSeqLen) + ")");
  return static_cast<int>(seq_len);
}

inline int grid_y_for(int64_t batch_heads) {
  return static_cast<int>(batch_heads < kMaxGridY ? batch_heads : kMaxGridY);
}

template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, int bytes, const char* name) {
  throw_if_cuda_error(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

}  // namespace cuflash::detail::fp32
