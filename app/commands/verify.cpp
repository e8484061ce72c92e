// `cuflash verify`: compute each case on the GPU and compare every output with the float64 CPU
// reference. The tolerance is relative to a baseline: a plain (non-fused) attention computed in
// the same low precision, compared with the same reference. A case passes when our max abs error
// is at most 2x the baseline's plus a small floor relative to the values' size (FlashAttention's
// own rule, see reference/compare.h); NaN never passes.
#include <cmath>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "cli/attention_case.h"
#include "cli/backends.h"
#include "cli/accuracy_check.h"
#include "cli/exit_codes.h"
#include "cli/memory_check.h"
#include "bench/stats.h"
#include "bench/verify_before_timing.h"
#include "commands/commands.h"
#include "cuflash/attention.h"

namespace cuflash::cli {

namespace {

struct VerifyOptions {
  ProblemOptions problem;
  bool backward = false;
  std::optional<double> floor;  // overrides reference::default_floor(dtype)
  bool no_size_limit = false;   // check cases however long the CPU reference takes
};

// Refuses, before anything is computed, a case whose CPU reference would take minutes to hours
// (the limit of `bench --verify`, which skips such cases instead).
void require_reference_size(const std::vector<Problem>& cases, const VerifyOptions& o) {
  if (o.no_size_limit) return;
  for (const Problem& p : cases) {
    if (bench::verify_fits(p)) continue;
    const AttentionShape& s = p.shape;
    const double work = double(s.batch) * double(s.heads) * bench::visible_pairs(p) *
                        double(s.head_dim);
    char text[64];
    std::snprintf(text, sizeof text, "%.3g", work);
    throw UsageError(case_label(p) + ": " + text + " multiply-adds per product are above the " +
                     "2^33 that the CPU reference checks in seconds; make the case smaller or " +
                     "add --no-size-limit to wait for it");
  }
}

// One record per tensor; returns whether all passed.
bool record_verdicts(const Problem& p, const std::vector<TensorVerdict>& verdicts,
                     std::vector<Record>& records) {
  bool all_pass = true;
  for (const TensorVerdict& v : verdicts) {
    all_pass = all_pass && v.pass;
    Record r;
    r.add("case", case_label(p))
        .add("tensor", v.tensor)
        .add("max_abs", v.ours.max_abs, 3)
        .add("rel_l2", v.ours.rel_l2, 3)
        .add("base_max_abs", v.baseline.max_abs, 3)
        .add("base_rel_l2", v.baseline.rel_l2, 3)
        .add("tolerance", v.tolerance, 3)
        .add("nonfinite", v.ours.nonfinite)
        .add("pass", v.pass);
    records.push_back(std::move(r));
  }
  return all_pass;
}

Record error_record(const Problem& p, const std::string& reason) {
  Record r;
  r.add("case", case_label(p)).add("tensor", "-").add("error", reason).add("pass", false);
  return r;
}

int verify_command(const VerifyOptions& o, const GlobalOptions& global) {
  refuse_input_files(o.problem, "verify");
  const std::vector<Problem> cases = expand_cases(o.problem);
  if (o.backward) {
    for (const Problem& p : cases) require_forward_only(p, "--backward");
  }
  require_reference_size(cases, o);
  if (o.problem.deterministic && !o.backward) {
    spdlog::warn("--deterministic orders the backward pass only; without --backward it changes "
                 "nothing");
  }
  if (device_count() == 0) {
    // A head_dim no kernel takes is the input's fault on any machine: said first (exit 2), as
    // `run --backend cuda` does; with a GPU such a case is recorded and the others run.
    for (const Problem& p : cases) require_gpu_support(p);
    throw RuntimeFailure(
        "verify compares the GPU kernels with the CPU reference and needs a CUDA GPU; none was "
        "found (`cuflash run --backend cpu` computes the reference alone)");
  }
  for (const Problem& p : cases) check_run_memory(p, o.backward, Backend::cpu);
  std::vector<Record> records;
  size_t failed = 0;   // cases outside the tolerance
  size_t refused = 0;  // cases the kernels do not support
  Progress progress(cases.size(), !global.quiet);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Problem& p = cases[i];
    progress.step(i, case_label(p));
    try {
      const CaseInputs in = generate_inputs(p, o.problem.seed + i, o.backward);
      const double floor = o.floor.value_or(reference::default_floor(p.dtype));
      if (!record_verdicts(p, check_accuracy(p, in, o.backward, floor), records)) ++failed;
    } catch (const UsageError& e) {  // an invalid problem: recorded, the sweep goes on
      records.push_back(error_record(p, e.what()));
      ++refused;
    } catch (const Error& e) {  // e.g. an unsupported head_dim: recorded likewise
      if (!is_caller_error(e.kind())) throw;  // the machine's failure ends the command
      records.push_back(error_record(p, e.what()));
      ++refused;
    }
  }
  progress.finish();
  print_records(records, global.output_format());
  if (failed > 0) {
    spdlog::error("{} of {} cases failed verification", failed, cases.size());
    return kExitVerificationFailed;
  }
  if (refused > 0) {
    spdlog::error("{} of {} cases are not supported", refused, cases.size());
    return kExitBadInput;
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
      "floor * max(1, max|ref|), where the baseline is a plain attention computed in the same "
      "precision.\nExample: cuflash verify --seq 113,1024 --head-dim 32,64,128 --dtype "
      "fp16,bf16 --backward\n" +
      std::string(kVerifyExitCodeHelp));
  add_problem_options(*cmd, options->problem, /*allow_lists=*/true,
                      /*reads_input_files=*/false);
  cmd->add_flag("--backward", options->backward, "Also check dQ, dK, dV");
  cmd->add_flag("--no-size-limit", options->no_size_limit,
                "Also check cases above 2^33 multiply-adds per product (the CPU reference may "
                "take minutes to hours)");
  cmd->add_option("--floor", options->floor,
                  "Error floor of the tolerance, relative to max(1, max|ref|) (default: per dtype)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              size_t used = 0;
              const double value = std::stod(text, &used);
              if (used == text.size() && std::isfinite(value) && value >= 0) return {};
            } catch (const std::exception&) {
            }
            return "'" + text + "' is not a non-negative finite number";
          },
          "NONNEGATIVE"));
  cmd->callback(
      [options, &global, &result] { result.exit_code = verify_command(*options, global); });
}

}  // namespace cuflash::cli
