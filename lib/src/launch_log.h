// The library's side of LaunchRecord (cuflash/attention.h): launch_kernel() (launch_util.cuh)
// reports every launch here, and the API functions name the call the launches belong to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cuflash::detail {

// Adds the launch to this thread's innermost LaunchRecord, if one lives; nothing otherwise.
void record_launch(const void* kernel, dim3 grid, int threads, size_t shared_bytes);

// While it lives, the launches of this thread belong to the call `name` ("forward", ...): the
// outermost API call, so that a merge that forward() launches is part of the forward.
class RecordedCall {
 public:
  explicit RecordedCall(const char* name);
  ~RecordedCall();
  RecordedCall(const RecordedCall&) = delete;
  RecordedCall& operator=(const RecordedCall&) = delete;

 private:
  bool outermost_;
};

}  // namespace cuflash::detail
