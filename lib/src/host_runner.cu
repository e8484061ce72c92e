// Host convenience layer (see host_runner.h): owns every device allocation through RAII so that
// an exception at any step (bad argument, CUDA error, kernel error) leaks nothing.
#include "cuflash/host_runner.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "cuflash/cuda_error.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"

namespace cuflash {
namespace {

// Byte written over every output before the kernels run: 0xFF.. is a NaN in fp16, bf16 and fp32,
// so an element no kernel wrote reads back as NaN and fails any comparison.
constexpr unsigned char kPoisonByte = 0xFF;

class Stream {
 public:
  Stream() {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags");
  }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// --- Sizes ------------------------------------------------------------------------------------

// Product of positive sizes; refuses non-positive sizes and products that overflow int64.
int64_t checked_product(std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  int64_t product = 1;
  for (const auto& [name, size] : sizes) {
    if (size <= 0) {
      throw Error(Error::Kind::invalid_argument,
                  std::string("shape.") + name + " must be positive, got " + std::to_string(size));
    }
    if (product > std::numeric_limits<int64_t>::max() / size) {
      throw Error(Error::Kind::invalid_argument, "shape is too large: element count overflows");
    }
    product *= size;
  }
  return product;
}

struct ProblemBytes {
  size_t q = 0;    // Q, O, dO, dQ: batch * heads * seq_q * head_dim elements
  size_t kv = 0;   // K, V, dK, dV: batch * heads_kv * seq_k * head_dim elements
  size_t lse = 0;  // batch * heads * seq_q floats
  size_t lse_count = 0;
};

ProblemBytes problem_bytes(const Problem& problem) {
  const AttentionShape& s = problem.shape;
  const auto element = static_cast<size_t>(dtype_size(problem.dtype));
  const auto q_count = checked_product({{"batch", s.batch}, {"heads", s.heads},
                                        {"seq_q", s.seq_q}, {"head_dim", s.head_dim}});
  const auto kv_count = checked_product({{"batch", s.batch}, {"heads_kv", s.heads_kv},
                                         {"seq_k", s.seq_k}, {"head_dim", s.head_dim}});
  if (static_cast<size_t>(std::max(q_count, kv_count)) > SIZE_MAX / element) {
    throw Error(Error::Kind::invalid_argument, "shape is too large: byte count overflows");
  }
  ProblemBytes bytes;
  bytes.q = static_cast<size_t>(q_count) * element;
  bytes.kv = static_cast<size_t>(kv_count) * element;
  bytes.lse_count = static_cast<size_t>(s.batch * s.heads * s.seq_q);
  bytes.lse = bytes.lse_count * sizeof(float);
  return bytes;
}

void check_host_size(const char* name, const HostBytes& host, size_t expected, DType dtype) {
  if (host.size() == expected) return;
  throw Error(Error::Kind::invalid_argument,
              std::string(name) + " has " + std::to_string(host.size()) + " bytes, expected " +
                  std::to_string(expected) + " (" + std::string(to_string(dtype)) +
                  " elements densely packed for the problem's shape)");
}

void require_device() {
  if (device_count() == 0) throw Error(Error::Kind::no_device, "no CUDA device found");
}

// --- Device state of one run --------------------------------------------------------------------

struct DeviceInputs {
  DeviceBuffer q, k, v;
  DeviceBuffer alibi_slopes;  // empty without ALiBi
  DeviceInputs(const Problem& problem, const ProblemBytes& bytes, const HostBytes& hq,
               const HostBytes& hk, const HostBytes& hv, cudaStream_t stream)
      : q(bytes.q), k(bytes.kv), v(bytes.kv) {
    q.copy_from_host(hq.data(), stream);
    k.copy_from_host(hk.data(), stream);
    v.copy_from_host(hv.data(), stream);
    const std::vector<float>& slopes = problem.alibi_slopes;
    if (!slopes.empty()) {
      alibi_slopes = DeviceBuffer(slopes.size() * sizeof(float));
      alibi_slopes.copy_from_host(slopes.data(), stream);
    }
  }
};

struct DeviceForwardOutputs {
  DeviceBuffer out, lse;
  DeviceForwardOutputs(const ProblemBytes& bytes, cudaStream_t stream)
      : out(bytes.q), lse(bytes.lse) {
    out.fill(kPoisonByte, stream);
    lse.fill(kPoisonByte, stream);
  }
};

struct DeviceGradients {
  DeviceBuffer dq, dk, dv;
  DeviceGradients(const ProblemBytes& bytes, cudaStream_t stream)
      : dq(bytes.q), dk(bytes.kv), dv(bytes.kv) {
    dq.fill(kPoisonByte, stream);
    dk.fill(kPoisonByte, stream);
    dv.fill(kPoisonByte, stream);
  }
};

// The device pointers of the forward pass.
DenseTensors forward_tensors(const DeviceInputs& in, const DeviceForwardOutputs& fwd) {
  DenseTensors t;
  t.q = in.q.data();
  t.k = in.k.data();
  t.v = in.v.data();
  t.out = fwd.out.data();
  t.lse = fwd.lse.as<float>();
  t.alibi_slopes = in.alibi_slopes.as<const float>();
  return t;
}

// ... and those of the backward pass as well.
DenseTensors backward_tensors(const DeviceInputs& in, const DeviceForwardOutputs& fwd,
                              const DeviceBuffer& dout, const DeviceGradients& grads,
                              const DeviceBuffer& workspace) {
  DenseTensors t = forward_tensors(in, fwd);
  t.dout = dout.data();
  t.dq = grads.dq.data();
  t.dk = grads.dk.data();
  t.dv = grads.dv.data();
  t.workspace = workspace.data();
  t.workspace_bytes = workspace.bytes();
  return t;
}

HostBytes download_bytes(const DeviceBuffer& buffer, cudaStream_t stream) {
  HostBytes host(buffer.bytes());
  buffer.copy_to_host(host.data(), stream);
  return host;
}

HostForwardResult download_forward(const DeviceForwardOutputs& fwd, const ProblemBytes& bytes,
                                   cudaStream_t stream) {
  HostForwardResult result;
  result.out = download_bytes(fwd.out, stream);
  result.lse.resize(bytes.lse_count);
  fwd.lse.copy_to_host(result.lse.data(), stream);
  return result;
}

HostBackwardResult download_gradients(const DeviceGradients& grads, cudaStream_t stream) {
  HostBackwardResult result;
  result.dq = download_bytes(grads.dq, stream);
  result.dk = download_bytes(grads.dk, stream);
  result.dv = download_bytes(grads.dv, stream);
  return result;
}

ProblemBytes checked_problem_bytes(const Problem& problem, const HostBytes& q,
                                   const HostBytes& k, const HostBytes& v) {
  const ProblemBytes bytes = problem_bytes(problem);
  check_host_size("q", q, bytes.q, problem.dtype);
  check_host_size("k", k, bytes.kv, problem.dtype);
  check_host_size("v", v, bytes.kv, problem.dtype);
  const auto slopes = int64_t(problem.alibi_slopes.size());
  const AttentionShape& s = problem.shape;
  if (slopes != 0 && slopes != s.heads && slopes != s.batch * s.heads) {
    throw Error(Error::Kind::invalid_argument,
                "alibi_slopes has " + std::to_string(slopes) + " values, expected heads (" +
                    std::to_string(s.heads) + ") or batch * heads (" +
                    std::to_string(s.batch * s.heads) + ")");
  }
  return bytes;
}

}  // namespace

HostForwardResult run_forward(const Problem& problem, const HostBytes& q, const HostBytes& k,
                              const HostBytes& v) {
  const ProblemBytes bytes = checked_problem_bytes(problem, q, k, v);
  require_device();

  Stream stream;
  DeviceInputs inputs(problem, bytes, q, k, v, stream.get());
  DeviceForwardOutputs fwd(bytes, stream.get());
  forward(forward_args(problem, forward_tensors(inputs, fwd)), stream.get());
  HostForwardResult result = download_forward(fwd, bytes, stream.get());
  stream.synchronize();  // the downloads above are asynchronous
  return result;
}

HostForwardBackwardResult run_forward_backward(const Problem& problem, const HostBytes& q,
                                               const HostBytes& k, const HostBytes& v,
                                               const HostBytes& dout) {
  const ProblemBytes bytes = checked_problem_bytes(problem, q, k, v);
  check_host_size("dout", dout, bytes.q, problem.dtype);
  require_device();

  Stream stream;
  DeviceInputs inputs(problem, bytes, q, k, v, stream.get());
  DeviceBuffer device_dout(bytes.q);
  device_dout.copy_from_host(dout.data(), stream.get());
  DeviceForwardOutputs fwd(bytes, stream.get());
  DeviceGradients grads(bytes, stream.get());
  DeviceBuffer workspace(backward_workspace_size(problem.shape, problem.dtype));

  forward(forward_args(problem, forward_tensors(inputs, fwd)), stream.get());
  backward(backward_args(problem, backward_tensors(inputs, fwd, device_dout, grads, workspace)),
           stream.get());

  HostForwardBackwardResult result;
  result.forward = download_forward(fwd, bytes, stream.get());
  result.backward = download_gradients(grads, stream.get());
  stream.synchronize();  // the downloads above are asynchronous
  return result;
}

}  // namespace cuflash
