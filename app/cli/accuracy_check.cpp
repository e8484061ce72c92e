#include "cli/accuracy_check.h"

#include "cli/backends.h"
#include "cuflash/reference/baseline.h"

namespace cuflash::cli {

namespace {

// The baseline's outputs in the same form as the reference's.
ReferenceResult compute_baseline(const Problem& p, const ReferenceInputs& in, bool backward) {
  ReferenceResult r;
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
  const ReferenceInputs values = reference_inputs(p, in);
  const ReferenceResult ref = compute_reference(p, values, backward);
  const ReferenceResult base = compute_baseline(p, values, backward);
  const auto verdict = [&](const char* name, const io::NpyArray& got,
                           const std::vector<double>& base_values,
                           const std::vector<double>& ref_values) {
    return judge(name, bhsd_values(p, got), base_values, ref_values, floor);
  };
  std::vector<TensorVerdict> verdicts{verdict("o", ours.out, base.out, ref.out),
                                      verdict("lse", ours.lse, base.lse, ref.lse)};
  if (backward) {
    verdicts.push_back(verdict("dq", ours.dq, base.dq, ref.dq));
    verdicts.push_back(verdict("dk", ours.dk, base.dk, ref.dk));
    verdicts.push_back(verdict("dv", ours.dv, base.dv, ref.dv));
  }
  return verdicts;
}

}  // namespace cuflash::cli
