#include "bench/profile_target.h"

#include <cuda_profiler_api.h>

#include "bench/device_case.h"
#include "cuflash/cuda_error.h"

namespace cuflash::bench {

void run_profile_target(const Problem& c, const std::string& pass, uint64_t seed) {
  const bool backward_pass = pass == "bwd";
  const DeviceCase device(c, backward_pass, seed);
  const DevicePasses& passes = device.passes();
  const cudaStream_t stream = nullptr;  // the legacy default stream: ordered with the uploads
  if (backward_pass) {
    passes.forward(device.forward_args(), stream);
    check_cuda(cudaStreamSynchronize(stream), "forward (before the profiled backward)");
  }
  check_cuda(cudaProfilerStart(), "cudaProfilerStart");
  if (backward_pass) {
    passes.backward(device.backward_args(), stream);
  } else {
    passes.forward(device.forward_args(), stream);
  }
  check_cuda(cudaStreamSynchronize(stream), pass == "bwd" ? "backward" : "forward");
  check_cuda(cudaProfilerStop(), "cudaProfilerStop");
}

}  // namespace cuflash::bench
