// `cuflash verify`: compute each case on the GPU and compare every output with the float64 CPU
// reference. The tolerance is relative to a baseline: a plain (non-fused) attention computed in
// the same low precision, compared with the same reference. A case passes when our max abs error
// is at most 2x the baseline's plus a small floor relative to the values' size (FlashAttention's
// own rule, see reference/compare.h); NaN never passes.
#include <spdlog/spdlog.h>

#include "cli/attention_case.h"
#include "cli/backends.h"
#include "cli/exit_codes.h"
#include "commands/commands.h"
#include "cuflash/reference/baseline.h"
#include "cuflash/reference/compare.h"

namespace cuflash::cli {

namespace {

struct VerifyOptions {
  ProblemOptions problem;
  bool backward = false;
  std::optional<double> floor;  // overrides reference::default_floor(dtype)
};

// The baseline's outputs in the same form as a backend's.
AttentionResult compute_baseline(const AttentionCase& c, const CaseInputs& in, bool backward) {
  AttentionResult r;
  reference::ForwardResult fwd = reference::baseline::forward(c.problem, c.dtype, in.q, in.k, in.v);
  if (backward) {
    reference::Gradients g =
        reference::baseline::backward(c.problem, c.dtype, in.q, in.k, in.v, fwd, in.dout);
    r.dq = std::move(g.dq);
    r.dk = std::move(g.dk);
    r.dv = std::move(g.dv);
  }
  r.out = std::move(fwd.out);
  r.lse = std::move(fwd.lse);
  return r;
}

struct TensorCheck {
  const char* name;
  const std::vector<double>& ours;
  const std::vector<double>& baseline;
  const std::vector<double>& reference;
};

// Returns whether every tensor of the case passed.
bool check_case(const AttentionCase& c, const VerifyOptions& o, const AttentionResult& ours,
                const AttentionResult& base, const AttentionResult& ref,
                std::vector<Record>& records) {
  std::vector<TensorCheck> checks{{"o", ours.out, base.out, ref.out},
                                  {"lse", ours.lse, base.lse, ref.lse}};
  if (o.backward) {
    checks.push_back({"dq", ours.dq, base.dq, ref.dq});
    checks.push_back({"dk", ours.dk, base.dk, ref.dk});
    checks.push_back({"dv", ours.dv, base.dv, ref.dv});
  }
  const double floor = o.floor.value_or(reference::default_floor(c.dtype));
  bool all_pass = true;
  for (const TensorCheck& t : checks) {
    const reference::ErrorStats e = reference::compare(t.ours, t.reference);
    const reference::ErrorStats b = reference::compare(t.baseline, t.reference);
    const bool pass = reference::within_tolerance(e, b, floor);
    all_pass = all_pass && pass;
    Record r;
    r.add("case", c.name())
        .add("tensor", t.name)
        .add("max_abs", e.max_abs, 3)
        .add("rel_l2", e.rel_l2, 3)
        .add("base_max_abs", b.max_abs, 3)
        .add("base_rel_l2", b.rel_l2, 3)
        .add("tolerance", reference::tolerance(e, b, floor), 3)
        .add("nonfinite", e.nonfinite)
        .add("pass", pass);
    records.push_back(std::move(r));
  }
  return all_pass;
}

Record error_record(const AttentionCase& c, const std::string& reason) {
  Record r;
  r.add("case", c.name()).add("tensor", "-").add("error", reason).add("pass", false);
  return r;
}

int verify_command(const VerifyOptions& o, const GlobalOptions& global) {
  if (o.problem.has_input_files()) {
    throw UsageError("verify generates its inputs; --q/--k/--v belong to `cuflash run`");
  }
  const std::vector<AttentionCase> cases = expand_cases(o.problem);
  if (device_count() == 0) {
    throw RuntimeFailure(
        "verify compares the GPU kernels with the CPU reference and needs a CUDA GPU; none was "
        "found (`cuflash run --backend cpu` computes the reference alone)");
  }
  std::vector<Record> records;
  size_t failed = 0;
  Progress progress(cases.size(), !global.quiet);
  for (size_t i = 0; i < cases.size(); ++i) {
    const AttentionCase& c = cases[i];
    progress.step(i, c.name());
    try {
      const CaseInputs in = generate_inputs(c, o.problem.seed + i, o.backward);
      const AttentionResult ours = compute(Backend::cuda, c, in, o.backward);
      const AttentionResult ref = compute_reference(c, in, o.backward);
      const AttentionResult base = compute_baseline(c, in, o.backward);
      if (!check_case(c, o, ours, base, ref, records)) ++failed;
    } catch (const UsageError& e) {  // e.g. an unsupported head_dim: recorded, the sweep goes on
      records.push_back(error_record(c, e.what()));
      ++failed;
    }
  }
  progress.finish();
  print_records(records, global.output_format());
  if (failed > 0) {
    spdlog::error("{} of {} cases failed", failed, cases.size());
    return kExitVerificationFailed;
  }
  spdlog::info("all {} cases passed", cases.size());
  return kExitOk;
}

}  // namespace

void setup_verify(CLI::App& app, const GlobalOptions& global, CommandResult& result) {
  auto options = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Compare GPU results with the float64 CPU reference over one or many cases");
  cmd->footer(
      "Each case passes when, for every output, max|ours - ref| <= 2 * max|baseline - ref| + "
      "floor * max(1, max|ref|), where the baseline is a plain attention computed in the same precision. Exit code 1 "
      "when any case fails.\nExample: cuflash verify --seq 113,1024 --head-dim 32,64,128 --dtype "
      "fp16,bf16 --backward\n" + std::string(kExitCodeHelp));
  add_problem_options(*cmd, options->problem, /*allow_lists=*/true);
  cmd->add_flag("--backward", options->backward, "Also check dQ, dK, dV");
  cmd->add_option("--floor", options->floor,
                  "Absolute error floor added to the tolerance (default: per dtype)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback(
      [options, &global, &result] { result.exit_code = verify_command(*options, global); });
}

}  // namespace cuflash::cli
