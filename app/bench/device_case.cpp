#include "bench/device_case.h"

#include <utility>
#include <vector>

#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/cuda_error.h"
#include "cuflash/io/random_inputs.h"

namespace cuflash::bench {

namespace {

// The generator's tensor (io/random_inputs.h: the same bits as `run` and `verify` use).
void upload_input(DeviceBuffer& buffer, const Problem& p, io::InputTensor tensor, uint64_t seed) {
  const std::vector<unsigned char> host = io::random_input_bytes(p, tensor, seed);
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

DeviceCase::DeviceCase(const Problem& p, bool with_backward, uint64_t seed)
    // Over several GPUs the inputs stay in the ranks' shards after the first call: the timed
    // calls are the ring's transfers and attention, not copies of the whole tensors.
    : passes_(context_parallel::device_passes(p, context_parallel::ShardCopies::first_call)) {
  const size_t element = static_cast<size_t>(dtype_size(p.dtype));
  const size_t q_bytes = size_t(p.shape.q_elements()) * element;    // Q, O, dO, dQ: [B, H, Sq, D]
  const size_t kv_bytes = size_t(p.shape.kv_elements()) * element;  // K, V, dK, dV: [B, Hkv, Sk, D]
  const size_t lse_bytes = size_t(p.shape.lse_elements()) * sizeof(float);  // [B, H, Sq]

  DenseTensors t;
  DeviceBuffer& q = allocate(q_bytes);
  t.q = q.data();
  t.out = allocate(q_bytes).data();
  t.lse = allocate(lse_bytes).as<float>();
  upload_input(q, p, io::InputTensor::q, seed);
  size_t kv_device_bytes = 2 * kv_bytes;
  if (p.page_size == 0) {  // paged K/V live in the pools alone
    DeviceBuffer& k = allocate(kv_bytes);
    DeviceBuffer& v = allocate(kv_bytes);
    t.k = k.data();
    t.v = v.data();
    upload_input(k, p, io::InputTensor::k, seed);
    upload_input(v, p, io::InputTensor::v, seed);
  }
  if (p.page_size != 0 || !p.cache_seqlens.empty()) {
    const auto host_kv = [&](io::InputTensor tensor) {  // only paging reads them
      return p.page_size == 0 ? HostBytes{} : io::random_input_bytes(p, tensor, seed);
    };
    extras_ = std::make_unique<DeviceForwardExtras>(p, host_kv(io::InputTensor::k),
                                                    host_kv(io::InputTensor::v), nullptr);
    if (p.page_size != 0) kv_device_bytes = 0;
    kv_device_bytes += extras_->bytes();
  }
  if (!p.alibi_slopes.empty()) {
    DeviceBuffer& slopes = allocate(p.alibi_slopes.size() * sizeof(float));
    slopes.copy_from_host(p.alibi_slopes.data());
    t.alibi_slopes = slopes.as<const float>();
  }
  if (p.varlen()) {  // the sequences' int32 cumulative offsets
    for (const auto& [lengths, pointer] : {std::pair{&p.seqlens_q, &t.cu_seqlens_q},
                                           std::pair{&p.seqlens_k, &t.cu_seqlens_k}}) {
      const std::vector<int64_t> offsets = cumulative_offsets(*lengths);
      const std::vector<int32_t> offsets32(offsets.begin(), offsets.end());
      DeviceBuffer& buffer = allocate(offsets32.size() * sizeof(int32_t));
      buffer.copy_from_host(offsets32.data());
      wait_for_uploads();  // before offsets32 goes
      *pointer = buffer.as<const int32_t>();
    }
  }
  // The forward's key splits (and context parallelism's partials) take a workspace of their
  // own (none without either).
  const size_t forward_workspace = passes_.forward_workspace_bytes(p);
  t.workspace = forward_workspace > 0 ? allocate(forward_workspace).data() : nullptr;
  t.workspace_bytes = forward_workspace;
  forward_workspace_bytes_ = int64_t(forward_workspace);
  forward_bytes_ = int64_t(2 * q_bytes + kv_device_bytes + lse_bytes + forward_workspace);
  forward_ = cuflash::forward_args(p, t);
  if (extras_) extras_->apply(forward_);
  if (!with_backward) {
    wait_for_uploads();
    return;
  }

  const size_t workspace = passes_.backward_workspace_bytes(p);
  DeviceBuffer& dout = allocate(q_bytes);
  t.dout = dout.data();
  t.dq = allocate(q_bytes).data();
  t.dk = allocate(kv_bytes).data();
  t.dv = allocate(kv_bytes).data();
  t.workspace = allocate(workspace).data();
  t.workspace_bytes = workspace;
  upload_input(dout, p, io::InputTensor::dout, seed);
  wait_for_uploads();
  workspace_bytes_ = int64_t(workspace);
  backward_bytes_ = forward_bytes_ + int64_t(2 * q_bytes + 2 * kv_bytes + workspace);
  backward_ = cuflash::backward_args(p, t);
}

}  // namespace cuflash::bench
