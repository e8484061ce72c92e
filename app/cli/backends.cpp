#include "cli/backends.h"

#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "cli/exit_codes.h"
#include "cuflash/attention.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/error.h"
#include "cuflash/host_runner.h"
#include "cuflash/io/convert.h"
#include "cuflash/reference/attention_ref.h"

namespace cuflash::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An fp32 array of `shape` holding `values`.
io::NpyArray float_array(const std::vector<float>& values, std::vector<int64_t> shape) {
  io::NpyArray array;
  array.type = io::ElementType::f32;
  array.shape = std::move(shape);
  array.bytes.resize(values.size() * sizeof(float));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

// `bytes` (moved, not copied) as a stored tensor shaped like `like`.
io::NpyArray stored_like(const io::NpyArray& like, HostBytes&& bytes) {
  io::NpyArray array;
  array.type = like.type;
  array.shape = like.shape;
  array.bytes = std::move(bytes);
  return array;
}

std::vector<int64_t> lse_shape(const Problem& p) {
  if (p.varlen()) return {p.shape.heads, p.shape.seq_q};  // [heads, total_q]
  return {p.shape.batch, p.shape.heads, p.shape.seq_q};
}

// The stored inputs go to the device as they are: the kernels read either layout. The case's
// context-parallel ranks, if any, choose the passes.
AttentionResult compute_cuda(const Problem& p, const CaseInputs& in, bool backward) {
  AttentionResult r;
  const LaunchRecord record;
  const Clock::time_point start = Clock::now();
  const DevicePasses passes = context_parallel::device_passes(p);
  HostForwardResult fwd;
  if (backward) {
    HostForwardBackwardResult both = run_forward_backward(p, in.q.bytes, in.k.bytes, in.v.bytes,
                                                          in.dout.bytes, passes);
    fwd = std::move(both.forward);
    r.dq = stored_like(in.q, std::move(both.backward.dq));
    r.dk = stored_like(in.k, std::move(both.backward.dk));
    r.dv = stored_like(in.v, std::move(both.backward.dv));
  } else {
    fwd = run_forward(p, in.q.bytes, in.k.bytes, in.v.bytes, passes);
  }
  r.out = stored_like(in.q, std::move(fwd.out));
  r.lse = float_array(fwd.lse, lse_shape(p));
  r.seconds = seconds_since(start);
  r.launches = record.launches();
  return r;
}

// The reference's float64 outputs stored as the GPU stores them (the case's dtype and layout),
// each float64 tensor freed as soon as it is converted.
AttentionResult stored_outputs(const Problem& p, ReferenceResult&& ref, const CaseInputs& in) {
  const auto store = [&p](std::vector<double>& values, const io::NpyArray& like) {
    std::vector<int64_t> bhsd_shape = like.shape;  // like's stored shape in bhsd order
    if (p.layout == Layout::bshd) std::swap(bhsd_shape[1], bhsd_shape[2]);
    if (p.layout == Layout::thd) bhsd_shape = {1, like.shape[1], like.shape[0], like.shape[2]};
    io::NpyArray array = io::from_bhsd_values(values, bhsd_shape, p.layout, like.type);
    std::vector<double>().swap(values);
    return array;
  };
  AttentionResult r;
  r.out = store(ref.out, in.q);
  r.lse = io::from_double(ref.lse, lse_shape(p), io::ElementType::f32);
  if (!ref.dq.empty()) {
    r.dq = store(ref.dq, in.q);
    r.dk = store(ref.dk, in.k);
    r.dv = store(ref.dv, in.v);
  }
  r.seconds = ref.seconds;
  return r;
}

}  // namespace

std::vector<std::string> describe_launches(const std::vector<KernelLaunch>& launches) {
  std::vector<std::string> lines;
  for (size_t first = 0; first < launches.size();) {
    const KernelLaunch& launch = launches[first];
    size_t end = first + 1;
    while (end < launches.size() && launches[end].call == launch.call &&
           launches[end].kernel == launch.kernel) {
      ++end;
    }
    std::string line = launch.call + ": " + (launch.kernel.empty() ? "?" : launch.kernel) +
                       ", grid " + std::to_string(launch.grid[0]) + " x " +
                       std::to_string(launch.grid[1]) + " x " + std::to_string(launch.grid[2]) +
                       " of " + std::to_string(launch.threads) + " threads, " +
                       std::to_string(launch.shared_bytes) + " bytes of shared memory";
    if (end - first > 1) {
      line += " (" + std::to_string(end - first) + " launches, the first's grid)";
    }
    lines.push_back(std::move(line));
    first = end;
  }
  return lines;
}

Backend resolve_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  const bool have_gpu = device_count() > 0;
  if (name == "cuda" && !have_gpu) {
    throw RuntimeFailure("--backend cuda: no CUDA GPU found; use --backend cpu for the CPU reference");
  }
  return have_gpu ? Backend::cuda : Backend::cpu;
}

const char* to_string(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }

void require_gpu_support(const Problem& p, const std::string& head_dim_source) {
  if (is_supported_head_dim(p.shape.head_dim)) return;
  const std::vector<int> supported = supported_head_dims();
  throw UsageError(head_dim_source + " " + std::to_string(p.shape.head_dim) +
                   ": the CUDA kernels take a head_dim that is a multiple of " +
                   std::to_string(supported.front()) + " from " +
                   std::to_string(supported.front()) + " to " + std::to_string(supported.back()) +
                   "; the CPU backend (--backend cpu) takes any head_dim");
}

ReferenceResult compute_reference(const Problem& p, const ReferenceInputs& in, bool backward,
                                  const StageProgress& progress) {
  ReferenceResult r;
  const Clock::time_point start = Clock::now();
  const auto stage = [&](const char* name) -> reference::ProgressCallback {
    if (!progress) return {};
    return [&progress, name](int64_t done, int64_t total) { return progress(name, done, total); };
  };
  try {
    reference::ForwardResult fwd = reference::forward(p, in.q, in.k, in.v, stage("forward"));
    if (backward) {
      reference::Gradients g =
          reference::backward(p, in.q, in.k, in.v, fwd, in.dout, stage("backward"));
      r.dq = std::move(g.dq);
      r.dk = std::move(g.dk);
      r.dv = std::move(g.dv);
    }
    r.out = std::move(fwd.out);
    r.lse = std::move(fwd.lse);
  } catch (const reference::Cancelled&) {
    throw Interrupted("interrupted while computing on the CPU reference");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  } catch (const std::bad_alloc&) {
    throw RuntimeFailure("out of host memory computing the CPU reference for " + case_label(p));
  }
  r.seconds = seconds_since(start);
  return r;
}

AttentionResult compute(Backend backend, const Problem& p, const CaseInputs& inputs,
                        bool backward, const StageProgress& progress) {
  if (backend == Backend::cuda) return compute_cuda(p, inputs, backward);
  ReferenceResult ref;
  try {
    ref = compute_reference(p, reference_inputs(p, inputs), backward, progress);
  } catch (const std::bad_alloc&) {
    throw RuntimeFailure("out of host memory computing the CPU reference for " + case_label(p));
  }
  // The CPU backend stores its outputs in the problem's dtype, as the GPU does.
  return stored_outputs(p, std::move(ref), inputs);
}

std::vector<double> bhsd_values(const Problem& p, const io::NpyArray& stored) {
  // LSE has no head_dim and no layout; told apart by its shape, not its rank (a varlen batch's
  // LSE [heads, total_q] has 2 dimensions and its outputs [tokens, heads, head_dim] 3).
  if (stored.shape == lse_shape(p)) return io::to_double(stored);
  return io::to_bhsd_values(stored, p.layout);
}

}  // namespace cuflash::cli
