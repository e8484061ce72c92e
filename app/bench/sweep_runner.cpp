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

int samples_in_round(int iters, int rounds, int round) {
  return iters / rounds + (round < iters % rounds ? 1 : 0);
}

void add_round(CaseRecord& record, CaseRecord&& visit) {
  for (PassResult& p : visit.passes) {
    const auto same = std::find_if(record.passes.begin(), record.passes.end(),
                                   [&](const PassResult& q) { return q.pass == p.pass; });
    if (same == record.passes.end()) {
      record.passes.push_back(std::move(p));
      continue;
    }
    same->samples_ms.insert(same->samples_ms.end(), p.samples_ms.begin(), p.samples_ms.end());
    same->round_samples.push_back(static_cast<int>(p.samples_ms.size()));
    same->sample_spans.insert(same->sample_spans.end(), p.sample_spans.begin(),
                              p.sample_spans.end());
  }
  if (visit.failure) record.failure = std::move(visit.failure);
}

SweepOutcome run_sweep(const std::vector<Problem>& cases, const CaseRunner& run,
                       const CaseFinished& finished, bool show_progress, int rounds) {
  SweepOutcome outcome;
  const cli::InterruptScope interrupts(
      "\ninterrupted: stopping after the current case (Ctrl-C again to quit at once)\n",
      cli::SecondSignal::default_action);
  cli::Progress progress(cases.size() * static_cast<size_t>(rounds), show_progress);
  std::vector<CaseRecord>& records = outcome.records;
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (round > 0 && records[i].failure) continue;
      progress.step(static_cast<size_t>(round) * cases.size() + i, cli::case_label(cases[i]));
      if (round == 0) {
        records.push_back(run(cases[i], i, round));
      } else {
        add_round(records[i], run(cases[i], i, round));
      }
      finished(records, i);
      const bool fatal = records[i].failure && records[i].failure->fatal;
      if (fatal || cli::interrupt_requested()) {
        outcome.interrupted = !fatal;
        outcome.stopped = fatal;
        outcome.not_run = cases.size() - records.size();
        progress.finish();
        return outcome;
      }
    }
    outcome.rounds_finished = round + 1;
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
