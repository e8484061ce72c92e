// Host-side helpers shared by the launchers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <cuda_runtime_api.h>

#include "cuflash/cuda_error.h"
#include "int_math.h"
#include "launch_log.h"

namespace cuflash::detail {

// grid.y and grid.z are limited to 65535; batch * heads goes on grid.y in chunks of this size.
inline constexpr int64_t kMaxGridY = 65535;
// Static shared memory plus dynamic beyond this needs an opt-in per kernel.
inline constexpr size_t kDefaultDynamicSmemLimit = 48 * 1024;
// Grid-stride elementwise kernels: enough blocks to fill any current GPU several times.
inline constexpr int kElementwiseThreads = 256;
inline constexpr int64_t kMaxElementwiseBlocks = 8192;

template <typename Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes <= kDefaultDynamicSmemLimit) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)),
                      "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

inline unsigned elementwise_blocks(int64_t work_items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(ceil_div(work_items, kElementwiseThreads), 1, kMaxElementwiseBlocks));
}

// The one place kernels are launched; errors are picked up by the caller's cudaGetLastError().
// A LaunchRecord of the calling thread (cuflash/attention.h) gets the launch.
template <typename Params>
void launch_kernel(void (*kernel)(Params), dim3 grid, int threads, size_t smem_bytes,
                   cudaStream_t stream, const Params& params) {
  record_launch(reinterpret_cast<const void*>(kernel), grid, threads, smem_bytes);
  kernel<<<grid, threads, smem_bytes, stream>>>(params);
}

// Calls launch(offset, count) for consecutive chunks of [0, total) of at most kMaxGridY.
template <typename Launch>
void for_each_grid_y_chunk(int64_t total, Launch&& launch) {
  for (int64_t offset = 0; offset < total; offset += kMaxGridY) {
    launch(offset, static_cast<unsigned>(std::min(kMaxGridY, total - offset)));
  }
}

// What the launchers ask of the current device, queried once per device and process.
// Defaults (1 SM, no opt-in shared memory) when the device cannot be queried: the launch that
// follows reports the device problem.
struct DeviceLimits {
  int multiprocessors = 1;
  size_t max_dynamic_smem = 0;  // sm_80: 163 KB, sm_86 / sm_89: 99 KB, sm_90: 227 KB
  size_t smem_per_multiprocessor = 0;  // shared by the CTAs of one SM (sm_90: 228 KB)
};

inline DeviceLimits query_device_limits(int device) {
  DeviceLimits limits;
  int multiprocessors = 0;
  int smem = 0;
  int smem_per_sm = 0;
  if (cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) ==
          cudaSuccess &&
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) ==
          cudaSuccess &&
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                             device) == cudaSuccess) {
    limits.multiprocessors = multiprocessors;
    limits.max_dynamic_smem = static_cast<size_t>(smem);
    limits.smem_per_multiprocessor = static_cast<size_t>(smem_per_sm);
  }
  return limits;
}

inline DeviceLimits current_device_limits() {
  constexpr int kCachedDevices = 64;
  static DeviceLimits cache[kCachedDevices];
  static std::once_flag queried[kCachedDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return {};
  if (device < 0 || device >= kCachedDevices) return query_device_limits(device);
  std::call_once(queried[device], [&] { cache[device] = query_device_limits(device); });
  return cache[device];
}

// Whether the current device lets one CTA use `bytes` of dynamic shared memory, for launchers
// with a larger configuration to prefer.
inline bool fits_dynamic_smem(size_t bytes) {
  return bytes <= current_device_limits().max_dynamic_smem;
}

}  // namespace cuflash::detail
