#include "bench/device_case.h"

#include "bench/input_fill.h"
#include "cuflash/cuda_error.h"

namespace cuflash::bench {

namespace {

// Each input tensor draws from its own stream of the generator (input_fill.h).
enum InputStream : uint64_t { kStreamQ = 1, kStreamK = 2, kStreamV = 3, kStreamDout = 4 };

void upload_normal(DeviceBuffer& buffer, DType dtype, uint64_t seed, InputStream stream) {
  const size_t count = buffer.bytes() / static_cast<size_t>(dtype_size(dtype));
  const std::vector<unsigned char> host = standard_normal_bytes(count, dtype, seed, stream);
  buffer.copy_from_host(host.data());
}

// A copy from pageable memory may return before its DMA lands, and the timing stream is a
// non-blocking one that does not wait for the legacy default stream: wait here.
void wait_for_uploads() { check_cuda(cudaDeviceSynchronize(), "cudaMemcpy (inputs)"); }

}  // namespace

DeviceBuffer& DeviceCase::allocate(size_t bytes) {
  buffers_.emplace_back(bytes);
  return buffers_.back();
}

DeviceCase::DeviceCase(const Problem& p, bool with_backward, uint64_t seed) {
  const size_t element = static_cast<size_t>(dtype_size(p.dtype));
  const size_t q_bytes = size_t(p.shape.q_elements()) * element;    // Q, O, dO, dQ: [B, H, Sq, D]
  const size_t kv_bytes = size_t(p.shape.kv_elements()) * element;  // K, V, dK, dV: [B, Hkv, Sk, D]
  const size_t lse_bytes = size_t(p.shape.lse_elements()) * sizeof(float);  // [B, H, Sq]

  DenseTensors t;
  DeviceBuffer& q = allocate(q_bytes);
  DeviceBuffer& k = allocate(kv_bytes);
  DeviceBuffer& v = allocate(kv_bytes);
  t.q = q.data();
  t.k = k.data();
  t.v = v.data();
  t.out = allocate(q_bytes).data();
  t.lse = allocate(lse_bytes).as<float>();
  upload_normal(q, p.dtype, seed, kStreamQ);
  upload_normal(k, p.dtype, seed, kStreamK);
  upload_normal(v, p.dtype, seed, kStreamV);
  forward_bytes_ = int64_t(2 * q_bytes + 2 * kv_bytes + lse_bytes);
  forward_ = cuflash::forward_args(p, t);
  if (!with_backward) {
    wait_for_uploads();
    return;
  }

  const size_t workspace = backward_workspace_size(p.shape, p.dtype);
  DeviceBuffer& dout = allocate(q_bytes);
  t.dout = dout.data();
  t.dq = allocate(q_bytes).data();
  t.dk = allocate(kv_bytes).data();
  t.dv = allocate(kv_bytes).data();
  t.workspace = allocate(workspace).data();
  t.workspace_bytes = workspace;
  upload_normal(dout, p.dtype, seed, kStreamDout);
  wait_for_uploads();
  workspace_bytes_ = int64_t(workspace);
  backward_bytes_ = forward_bytes_ + int64_t(2 * q_bytes + 2 * kv_bytes + workspace);
  backward_ = cuflash::backward_args(p, t);
}

}  // namespace cuflash::bench
