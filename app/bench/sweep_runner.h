// The sweep loop of `cuflash bench`, apart from the GPU: runs each case through a runner,
// hands every finished case to a callback (which rewrites the result package), shows progress,
// and stops cleanly on Ctrl-C after the current case.
#pragma once

#include <functional>
#include <vector>

#include "bench/results.h"

namespace cuflash::bench {

// Runs one case; records failures in the returned record rather than throwing.
using CaseRunner = std::function<CaseRecord(const Problem& c, size_t index)>;
// Called after every case with the records so far.
using CaseFinished = std::function<void(const std::vector<CaseRecord>& records)>;

struct SweepOutcome {
  std::vector<CaseRecord> records;
  bool interrupted = false;  // Ctrl-C: the cases after the current one did not run
  size_t not_run = 0;        // cases left out (interrupted, or after a fatal failure)
};

// `show_progress`: a progress line on stderr when it is a terminal (cli::Progress).
SweepOutcome run_sweep(const std::vector<Problem>& cases, const CaseRunner& run,
                       const CaseFinished& finished, bool show_progress);

// 130 when interrupted; otherwise the most serious failure's code: 3 for CUDA errors, out of
// memory and other errors, 2 for unsupported cases, 1 for failed verification; 0 for none.
int sweep_exit_code(const SweepOutcome& outcome);

}  // namespace cuflash::bench
