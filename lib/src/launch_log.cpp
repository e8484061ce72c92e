#include "launch_log.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "kernel_names.h"

namespace cuflash {

namespace {

thread_local LaunchRecord* innermost_record = nullptr;
thread_local const char* current_call = nullptr;

// The runtime's name of a kernel, demangled where it is mangled; "" when the runtime has none
// (cudaFuncGetName came with CUDA 12.3). An error an earlier launch left for the caller's check
// stays: then no name is asked for, since a failed request's error would have to be cleared.
std::string runtime_kernel_name(const void* kernel) {
  const char* name = nullptr;
#if CUDART_VERSION >= 12030
  if (cudaPeekAtLastError() != cudaSuccess) return "";
  if (cudaFuncGetName(&name, kernel) != cudaSuccess) {
    cudaGetLastError();  // this request's error, not a launch's
    return "";
  }
#endif
  if (name == nullptr) return "";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? demangled.get() : name;
}

}  // namespace

LaunchRecord::LaunchRecord() : outer_(innermost_record) { innermost_record = this; }

LaunchRecord::~LaunchRecord() { innermost_record = outer_; }

namespace detail {

void record_launch(const void* kernel, dim3 grid, int threads, size_t shared_bytes) {
  LaunchRecord* record = innermost_record;
  if (record == nullptr) return;
  KernelLaunch launch;
  launch.call = current_call != nullptr ? current_call : "";
  launch.kernel = display_kernel_name(runtime_kernel_name(kernel));
  launch.grid = {grid.x, grid.y, grid.z};
  launch.threads = threads;
  launch.shared_bytes = shared_bytes;
  record->launches_.push_back(std::move(launch));
}

RecordedCall::RecordedCall(const char* name) : outermost_(current_call == nullptr) {
  if (outermost_) current_call = name;
}

RecordedCall::~RecordedCall() {
  if (outermost_) current_call = nullptr;
}

}  // namespace detail
}  // namespace cuflash
