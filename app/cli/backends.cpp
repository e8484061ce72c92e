#include "cli/backends.h"

#include <chrono>

#include "cli/exit_codes.h"
#include "cuflash/attention.h"
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

// Values (bhsd) -> raw dtype elements in the case's layout, ready for the GPU.
HostBytes to_device_bytes(const Problem& p, const std::vector<double>& bhsd, int64_t heads,
                          int64_t seq) {
  const AttentionShape& s = p.shape;
  std::vector<double> in_layout = bhsd_to_layout(bhsd, s.batch, heads, seq, s.head_dim, p.layout);
  io::NpyArray array = io::from_double(in_layout, {static_cast<int64_t>(in_layout.size())},
                                       io::element_type(p.dtype));
  return std::move(array.bytes);
}

std::vector<double> from_device_bytes(const Problem& p, const HostBytes& bytes, int64_t heads,
                                      int64_t seq) {
  const AttentionShape& s = p.shape;
  io::NpyArray array;
  array.type = io::element_type(p.dtype);
  array.shape = {static_cast<int64_t>(bytes.size() / io::element_size(array.type))};
  array.bytes = bytes;
  return layout_to_bhsd(io::to_double(array), s.batch, heads, seq, s.head_dim, p.layout);
}

AttentionResult compute_cuda(const Problem& p, const CaseInputs& in, bool backward) {
  const AttentionShape& s = p.shape;
  const HostBytes q = to_device_bytes(p, in.q, s.heads, s.seq_q);
  const HostBytes k = to_device_bytes(p, in.k, s.heads_kv, s.seq_k);
  const HostBytes v = to_device_bytes(p, in.v, s.heads_kv, s.seq_k);
  AttentionResult r;
  const Clock::time_point start = Clock::now();
  HostForwardResult fwd;
  if (backward) {
    HostForwardBackwardResult both =
        run_forward_backward(p, q, k, v, to_device_bytes(p, in.dout, s.heads, s.seq_q));
    fwd = std::move(both.forward);
    r.dq = from_device_bytes(p, both.backward.dq, s.heads, s.seq_q);
    r.dk = from_device_bytes(p, both.backward.dk, s.heads_kv, s.seq_k);
    r.dv = from_device_bytes(p, both.backward.dv, s.heads_kv, s.seq_k);
  } else {
    fwd = run_forward(p, q, k, v);
  }
  r.out = from_device_bytes(p, fwd.out, s.heads, s.seq_q);
  r.lse.assign(fwd.lse.begin(), fwd.lse.end());
  r.seconds = seconds_since(start);
  return r;
}

}  // namespace

Backend resolve_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  const bool have_gpu = device_count() > 0;
  if (name == "cuda" && !have_gpu) {
    throw RuntimeFailure("--backend cuda: no CUDA GPU found; use --backend cpu for the CPU reference");
  }
  return have_gpu ? Backend::cuda : Backend::cpu;
}

const char* to_string(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }

void require_gpu_support(const Problem& p) {
  if (is_supported_head_dim(p.shape.head_dim)) return;
  std::string dims;
  const std::vector<int> supported = supported_head_dims();
  for (size_t i = 0; i < supported.size(); ++i) {
    dims += (i == 0 ? "" : i + 1 == supported.size() ? " or " : ", ") +
            std::to_string(supported[i]);
  }
  throw UsageError("-d/--head-dim " + std::to_string(p.shape.head_dim) +
                   ": the CUDA kernels take head_dim " + dims +
                   "; the CPU backend (--backend cpu) takes any head_dim");
}

AttentionResult compute_reference(const Problem& p, const CaseInputs& in, bool backward,
                                  const StageProgress& progress) {
  AttentionResult r;
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
  // The CPU backend stores its outputs in the problem's dtype, as the GPU does.
  AttentionResult r = compute_reference(p, inputs, backward, progress);
  for (std::vector<double>* t : {&r.out, &r.dq, &r.dk, &r.dv}) round_to_dtype(*t, p.dtype);
  round_to_dtype(r.lse, DType::fp32);
  return r;
}

}  // namespace cuflash::cli
