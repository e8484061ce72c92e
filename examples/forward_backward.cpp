// Calling the library directly on device memory: forward, then backward, on one stream.
//   cuflash_example_forward   (needs a CUDA GPU; exits with 3 when there is none)
#include <cstdio>
#include <random>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuflash/cuflash.h"

namespace {

constexpr int64_t kBatch = 2, kHeads = 8, kHeadsKv = 2, kSeqQ = 1000, kSeqK = 1200, kHeadDim = 64;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw cuflash::Error(cuflash::Error::Kind::cuda,
                         std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// A device copy of `count` random fp16 values.
__half* random_device_tensor(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<__half> host(count);
  for (auto& x : host) x = __float2half(normal(rng));
  __half* device = nullptr;
  check(cudaMalloc(&device, count * sizeof(__half)), "cudaMalloc");
  check(cudaMemcpy(device, host.data(), count * sizeof(__half), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  return device;
}

}  // namespace

int main() {
  if (cuflash::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device found\n");
    return 3;
  }
  try {
    std::mt19937 rng(42);
    const int64_t q_count = kBatch * kHeads * kSeqQ * kHeadDim;
    const int64_t kv_count = kBatch * kHeadsKv * kSeqK * kHeadDim;
    __half *q = random_device_tensor(q_count, rng), *k = random_device_tensor(kv_count, rng),
           *v = random_device_tensor(kv_count, rng), *dout = random_device_tensor(q_count, rng);
    __half *out, *dq, *dk, *dv;
    float* lse;
    check(cudaMalloc(&out, q_count * sizeof(__half)), "cudaMalloc");
    check(cudaMalloc(&dq, q_count * sizeof(__half)), "cudaMalloc");
    check(cudaMalloc(&dk, kv_count * sizeof(__half)), "cudaMalloc");
    check(cudaMalloc(&dv, kv_count * sizeof(__half)), "cudaMalloc");
    check(cudaMalloc(&lse, kBatch * kHeads * kSeqQ * sizeof(float)), "cudaMalloc");

    using cuflash::Layout;
    cuflash::ForwardArgs f;
    f.shape = {kBatch, kHeads, kHeadsKv, kSeqQ, kSeqK, kHeadDim};
    f.dtype = cuflash::DType::fp16;
    f.mask = cuflash::Mask::causal_bottom_right;
    f.q = cuflash::make_tensor_ref(q, Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    f.k = cuflash::make_tensor_ref(k, Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    f.v = cuflash::make_tensor_ref(v, Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    f.out = cuflash::make_tensor_ref(out, Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    f.lse = lse;
    cuflash::forward(f);

    cuflash::BackwardArgs b = cuflash::backward_args_for(f);
    b.dout = cuflash::make_tensor_ref(dout, Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    b.dq = cuflash::make_tensor_ref(dq, Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    b.dk = cuflash::make_tensor_ref(dk, Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    b.dv = cuflash::make_tensor_ref(dv, Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    b.workspace_bytes = cuflash::backward_workspace_size(b.shape, b.dtype);
    check(cudaMalloc(&b.workspace, b.workspace_bytes), "cudaMalloc");
    cuflash::backward(b);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    __half first;
    check(cudaMemcpy(&first, out, sizeof first, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::printf("forward and backward done; O[0] = %g, workspace %zu bytes\n",
                double(__half2float(first)), b.workspace_bytes);
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)out, (void*)dq, (void*)dk,
                    (void*)dv, (void*)lse, b.workspace}) {
      cudaFree(p);
    }
  } catch (const cuflash::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
  return 0;
}
