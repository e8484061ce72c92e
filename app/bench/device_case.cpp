#include "bench/device_case.h"

#include <algorithm>

#include "bench/device_error.h"
#include "bench/input_fill.h"

namespace cuflash::bench {

namespace {

// Each input tensor draws from its own stream of the generator (input_fill.h).
enum InputStream : uint64_t { kStreamQ = 1, kStreamK = 2, kStreamV = 3, kStreamDout = 4 };

void upload_normal(const DeviceBuffer& buffer, DType dtype, uint64_t seed, InputStream stream) {
  const size_t count = buffer.bytes() / static_cast<size_t>(dtype_size(dtype));
  const std::vector<unsigned char> host = standard_normal_bytes(count, dtype, seed, stream);
  check_cuda(cudaMemcpy(buffer.get(), host.data(), host.size(), cudaMemcpyHostToDevice),
             "cudaMemcpy (inputs)");
}

// cudaMemcpy from pageable memory may return before its DMA lands, and the timing stream is a
// non-blocking one that does not wait for the legacy default stream: wait here.
void wait_for_uploads() { check_cuda(cudaDeviceSynchronize(), "cudaMemcpy (inputs)"); }

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  check_cuda(cudaMalloc(&data_, std::max<size_t>(bytes, 1)), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

DeviceBuffer& DeviceCase::allocate(size_t bytes) {
  buffers_.push_back(std::make_unique<DeviceBuffer>(bytes));
  return *buffers_.back();
}

TensorRef DeviceCase::tensor(const DeviceBuffer& buffer, int64_t heads, int64_t seq) const {
  return make_tensor_ref(buffer.get(), case_.layout, case_.problem.batch, heads, seq,
                         case_.problem.head_dim);
}

DeviceCase::DeviceCase(const cli::AttentionCase& c, bool with_backward, uint64_t seed) : case_(c) {
  const reference::Problem& p = c.problem;
  const size_t element = static_cast<size_t>(dtype_size(c.dtype));
  const size_t q_bytes = size_t(p.q_elements()) * element;    // Q, O, dO, dQ: [B, H, Sq, D]
  const size_t kv_bytes = size_t(p.kv_elements()) * element;  // K, V, dK, dV: [B, Hkv, Sk, D]
  const size_t lse_bytes = size_t(p.lse_elements()) * sizeof(float);  // [B, H, Sq]

  const DeviceBuffer& q = allocate(q_bytes);
  const DeviceBuffer& k = allocate(kv_bytes);
  const DeviceBuffer& v = allocate(kv_bytes);
  const DeviceBuffer& out = allocate(q_bytes);
  const DeviceBuffer& lse = allocate(lse_bytes);
  upload_normal(q, c.dtype, seed, kStreamQ);
  upload_normal(k, c.dtype, seed, kStreamK);
  upload_normal(v, c.dtype, seed, kStreamV);
  forward_bytes_ = int64_t(2 * q_bytes + 2 * kv_bytes + lse_bytes);

  forward_.shape = c.shape();
  forward_.dtype = c.dtype;
  forward_.mask = p.mask;
  forward_.scale = static_cast<float>(p.scale);
  forward_.q = tensor(q, p.heads, p.seq_q);
  forward_.k = tensor(k, p.heads_kv, p.seq_k);
  forward_.v = tensor(v, p.heads_kv, p.seq_k);
  forward_.out = tensor(out, p.heads, p.seq_q);
  forward_.lse = static_cast<float*>(lse.get());
  if (!with_backward) {
    wait_for_uploads();
    return;
  }

  const size_t workspace = backward_workspace_size(c.shape(), c.dtype);
  const DeviceBuffer& dout = allocate(q_bytes);
  const DeviceBuffer& dq = allocate(q_bytes);
  const DeviceBuffer& dk = allocate(kv_bytes);
  const DeviceBuffer& dv = allocate(kv_bytes);
  const DeviceBuffer& scratch = allocate(workspace);
  upload_normal(dout, c.dtype, seed, kStreamDout);
  wait_for_uploads();
  workspace_bytes_ = int64_t(workspace);
  backward_bytes_ = forward_bytes_ + int64_t(2 * q_bytes + 2 * kv_bytes + workspace);

  backward_ = backward_args_for(forward_);
  backward_.dout = tensor(dout, p.heads, p.seq_q);
  backward_.dq = tensor(dq, p.heads, p.seq_q);
  backward_.dk = tensor(dk, p.heads_kv, p.seq_k);
  backward_.dv = tensor(dv, p.heads_kv, p.seq_k);
  backward_.workspace = scratch.get();
  backward_.workspace_bytes = workspace;
}

}  // namespace cuflash::bench
