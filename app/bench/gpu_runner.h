// Runs one benchmark case on the GPU: optional check against the CPU reference, fresh device
// inputs, device memory, then each pass timed on its own (timing.h). Failures are recorded in
// the case's record, classified (unsupported, out of memory, CUDA error, ...), never thrown.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "bench/results.h"
#include "bench/timing.h"

namespace cuflash::bench {

struct CaseSettings {
  TimingOptions timing;
  bool forward = true;   // time the forward pass
  bool backward = true;  // time the backward pass (forward state prepared outside the timing)
  bool verify = false;   // --verify (in round 0)
  int rounds = 1;        // visits of each case; timing.iters samples in all (sweep_runner.h)
  uint64_t seed = 0;     // case i uses seed + i
};

// Classifies the exception in flight during `stage` ("setup", "verify", "fwd", "bwd").
Failure classify_failure(const std::exception_ptr& error, const std::string& stage);

class GpuCaseRunner {
 public:
  explicit GpuCaseRunner(const CaseSettings& settings);
  // Case `index` in round `round`: the same inputs (seed + index) in every round.
  CaseRecord operator()(const Problem& c, size_t index, int round = 0);

 private:
  void verify(const Problem& c, uint64_t seed, CaseRecord& record) const;
  void time_passes(const Problem& c, uint64_t seed, int samples, CaseRecord& record,
                   std::string& stage);

  CaseSettings settings_;
  Timer timer_;
};

}  // namespace cuflash::bench
