#include "bench/sweep_runner.h"

#include <algorithm>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/report.h"

namespace cuflash::bench {

namespace {

int failure_code(FailureKind kind) {
  switch (kind) {
    case FailureKind::verification_failed: return cli::kExitVerificationFailed;
    case FailureKind::unsupported: return cli::kExitBadInput;
    case FailureKind::out_of_memory:
    case FailureKind::cuda_error:
    case FailureKind::error: return cli::kExitRuntimeFailure;
  }
  return cli::kExitRuntimeFailure;
}

}  // namespace

SweepOutcome run_sweep(const std::vector<Problem>& cases, const CaseRunner& run,
                       const CaseFinished& finished, bool show_progress) {
  SweepOutcome outcome;
  const cli::InterruptScope interrupts(
      "\ninterrupted: stopping after the current case (Ctrl-C again to quit at once)\n",
      cli::SecondSignal::default_action);
  cli::Progress progress(cases.size(), show_progress);
  for (size_t i = 0; i < cases.size(); ++i) {
    progress.step(i, cli::case_label(cases[i]));
    outcome.records.push_back(run(cases[i], i));
    finished(outcome.records);
    const CaseRecord& last = outcome.records.back();
    const bool fatal = last.failure && last.failure->fatal;
    if (fatal || cli::interrupt_requested()) {
      outcome.interrupted = !fatal;
      outcome.not_run = cases.size() - i - 1;
      break;
    }
  }
  progress.finish();
  return outcome;
}

int sweep_exit_code(const SweepOutcome& outcome) {
  if (outcome.interrupted) return cli::kExitInterrupted;
  int code = cli::kExitOk;
  // Higher codes are the more serious failures (3 > 2 > 1).
  for (const CaseRecord& r : outcome.records) {
    if (r.failure) code = std::max(code, failure_code(r.failure->kind));
  }
  return code;
}

}  // namespace cuflash::bench
