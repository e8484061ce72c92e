// The device side of one benchmark case: its tensors, filled with fresh inputs (the seeded
// inputs of io/random_inputs.h, those `cuflash run` and `verify` use), the forward/backward
// arguments that point into them, and the passes that compute the case (the library's, or those
// of context parallelism on one GPU for a case with ranks). Everything is freed with the
// object.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "bench/device_inputs.h"
#include "cuflash/attention.h"
#include "cuflash/device_buffer.h"
#include "cuflash/host_runner.h"
#include "cuflash/io/random_inputs.h"
#include "cuflash/problem.h"

namespace cuflash::bench {

class DeviceCase {
 public:
  // Allocates Q, K, V, O, LSE (and with `with_backward` dO, dQ, dK, dV and the workspace), then
  // fills Q, K, V (and dO) with seeded standard normals, made on the GPU (device_inputs.h; on
  // the host when its tables do not fit or head_dim is odd); with a page size, K and V go into
  // a paged cache instead (host_runner.h: DeviceForwardExtras, paged on the GPU from dense ones
  // freed afterwards), and cache lengths go to the device.
  // Throws cuflash::Error (out_of_memory, ...).
  DeviceCase(const Problem& p, bool with_backward, uint64_t seed);

  const ForwardArgs& forward_args() const { return forward_; }
  const BackwardArgs& backward_args() const { return backward_; }  // needs with_backward
  const DevicePasses& passes() const { return passes_; }

  // Bytes of the buffers each pass uses: forward Q, K, V, O, LSE and its workspace; backward
  // all of them plus dO, dQ, dK, dV and the backward workspace (the passes' sizes).
  int64_t forward_bytes() const { return forward_bytes_; }
  int64_t backward_bytes() const { return backward_bytes_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  int64_t forward_workspace_bytes() const { return forward_workspace_bytes_; }  // key splits

 private:
  DeviceBuffer& allocate(size_t bytes);
  void fill(const Problem& p, io::InputTensor tensor, uint64_t seed, DeviceBuffer& buffer);
  void fill_inputs(const Problem& p, uint64_t seed);
  void make_paged_kv(const Problem& p, size_t kv_bytes, uint64_t seed);

  std::deque<DeviceBuffer> buffers_;  // a deque: allocate()'s references stay valid
  // Buffers allocated and not yet filled, with the generator tensor each takes.
  std::vector<std::pair<DeviceBuffer*, io::InputTensor>> pending_inputs_;
  std::unique_ptr<DeviceForwardExtras> extras_;  // paged K/V, cache lengths
  std::unique_ptr<DeviceNormalTables> tables_;   // the generator's, while inputs are made
  DevicePasses passes_;
  ForwardArgs forward_;
  BackwardArgs backward_;
  int64_t forward_bytes_ = 0, backward_bytes_ = 0, workspace_bytes_ = 0;
  int64_t forward_workspace_bytes_ = 0;
};

}  // namespace cuflash::bench
