#include "bench/sweep_runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "cli/exit_codes.h"
#include "cli/report.h"

namespace cuflash::bench {

namespace {

volatile sig_atomic_t g_interrupt_requested = 0;
struct sigaction g_previous_action {};

void on_interrupt(int) {
  g_interrupt_requested = 1;
  static const char message[] =
      "\ninterrupted: stopping after the current case (Ctrl-C again to quit at once)\n";
  if (write(STDERR_FILENO, message, sizeof message - 1) < 0) {
    // nothing else is safe to do in a signal handler
  }
}

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

InterruptGuard::InterruptGuard() {
  g_interrupt_requested = 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;  // the second Ctrl-C gets the default action
  sigaction(SIGINT, &action, &g_previous_action);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &g_previous_action, nullptr); }

bool InterruptGuard::requested() { return g_interrupt_requested != 0; }

SweepOutcome run_sweep(const std::vector<Problem>& cases, const CaseRunner& run,
                       const CaseFinished& finished, bool show_progress) {
  SweepOutcome outcome;
  const InterruptGuard guard;
  cli::Progress progress(cases.size(), show_progress);
  for (size_t i = 0; i < cases.size(); ++i) {
    progress.step(i, cli::case_label(cases[i]));
    outcome.records.push_back(run(cases[i], i));
    finished(outcome.records);
    const CaseRecord& last = outcome.records.back();
    const bool fatal = last.failure && last.failure->fatal;
    if (fatal || InterruptGuard::requested()) {
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
