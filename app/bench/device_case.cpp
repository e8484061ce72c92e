#include "bench/device_case.h"

#include <memory>
#include <utility>
#include <vector>

#include "bench/device_inputs.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/cuda_error.h"
#include "cuflash/error.h"
#include "cuflash/io/random_inputs.h"

namespace cuflash::bench {

namespace {

// A copy from pageable memory may return before its DMA lands, the GPU generator runs on the
// legacy default stream, and the timing stream is a non-blocking one that waits for neither:
// wait here.
void wait_for_inputs() { check_cuda(cudaDeviceSynchronize(), "making the inputs"); }

// The generator's tables on the device, or nothing when they do not fit beside the case.
std::unique_ptr<DeviceNormalTables> device_tables() {
  try {
    return std::make_unique<DeviceNormalTables>();
  } catch (const Error& error) {
    if (error.kind() != Error::Kind::out_of_memory) throw;
    return nullptr;  // DeviceBuffer cleared the failed cudaMalloc's error
  }
}

}  // namespace

// Writes the generator's tensor (io/random_inputs.h: the same bits as `run` and `verify` use)
// into `buffer`: on the GPU while its tables fit (they take 384 MB; made at the first call, kept
// until the inputs are made), on the host and copied when they do not or head_dim is odd.
void DeviceCase::fill(const Problem& p, io::InputTensor tensor, uint64_t seed,
                      DeviceBuffer& buffer) {
  if (!tables_ && p.shape.head_dim % 2 == 0) tables_ = device_tables();
  if (tables_) {
    tables_->generate(p, tensor, seed, buffer);
  } else {
    const std::vector<unsigned char> host = io::random_input_bytes(p, tensor, seed);
    buffer.copy_from_host(host.data());
    wait_for_inputs();  // before `host` goes
  }
}

// Fills the buffers allocated for inputs, once every buffer of the case is allocated (so that
// the generator's tables take no room the case needs), then frees the tables.
void DeviceCase::fill_inputs(const Problem& p, uint64_t seed) {
  for (const auto& [buffer, tensor] : pending_inputs_) fill(p, tensor, seed, *buffer);
  pending_inputs_.clear();
  wait_for_inputs();  // before the tables go and before the timing stream reads the inputs
  tables_.reset();
}

// Paged K and V, moved into their pools on the GPU from dense ones made for the purpose and
// freed once paged.
void DeviceCase::make_paged_kv(const Problem& p, size_t kv_bytes, uint64_t seed) {
  DeviceBuffer k(kv_bytes), v(kv_bytes);
  fill(p, io::InputTensor::k, seed, k);
  fill(p, io::InputTensor::v, seed, v);
  wait_for_inputs();  // the generator ran on the legacy default stream
  tables_.reset();    // made again for the other inputs once the case's buffers are allocated
  extras_ = std::make_unique<DeviceForwardExtras>(p, k.data(), v.data(), nullptr);
}

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
  pending_inputs_.push_back({&q, io::InputTensor::q});
  size_t kv_device_bytes = 2 * kv_bytes;
  if (p.page_size == 0) {  // paged K/V live in the pools alone
    DeviceBuffer& k = allocate(kv_bytes);
    DeviceBuffer& v = allocate(kv_bytes);
    t.k = k.data();
    t.v = v.data();
    pending_inputs_.push_back({&k, io::InputTensor::k});
    pending_inputs_.push_back({&v, io::InputTensor::v});
  }
  if (p.page_size != 0) {
    make_paged_kv(p, kv_bytes, seed);
    kv_device_bytes = extras_->bytes();
  } else if (!p.cache_seqlens.empty()) {
    extras_ = std::make_unique<DeviceForwardExtras>(p, nullptr, nullptr, nullptr);
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
      wait_for_inputs();  // before offsets32 goes
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
    fill_inputs(p, seed);
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
  pending_inputs_.push_back({&dout, io::InputTensor::dout});
  fill_inputs(p, seed);
  workspace_bytes_ = int64_t(workspace);
  backward_bytes_ = forward_bytes_ + int64_t(2 * q_bytes + 2 * kv_bytes + workspace);
  backward_ = cuflash::backward_args(p, t);
}

}  // namespace cuflash::bench
