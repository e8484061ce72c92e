// Kernel-only timing with CUDA events on one stream.
//
// A pass is timed as: `warmup` untimed calls; one call between two events to estimate its
// duration; then `iters` samples, each N back-to-back calls whose events are all enqueued before
// the host waits once at the end. With graphs (the default) the N calls are captured once in a
// CUDA graph and each sample launches the graph: host launch overhead is then outside the
// measurement. N is chosen so that a sample lasts about kTargetSampleMs (1 with --cold or
// --no-graph, which times one direct call per sample as the seed protocol did). Each sample is
// reported per call (sample time / N). With --cold, a write of twice the L2 size precedes every
// sample, outside its events. If the calls cannot be captured, the N calls run directly between
// the events and the pass says timing "events".
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench/results.h"
#include "cuflash/device_buffer.h"

namespace cuflash::bench {

constexpr double kTargetSampleMs = 1.0;  // graph samples last about this long ...
constexpr int kMaxCallsPerSample = 100;  // ... with at most this many calls

struct TimingOptions {
  int warmup = 10;
  int iters = 30;
  bool graph = true;
  bool cold = false;
};

// Calls per sample for a call that took `estimate_ms`.
int calls_per_sample(const TimingOptions& options, double estimate_ms);

// Work to time: enqueues one call on the stream and returns (throws on errors).
using Launch = std::function<void(cudaStream_t)>;

class Timer {
 public:
  // Creates the stream and, with options.cold, the L2 flush buffer (twice the device's L2).
  explicit Timer(const TimingOptions& options);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Runs the protocol above on `launch` with `samples` samples (options.iters when 0); fills
  // samples_ms, round_samples (one round) and timing of `result`.
  void time(const Launch& launch, PassResult& result, int samples = 0);

 private:
  double time_once(const Launch& launch);
  std::vector<double> sample(const Launch& launch, cudaGraphExec_t graph, int calls, int samples);
  void flush_l2();

  TimingOptions options_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer flush_buffer_;  // with options.cold: twice the L2 size
};

}  // namespace cuflash::bench
