// Host-side helpers shared by the launchers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include "launch.h"

namespace cuflash::detail {

// grid.y and grid.z are limited to 65535; batch * heads goes on grid.y in chunks of this size.
inline constexpr int64_t kMaxGridY = 65535;
// Static shared memory plus dynamic beyond this needs an opt-in per kernel.
inline constexpr size_t kDefaultDynamicSmemLimit = 48 * 1024;
// Grid-stride elementwise kernels: enough blocks to fill any current GPU several times.
inline constexpr int kElementwiseThreads = 256;
inline constexpr int64_t kMaxElementwiseBlocks = 8192;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes <= kDefaultDynamicSmemLimit) return;
  throw_on_cuda_error(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)),
                      "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

inline unsigned elementwise_blocks(int64_t work_items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(ceil_div(work_items, kElementwiseThreads), 1, kMaxElementwiseBlocks));
}

// The one place kernels are launched; errors are picked up by the caller's cudaGetLastError().
template <typename Params>
void launch_kernel(void (*kernel)(Params), dim3 grid, int threads, size_t smem_bytes,
                   cudaStream_t stream, const Params& params) {
  kernel<<<grid, threads, smem_bytes, stream>>>(params);
}

// Calls launch(offset, count) for consecutive chunks of [0, total) of at most kMaxGridY.
template <typename Launch>
void for_each_grid_y_chunk(int64_t total, Launch&& launch) {
  for (int64_t offset = 0; offset < total; offset += kMaxGridY) {
    launch(offset, static_cast<unsigned>(std::min(kMaxGridY, total - offset)));
  }
}

// Streaming multiprocessors of the current device (1 when it cannot be queried: a launch that
// follows reports the device problem).
inline int multiprocessor_count() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 1;
  }
  return count;
}

// Whether the current device lets one CTA use `bytes` of dynamic shared memory (sm_80: 163 KB,
// sm_86 / sm_89: 99 KB, sm_90: 227 KB), for launchers with a larger configuration to prefer.
inline bool fits_dynamic_smem(size_t bytes) {
  int device = 0;
  int limit = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) ==
             cudaSuccess &&
         bytes <= static_cast<size_t>(limit);
}

// Whether the wgmma (sm_90a) kernels run on `device`: they were compiled (the architecture list
// holds 90a), the device has compute capability 9.0, and the environment variable
// CUFLASH_DISABLE_WGMMA is unset, empty or 0 (setting it runs the portable mma.sync kernels
// instead, e.g. to compare both on one GPU).
inline bool use_sm90_kernels(int device) {
#if defined(CUFLASH_HAVE_SM90A)
  static const bool disabled = [] {
    const char* value = std::getenv("CUFLASH_DISABLE_WGMMA");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  int major = 0;
  int minor = 0;
  if (disabled ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;  // a launch that follows reports the device problem
  }
  return major == 9 && minor == 0;
#else
  (void)device;
  return false;
#endif
}

// The same for the current device.
inline bool use_sm90_kernels() {
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess && use_sm90_kernels(device);
}

}  // namespace cuflash::detail
