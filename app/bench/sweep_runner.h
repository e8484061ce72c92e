// The sweep loop of `cuflash bench`, apart from the GPU: runs each case through a runner,
// hands every finished case to a callback (which rewrites the result package), shows progress,
// and stops cleanly on Ctrl-C after the current case.
//
// With several rounds the loop visits every case once per round and each visit takes that
// round's share of the samples (samples_in_round()): a case's samples then span the whole run,
// so that their noise includes the GPU's slow drift (clocks, temperature) that separates two
// runs minutes apart, which back-to-back samples never see.
#pragma once

#include <functional>
#include <vector>

#include "bench/results.h"

namespace cuflash::bench {

// Runs one case in round `round` (0-based; verification and profiling belong to round 0);
// records failures in the returned record rather than throwing.
using CaseRunner = std::function<CaseRecord(const Problem& c, size_t index, int round)>;
// Called after every visit of a case with the records so far and the index of the case visited.
using CaseFinished = std::function<void(const std::vector<CaseRecord>& records, size_t index)>;

struct SweepOutcome {
  std::vector<CaseRecord> records;
  bool interrupted = false;  // Ctrl-C: the cases after the current one did not run
  bool stopped = false;      // a fatal failure ended the sweep
  size_t not_run = 0;        // cases never visited (interrupted, or after a fatal failure)
  int rounds_finished = 0;   // rounds in which every case (that had not failed) was visited
};

// The fewest samples a round may take (bench refuses --rounds above --iters / this): the spread
// of the rounds' medians counts as noise, and a median of fewer is one outlier away from it.
inline constexpr int kMinSamplesPerRound = 5;

// Samples round `round` of `rounds` takes out of `iters` (the first iters % rounds take one more).
int samples_in_round(int iters, int rounds, int round);

// Adds a later round's visit of a case to its record: each pass's samples and their count
// (PassResult::round_samples); a failure of the visit becomes the case's failure.
void add_round(CaseRecord& record, CaseRecord&& visit);

// `show_progress`: a progress line on stderr when it is a terminal (cli::Progress).
// `rounds` >= 1; a case that failed is not visited again.
SweepOutcome run_sweep(const std::vector<Problem>& cases, const CaseRunner& run,
                       const CaseFinished& finished, bool show_progress, int rounds = 1);

// 130 when interrupted; otherwise the most serious failure's code: 3 for CUDA errors, out of
// memory and other errors, 2 for unsupported cases, 1 for failed verification; 0 for none.
int sweep_exit_code(const SweepOutcome& outcome);

}  // namespace cuflash::bench
