// Calling the library directly on device memory: forward, then backward, on one stream.
//   cuflash_example_forward   (needs a CUDA GPU; exits with 3 when there is none)
#include <cstdio>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuflash/cuda_error.h"
#include "cuflash/cuflash.h"
#include "cuflash/io/random_inputs.h"

namespace {

constexpr int64_t kBatch = 2, kHeads = 8, kHeadsKv = 2, kSeqQ = 1000, kSeqK = 1200, kHeadDim = 64;

// A device copy of the seeded fp16 input `tensor` (the inputs `cuflash run --seed 42` uses).
cuflash::DeviceBuffer random_device_tensor(cuflash::io::InputTensor tensor) {
  cuflash::Problem problem;
  problem.shape = {kBatch, kHeads, kHeadsKv, kSeqQ, kSeqK, kHeadDim};
  problem.dtype = cuflash::DType::fp16;
  const std::vector<unsigned char> host = cuflash::io::random_input_bytes(problem, tensor, 42);
  cuflash::DeviceBuffer device(host.size());
  device.copy_from_host(host.data());
  cuflash::check_cuda(cudaDeviceSynchronize(), "cudaMemcpyAsync");  // before `host` goes
  return device;
}

}  // namespace

int main() {
  if (cuflash::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device found\n");
    return 3;
  }
  try {
    const int64_t q_count = kBatch * kHeads * kSeqQ * kHeadDim;
    const int64_t kv_count = kBatch * kHeadsKv * kSeqK * kHeadDim;
    cuflash::DeviceBuffer q = random_device_tensor(cuflash::io::InputTensor::q);
    cuflash::DeviceBuffer k = random_device_tensor(cuflash::io::InputTensor::k);
    cuflash::DeviceBuffer v = random_device_tensor(cuflash::io::InputTensor::v);
    cuflash::DeviceBuffer dout = random_device_tensor(cuflash::io::InputTensor::dout);
    cuflash::DeviceBuffer out(q_count * sizeof(__half)), dq(q_count * sizeof(__half));
    cuflash::DeviceBuffer dk(kv_count * sizeof(__half)), dv(kv_count * sizeof(__half));
    cuflash::DeviceBuffer lse(kBatch * kHeads * kSeqQ * sizeof(float));

    using cuflash::Layout;
    cuflash::ForwardArgs f;
    f.shape = {kBatch, kHeads, kHeadsKv, kSeqQ, kSeqK, kHeadDim};
    f.dtype = cuflash::DType::fp16;
    f.mask = cuflash::Mask::causal_bottom_right;
    f.q = cuflash::make_tensor_ref(q.data(), Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    f.k = cuflash::make_tensor_ref(k.data(), Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    f.v = cuflash::make_tensor_ref(v.data(), Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    f.out = cuflash::make_tensor_ref(out.data(), Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    f.lse = lse.as<float>();
    cuflash::forward(f);

    cuflash::BackwardArgs b = cuflash::backward_args_for(f);
    b.dout = cuflash::make_tensor_ref(dout.data(), Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    b.dq = cuflash::make_tensor_ref(dq.data(), Layout::bhsd, kBatch, kHeads, kSeqQ, kHeadDim);
    b.dk = cuflash::make_tensor_ref(dk.data(), Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    b.dv = cuflash::make_tensor_ref(dv.data(), Layout::bhsd, kBatch, kHeadsKv, kSeqK, kHeadDim);
    const cuflash::DeviceBuffer workspace(cuflash::backward_workspace_size(b.shape, b.dtype));
    b.workspace = workspace.data();
    b.workspace_bytes = workspace.bytes();
    cuflash::backward(b);
    cuflash::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    __half first;
    cuflash::check_cuda(cudaMemcpy(&first, out.data(), sizeof first, cudaMemcpyDeviceToHost),
                        "cudaMemcpy");
    std::printf("forward and backward done; O[0] = %g, workspace %zu bytes\n",
                double(__half2float(first)), b.workspace_bytes);
  } catch (const cuflash::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
  return 0;
}
