// CUDA runtime errors met by the benchmark's own calls (allocations, copies, events, graphs),
// with their code, so a failed case can say "out of memory" rather than just "failed".
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "cli/exit_codes.h"

namespace cuflash::bench {

class DeviceError : public cli::RuntimeFailure {
 public:
  DeviceError(cudaError_t code, const std::string& what)
      : cli::RuntimeFailure(what + ": " + (code == cudaErrorMemoryAllocation
                                               ? std::string("out of device memory")
                                               : std::string(cudaGetErrorString(code)))),
        code_(code) {}
  cudaError_t code() const { return code_; }
  bool out_of_memory() const { return code_ == cudaErrorMemoryAllocation; }

 private:
  cudaError_t code_;
};

// Throws DeviceError unless `status` is cudaSuccess. Clears the runtime's last error first, so
// a non-sticky error (e.g. a failed allocation) does not resurface in the next case.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  throw DeviceError(status, what);
}

}  // namespace cuflash::bench
