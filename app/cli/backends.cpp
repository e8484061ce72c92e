#include "cli/backends.h"

#include <chrono>

#include "cli/exit_codes.h"
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
HostBytes to_device_bytes(const AttentionCase& c, const std::vector<double>& bhsd, int64_t heads,
                          int64_t seq) {
  const reference::Problem& p = c.problem;
  std::vector<double> in_layout = bhsd_to_layout(bhsd, p.batch, heads, seq, p.head_dim, c.layout);
  io::NpyArray array = io::from_double(in_layout, {static_cast<int64_t>(in_layout.size())},
                                       io::element_type(c.dtype));
  return std::move(array.bytes);
}

std::vector<double> from_device_bytes(const AttentionCase& c, const HostBytes& bytes,
                                      int64_t heads, int64_t seq) {
  const reference::Problem& p = c.problem;
  io::NpyArray array;
  array.type = io::element_type(c.dtype);
  array.shape = {static_cast<int64_t>(bytes.size() / io::element_size(array.type))};
  array.bytes = bytes;
  return layout_to_bhsd(io::to_double(array), p.batch, heads, seq, p.head_dim, c.layout);
}

HostProblem host_problem(const AttentionCase& c) {
  HostProblem hp;
  hp.shape = c.shape();
  hp.dtype = c.dtype;
  hp.mask = c.problem.mask;
  hp.scale = static_cast<float>(c.problem.scale);
  hp.layout = c.layout;
  return hp;
}

// Maps library errors to the CLI's error classes (and so to exit codes).
[[noreturn]] void rethrow_as_cli_error(const Error& e) {
  switch (e.kind()) {
    case Error::Kind::invalid_argument:
    case Error::Kind::unsupported:
      throw UsageError(e.what());
    case Error::Kind::cuda:
    case Error::Kind::out_of_memory:
    case Error::Kind::no_device:
      break;
  }
  throw RuntimeFailure(e.what());
}

AttentionResult compute_cuda(const AttentionCase& c, const CaseInputs& in, bool backward) {
  const reference::Problem& p = c.problem;
  const HostBytes q = to_device_bytes(c, in.q, p.heads, p.seq_q);
  const HostBytes k = to_device_bytes(c, in.k, p.heads_kv, p.seq_k);
  const HostBytes v = to_device_bytes(c, in.v, p.heads_kv, p.seq_k);
  AttentionResult r;
  const Clock::time_point start = Clock::now();
  try {
    HostForwardResult fwd;
    if (backward) {
      HostForwardBackwardResult both =
          run_forward_backward(host_problem(c), q, k, v, to_device_bytes(c, in.dout, p.heads, p.seq_q));
      fwd = std::move(both.forward);
      r.dq = from_device_bytes(c, both.backward.dq, p.heads, p.seq_q);
      r.dk = from_device_bytes(c, both.backward.dk, p.heads_kv, p.seq_k);
      r.dv = from_device_bytes(c, both.backward.dv, p.heads_kv, p.seq_k);
    } else {
      fwd = run_forward(host_problem(c), q, k, v);
    }
    r.out = from_device_bytes(c, fwd.out, p.heads, p.seq_q);
    r.lse.assign(fwd.lse.begin(), fwd.lse.end());
  } catch (const Error& e) {
    rethrow_as_cli_error(e);
  }
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

AttentionResult compute_reference(const AttentionCase& c, const CaseInputs& in, bool backward) {
  AttentionResult r;
  const Clock::time_point start = Clock::now();
  try {
    reference::ForwardResult fwd = reference::forward(c.problem, in.q, in.k, in.v);
    if (backward) {
      reference::Gradients g = reference::backward(c.problem, in.q, in.k, in.v, fwd, in.dout);
      r.dq = std::move(g.dq);
      r.dk = std::move(g.dk);
      r.dv = std::move(g.dv);
    }
    r.out = std::move(fwd.out);
    r.lse = std::move(fwd.lse);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  } catch (const std::bad_alloc&) {
    throw RuntimeFailure("out of host memory computing the CPU reference for " + c.name());
  }
  r.seconds = seconds_since(start);
  return r;
}

AttentionResult compute(Backend backend, const AttentionCase& c, const CaseInputs& inputs,
                        bool backward) {
  if (backend == Backend::cuda) return compute_cuda(c, inputs, backward);
  // The CPU backend stores its outputs in the case's dtype, as the GPU does.
  AttentionResult r = compute_reference(c, inputs, backward);
  for (std::vector<double>* t : {&r.out, &r.dq, &r.dk, &r.dv}) round_to_dtype(*t, c.dtype);
  round_to_dtype(r.lse, DType::fp32);
  return r;
}

}  // namespace cuflash::cli
