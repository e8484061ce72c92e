// Host convenience layer (see host_runner.h): owns every device allocation through RAII so that
// an exception at any step (bad argument, CUDA error, kernel error) leaks nothing.
#include "cuflash/host_runner.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include <cuda_runtime_api.h>

#include "cuflash/cuda_error.h"
#include "cuflash/device_buffer.h"
#include "cuflash/error.h"
#include "paged_cache.h"

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

// A varlen problem: layout thd, batch 1, one key length per query length, all positive, summing
// to the packed totals, and neither pages nor cache lengths.
void check_varlen(const Problem& p) {
  const auto fail = [](const std::string& message) {
    throw Error(Error::Kind::invalid_argument, message);
  };
  if (!p.varlen()) {
    if (!p.seqlens_k.empty()) fail("seqlens_k needs seqlens_q (a variable-length batch)");
    if (p.layout == Layout::thd) fail("layout thd needs sequence lengths (seqlens_q)");
    return;
  }
  if (p.layout != Layout::thd) fail("sequence lengths (seqlens_q) need layout thd");
  if (p.shape.batch != 1) fail("a variable-length batch has shape.batch 1 (the packed tensors)");
  if (p.seqlens_k.size() != p.seqlens_q.size()) {
    fail("seqlens_k needs one length per sequence of seqlens_q");
  }
  if (p.page_size != 0 || !p.cache_seqlens.empty()) {
    fail("a variable-length batch takes neither page_size nor cache_seqlens");
  }
  const std::tuple<const char*, const std::vector<int64_t>*, int64_t> sides[] = {
      {"seqlens_q", &p.seqlens_q, p.shape.seq_q}, {"seqlens_k", &p.seqlens_k, p.shape.seq_k}};
  for (const auto& [name, lengths, total] : sides) {
    int64_t sum = 0;
    for (const int64_t length : *lengths) {
      if (length < 1) fail(std::string(name) + " must be positive, got " + std::to_string(length));
      if (__builtin_add_overflow(sum, length, &sum)) fail(std::string(name) + " sum past 2^63");
    }
    if (sum != total || sum > std::numeric_limits<int32_t>::max()) {
      fail(std::string(name) + " sum to " + std::to_string(sum) + ", expected the " +
           std::to_string(total) + " packed tokens (at most 2^31 - 1)");
    }
  }
}

void require_device() {
  if (device_count() == 0) throw Error(Error::Kind::no_device, "no CUDA device found");
}

// --- Device state of one run --------------------------------------------------------------------

// int32 cumulative offsets of a varlen problem's lengths (the caller checked them).
std::vector<int32_t> int32_offsets(const std::vector<int64_t>& lengths) {
  const std::vector<int64_t> offsets = cumulative_offsets(lengths);
  return std::vector<int32_t>(offsets.begin(), offsets.end());
}

struct DeviceInputs {
  DeviceBuffer q, k, v;
  DeviceBuffer alibi_slopes;  // empty without ALiBi
  DeviceBuffer cu_seqlens_q, cu_seqlens_k;  // empty unless varlen
  std::vector<int32_t> host_cu_q, host_cu_k;  // kept alive for the asynchronous uploads
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
    if (problem.varlen()) {
      host_cu_q = int32_offsets(problem.seqlens_q);
      host_cu_k = int32_offsets(problem.seqlens_k);
      cu_seqlens_q = DeviceBuffer(host_cu_q.size() * sizeof(int32_t));
      cu_seqlens_k = DeviceBuffer(host_cu_k.size() * sizeof(int32_t));
      cu_seqlens_q.copy_from_host(host_cu_q.data(), stream);
      cu_seqlens_k.copy_from_host(host_cu_k.data(), stream);
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
  t.cu_seqlens_q = in.cu_seqlens_q.as<const int32_t>();
  t.cu_seqlens_k = in.cu_seqlens_k.as<const int32_t>();
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
  const int64_t entries = problem.sequences();
  if (slopes != 0 && slopes != s.heads && slopes != entries * s.heads) {
    throw Error(Error::Kind::invalid_argument,
                "alibi_slopes has " + std::to_string(slopes) + " values, expected heads (" +
                    std::to_string(s.heads) + ") or batch * heads (" +
                    std::to_string(entries * s.heads) + ")");
  }
  check_varlen(problem);
  return bytes;
}

void check_cache_seqlens(const Problem& p) {
  if (p.cache_seqlens.empty()) return;
  if (static_cast<int64_t>(p.cache_seqlens.size()) != p.shape.batch) {
    throw Error(Error::Kind::invalid_argument,
                "cache_seqlens has " + std::to_string(p.cache_seqlens.size()) +
                    " lengths, expected one per batch entry (" + std::to_string(p.shape.batch) +
                    ")");
  }
  for (const int64_t length : p.cache_seqlens) {
    if (length < 1 || length > p.shape.seq_k) {
      throw Error(Error::Kind::invalid_argument,
                  "cache_seqlens: " + std::to_string(length) + " is outside [1, seq_k = " +
                      std::to_string(p.shape.seq_k) + "]");
    }
  }
}

// Passes of other ranks or GPUs than the problem's would compute it in another way than it says.
void check_passes(const Problem& problem, const DevicePasses& passes) {
  if (passes.ranks == problem.ranks && passes.gpus == problem.gpus) return;
  throw Error(Error::Kind::invalid_argument,
              "problem.ranks and gpus are " + std::to_string(problem.ranks) + " and " +
                  std::to_string(problem.gpus) + " but the device passes compute " +
                  std::to_string(passes.ranks) + " ranks over " + std::to_string(passes.gpus) +
                  " GPUs (context_parallel::device_passes(problem) gives the problem's)");
}

template <class T>
DeviceBuffer upload(const std::vector<T>& host, cudaStream_t stream) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.copy_from_host(host.data(), stream);
  return buffer;
}

}  // namespace

DevicePasses library_passes() {
  DevicePasses passes;
  passes.forward_workspace_bytes = [](const Problem& p) {
    return forward_workspace_size(varlen_args_shape(p), p.dtype, p.splits);
  };
  passes.backward_workspace_bytes = [](const Problem& p) {
    return backward_workspace_size(varlen_args_shape(p), p.dtype, p.deterministic);
  };
  passes.forward = [](const ForwardArgs& args, cudaStream_t stream) { forward(args, stream); };
  passes.backward = [](const BackwardArgs& args, cudaStream_t stream) { backward(args, stream); };
  return passes;
}

DeviceForwardExtras::DeviceForwardExtras(const Problem& problem, const void* k, const void* v,
                                         cudaStream_t stream) {
  check_cache_seqlens(problem);
  // Every check (page_layout() refuses what pages cannot hold) before anything is uploaded.
  const detail::PageLayout layout =
      problem.page_size != 0 ? detail::page_layout(problem) : detail::PageLayout{};
  // Pageable uploads may still read `lengths` and the block table after returning, and the
  // pools are filled from K and V: one synchronization at the end, before any of them may go.
  const std::vector<int32_t> lengths(problem.cache_seqlens.begin(), problem.cache_seqlens.end());
  if (!lengths.empty()) cache_seqlens_ = upload(lengths, stream);
  if (problem.page_size != 0) {
    block_table_ = upload(layout.block_table, stream);
    k_pages_ = DeviceBuffer(layout.pool_bytes);
    v_pages_ = DeviceBuffer(layout.pool_bytes);
    for (auto [dense, pool] : {std::pair{k, &k_pages_}, std::pair{v, &v_pages_}}) {
      pool->fill(kPoisonByte, stream);
      detail::scatter_into_pages(problem, dense, block_table_.as<int32_t>(),
                                 layout.pages_per_sequence, pool->data(), stream);
    }
    paged_.k_pages = k_pages_.data();
    paged_.v_pages = v_pages_.data();
    paged_.num_pages = layout.num_pages;
    paged_.page_size = problem.page_size;
    paged_.block_table = block_table_.as<int32_t>();
    paged_.block_table_stride = layout.pages_per_sequence;
  }
  if (!lengths.empty() || problem.page_size != 0) {
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (cache lengths, paged K/V)");
  }
}

void DeviceForwardExtras::apply(ForwardArgs& args) const {
  args.paged = paged_;
  args.cache_seqlens = cache_seqlens_.as<const int32_t>();
}

size_t DeviceForwardExtras::bytes() const {
  return k_pages_.bytes() + v_pages_.bytes() + block_table_.bytes() + cache_seqlens_.bytes();
}

HostForwardResult run_forward(const Problem& problem, const HostBytes& q, const HostBytes& k,
                              const HostBytes& v, const DevicePasses& passes) {
  const ProblemBytes bytes = checked_problem_bytes(problem, q, k, v);
  check_passes(problem, passes);
  require_device();

  Stream stream;
  DeviceInputs inputs(problem, bytes, q, k, v, stream.get());
  DeviceForwardOutputs fwd(bytes, stream.get());
  const DeviceBuffer workspace(passes.forward_workspace_bytes(problem));
  const DeviceForwardExtras extras(problem, inputs.k.data(), inputs.v.data(), stream.get());
  DenseTensors tensors = forward_tensors(inputs, fwd);
  tensors.workspace = workspace.data();
  tensors.workspace_bytes = workspace.bytes();
  ForwardArgs args = forward_args(problem, tensors);
  extras.apply(args);
  passes.forward(args, stream.get());
  HostForwardResult result = download_forward(fwd, bytes, stream.get());
  stream.synchronize();  // the downloads above are asynchronous
  return result;
}

HostForwardBackwardResult run_forward_backward(const Problem& problem, const HostBytes& q,
                                               const HostBytes& k, const HostBytes& v,
                                               const HostBytes& dout,
                                               const DevicePasses& passes) {
  if (problem.page_size != 0 || !problem.cache_seqlens.empty()) {
    throw Error(Error::Kind::invalid_argument,
                "page_size and cache_seqlens are forward only: the backward pass takes neither");
  }
  const ProblemBytes bytes = checked_problem_bytes(problem, q, k, v);
  check_host_size("dout", dout, bytes.q, problem.dtype);
  check_passes(problem, passes);
  require_device();

  Stream stream;
  DeviceInputs inputs(problem, bytes, q, k, v, stream.get());
  DeviceBuffer device_dout(bytes.q);
  device_dout.copy_from_host(dout.data(), stream.get());
  DeviceForwardOutputs fwd(bytes, stream.get());
  DeviceGradients grads(bytes, stream.get());
  // One workspace serves both passes, which run one after the other on the stream.
  DeviceBuffer workspace(std::max(passes.forward_workspace_bytes(problem),
                                  passes.backward_workspace_bytes(problem)));
  const DenseTensors tensors = backward_tensors(inputs, fwd, device_dout, grads, workspace);

  passes.forward(forward_args(problem, tensors), stream.get());
  passes.backward(backward_args(problem, tensors), stream.get());

  HostForwardBackwardResult result;
  result.forward = download_forward(fwd, bytes, stream.get());
  result.backward = download_gradients(grads, stream.get());
  stream.synchronize();  // the downloads above are asynchronous
  return result;
}

}  // namespace cuflash
