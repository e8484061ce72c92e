// The one translation of CUDA runtime errors into cuflash::Error, for the library and for the
// code around it (host runner, benchmark, tests).
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "cuflash/error.h"

namespace cuflash {

inline Error::Kind error_kind(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation: return Error::Kind::out_of_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return Error::Kind::no_device;
    default: return Error::Kind::cuda;
  }
}

// Throws cuflash::Error for a failed CUDA call: out_of_memory for allocation failures, no_device
// when there is no usable GPU, cuda otherwise; the message is "<what>: <CUDA's description>".
// Clears the runtime's last error first, so that a non-sticky error (a failed allocation) does
// not resurface at the next call.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  throw Error(error_kind(status), std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace cuflash
