#include "cuflash/reference/baseline.h"

#include "attention_engine.h"
#include "per_sequence.h"

namespace cuflash::reference::baseline {

namespace {

// The values as the emulated implementation holds them: float, rounded to the dtype.
std::vector<float> to_low_precision(const engine::LowPrecision& policy,
                                    const std::vector<double>& values) {
  std::vector<float> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    rounded[i] = policy.round(static_cast<float>(values[i]));
  }
  return rounded;
}

}  // namespace

ForwardResult forward(const Problem& p, const std::vector<double>& q,
                      const std::vector<double>& k, const std::vector<double>& v) {
  engine::check_forward_inputs(p, q, k, v);
  if (p.varlen()) {
    return engine::forward_varlen(
        p, q, k, v, {},
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv, const ProgressCallback&) {
          return forward(sub, sq, sk, sv);
        },
        [](const Problem&) { return int64_t{1}; });
  }
  if (!p.cache_seqlens.empty()) {
    return engine::forward_per_sequence(
        p, q, k, v, {},
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv, const ProgressCallback&) {
          return forward(sub, sq, sk, sv);
        },
        [](const Problem&) { return int64_t{1}; });
  }
  const engine::LowPrecision policy{p.dtype};
  const std::vector<float> q_low = to_low_precision(policy, q);
  const std::vector<float> k_low = to_low_precision(policy, k);
  const std::vector<float> v_low = to_low_precision(policy, v);
  engine::Inputs<float> inputs;
  inputs.q = q_low.data();
  inputs.k = k_low.data();
  inputs.v = v_low.data();

  ForwardResult result;
  result.out.resize(p.shape.q_elements());
  result.lse.resize(p.shape.lse_elements());
  engine::run_forward(policy, p, inputs, result.out.data(), result.lse.data());
  return result;
}

Gradients backward(const Problem& p, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v,
                   const ForwardResult& fwd, const std::vector<double>& dout) {
  engine::check_backward_inputs(p, q, k, v, fwd, dout);
  if (p.varlen()) {
    return engine::backward_varlen(
        p, q, k, v, fwd, dout, {},
        [](const Problem& sub, const std::vector<double>& sq, const std::vector<double>& sk,
           const std::vector<double>& sv, const ForwardResult& sub_fwd,
           const std::vector<double>& sub_dout, const ProgressCallback&) {
          return baseline::backward(sub, sq, sk, sv, sub_fwd, sub_dout);
        },
        [](const Problem&) { return int64_t{1}; });
  }
  const engine::LowPrecision policy{p.dtype};
  const std::vector<float> q_low = to_low_precision(policy, q);
  const std::vector<float> k_low = to_low_precision(policy, k);
  const std::vector<float> v_low = to_low_precision(policy, v);
  const std::vector<float> out_low = to_low_precision(policy, fwd.out);
  const std::vector<float> dout_low = to_low_precision(policy, dout);
  // LSE is float32 whatever the dtype.
  const std::vector<float> lse_low(fwd.lse.begin(), fwd.lse.end());
  const engine::Inputs<float> inputs{q_low.data(),   k_low.data(),    v_low.data(),
                                     out_low.data(), dout_low.data(), lse_low.data()};

  Gradients grads;
  grads.dq.resize(p.shape.q_elements());
  grads.dk.resize(p.shape.kv_elements());
  grads.dv.resize(p.shape.kv_elements());
  engine::run_backward(policy, p, inputs, grads.dq.data(), grads.dk.data(), grads.dv.data());
  return grads;
}

}  // namespace cuflash::reference::baseline
