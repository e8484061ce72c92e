#include "rows.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuflash/cuda_error.h"

namespace cuflash::context_parallel::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;  // the kernels stride over the rest

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1,
                                                   kMaxBlocks));
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }

template <typename Element>
__device__ __forceinline__ Element from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }

// Calls body(i) for i in [0, count), striding over the grid.
template <typename Body>
__device__ __forceinline__ void for_each_index(int64_t count, Body&& body) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    body(i);
  }
}

template <typename Element>
__global__ void widen_kernel(const Element* in, float* out, int64_t count) {
  for_each_index(count, [&](int64_t i) { out[i] = to_float(in[i]); });
}

// Element i of the sums is (batch * heads + head, row, column) of [batch * heads, seq, width].
template <typename Element>
__global__ void store_sums_kernel(const float* sums, Element* out, int64_t batch_stride,
                                  int64_t head_stride, int64_t seq_stride, int64_t heads,
                                  int64_t seq, int64_t width, int64_t count) {
  for_each_index(count, [&](int64_t i) {
    const int64_t plane = i / (seq * width);
    const int64_t row = i / width % seq;
    out[plane / heads * batch_stride + plane % heads * head_stride + row * seq_stride +
        i % width] = from_float<Element>(sums[i]);
  });
}

__global__ void add_kernel(float* to, const float* from, int64_t count) {
  for_each_index(count, [&](int64_t i) { to[i] += from[i]; });
}

__global__ void fill_kernel(float* out, int64_t count, float value) {
  for_each_index(count, [&](int64_t i) { out[i] = value; });
}

// Calls launch(Element{}) with the element type of `dtype`.
template <typename Launch>
void with_element(DType dtype, Launch&& launch) {
  switch (dtype) {
    case DType::fp16: return launch(__half{});
    case DType::bf16: return launch(__nv_bfloat16{});
    case DType::fp32: return launch(float{});
  }
}

}  // namespace

void widen_to_fp32(const void* in, DType dtype, float* out, int64_t count, cudaStream_t stream) {
  with_element(dtype, [&](auto element) {
    using Element = decltype(element);
    widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const Element*>(in), out,
                                                             count);
  });
  check_cuda(cudaGetLastError(), "single-GPU context parallelism: widening a block's O");
}

void store_sums(const float* sums, const TensorRef& out, DType dtype, int64_t batch,
                int64_t heads, int64_t seq, int64_t width, cudaStream_t stream) {
  const int64_t count = batch * heads * seq * width;
  with_element(dtype, [&](auto element) {
    using Element = decltype(element);
    store_sums_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        sums, static_cast<Element*>(out.data), out.batch_stride, out.head_stride,
        out.seq_stride, heads, seq, width, count);
  });
  check_cuda(cudaGetLastError(), "single-GPU context parallelism: storing the gradients");
}

void add_fp32(float* to, const float* from, int64_t count, cudaStream_t stream) {
  add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(to, from, count);
  check_cuda(cudaGetLastError(), "context parallelism: adding dK/dV sums");
}

void fill(float* out, int64_t count, float value, cudaStream_t stream) {
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, count, value);
  check_cuda(cudaGetLastError(), "single-GPU context parallelism: filling LSE rows");
}

void copy_lse_rows(float* to, int64_t to_seq, const float* from, int64_t from_seq, int64_t rows,
                   int64_t planes, cudaStream_t stream) {
  check_cuda(cudaMemcpy2DAsync(to, size_t(to_seq) * sizeof(float), from,
                               size_t(from_seq) * sizeof(float), size_t(rows) * sizeof(float),
                               size_t(planes), cudaMemcpyDeviceToDevice, stream),
             "context parallelism: copying LSE rows");
}

}  // namespace cuflash::context_parallel::detail
