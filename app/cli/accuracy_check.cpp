#include "cli/accuracy_check.h"

#include "cli/backends.h"
#include "cuflash/reference/baseline.h"

namespace cuflash::cli {

namespace {

// The baseline's outputs in the same form as a backend's.
AttentionResult compute_baseline(const Problem& p, const CaseInputs& in, bool backward) {
  AttentionResult r;
  reference::ForwardResult fwd = reference::baseline::forward(p, in.q, in.k, in.v);
  if (backward) {
    reference::Gradients g = reference::baseline::backward(p, in.q, in.k, in.v, fwd, in.dout);
    r.dq = std::move(g.dq);
    r.dk = std::move(g.dk);
    r.dv = std::move(g.dv);
  }
  r.out = std::move(fwd.out);
  r.lse = std::move(fwd.lse);
  return r;
}

TensorVerdict judge(const char* tensor, const std::vector<double>& ours,
                    const std::vector<double>& baseline, const std::vector<double>& reference,
                    double floor) {
  TensorVerdict v;
  v.tensor = tensor;
  v.ours = reference::compare(ours, reference);
  v.baseline = reference::compare(baseline, reference);
  v.tolerance = reference::tolerance(v.ours, v.baseline, floor);
  v.pass = reference::within_tolerance(v.ours, v.baseline, floor);
  return v;
}

}  // namespace

std::vector<TensorVerdict> check_accuracy(const Problem& p, const CaseInputs& in, bool backward,
                                      double floor) {
  const AttentionResult ours = compute(Backend::cuda, p, in, backward);
  const AttentionResult ref = compute_reference(p, in, backward);
  const AttentionResult base = compute_baseline(p, in, backward);
  std::vector<TensorVerdict> verdicts{judge("o", ours.out, base.out, ref.out, floor),
                                      judge("lse", ours.lse, base.lse, ref.lse, floor)};
  if (backward) {
    verdicts.push_back(judge("dq", ours.dq, base.dq, ref.dq, floor));
    verdicts.push_back(judge("dk", ours.dk, base.dk, ref.dk, floor));
    verdicts.push_back(judge("dv", ours.dv, base.dv, ref.dv, floor));
  }
  return verdicts;
}

}  // namespace cuflash::cli
