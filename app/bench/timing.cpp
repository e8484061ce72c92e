#include "bench/timing.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <spdlog/spdlog.h>

#include "bench/metadata.h"  // unix_seconds
#include "cuflash/cuda_error.h"

namespace cuflash::bench {

namespace {

// `count` pairs of timing events, destroyed with the object.
class EventPairs {
 public:
  explicit EventPairs(int count) : events_(2 * static_cast<size_t>(count), nullptr) {
    for (cudaEvent_t& e : events_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~EventPairs() {
    for (cudaEvent_t e : events_) {
      if (e) cudaEventDestroy(e);
    }
  }
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;

  cudaEvent_t start(int i) const { return events_[2 * size_t(i)]; }
  cudaEvent_t stop(int i) const { return events_[2 * size_t(i) + 1]; }

  double elapsed_ms(int i) const {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start(i), stop(i)), "cudaEventElapsedTime");
    return ms;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  cudaGraphExec_t get() const { return exec_; }
  cudaGraphExec_t* out() { return &exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// Says once per process that graphs could not be used, and why.
void warn_no_graph(const std::string& why) {
  static bool warned = false;
  if (warned) return;
  warned = true;
  spdlog::warn("CUDA graph capture failed ({}); timing direct calls between events instead", why);
}

// Captures `calls` launches into `graph`; leaves it empty when the stream cannot be captured.
// Relaxed mode: calls that are not stream work (a launcher's cudaFuncSetAttribute) run as usual
// instead of invalidating the capture.
void capture(const Launch& launch, int calls, cudaStream_t stream, GraphExec& graph) {
  const cudaError_t begun = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (begun != cudaSuccess) {
    cudaGetLastError();
    warn_no_graph(cudaGetErrorString(begun));
    return;
  }
  std::string error;
  try {
    for (int i = 0; i < calls; ++i) launch(stream);
  } catch (const std::exception& e) {
    error = e.what();
  }
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &captured);  // always end the capture
  if (error.empty() && ended != cudaSuccess) error = cudaGetErrorString(ended);
  if (error.empty() && cudaGraphInstantiate(graph.out(), captured, 0) != cudaSuccess) {
    error = "cudaGraphInstantiate failed";
    *graph.out() = nullptr;
  }
  if (captured) cudaGraphDestroy(captured);
  cudaGetLastError();  // capture errors are not sticky; clear them
  if (!error.empty()) warn_no_graph(error);
}

}  // namespace

int calls_per_sample(const TimingOptions& options, double estimate_ms) {
  if (!options.graph || options.cold) return 1;
  if (!(estimate_ms > 0)) return kMaxCallsPerSample;
  const double calls = std::ceil(kTargetSampleMs / estimate_ms);
  return static_cast<int>(std::clamp(calls, 1.0, double(kMaxCallsPerSample)));
}

Timer::Timer(const TimingOptions& options) : options_(options) {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!options_.cold) return;
  int device = 0, l2_bytes = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "L2 size");
  flush_buffer_ = DeviceBuffer(2 * static_cast<size_t>(std::max(l2_bytes, 1 << 20)));
}

Timer::~Timer() {
  if (stream_) cudaStreamDestroy(stream_);
}

void Timer::flush_l2() { flush_buffer_.fill(0, stream_); }

double Timer::time_once(const Launch& launch) {
  EventPairs events(1);
  check_cuda(cudaEventRecord(events.start(0), stream_), "cudaEventRecord");
  launch(stream_);
  check_cuda(cudaEventRecord(events.stop(0), stream_), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(events.stop(0)), "cudaEventSynchronize");
  return events.elapsed_ms(0);
}

std::vector<double> Timer::sample(const Launch& launch, cudaGraphExec_t graph, int calls,
                                  int samples) {
  const auto run = [&] {
    if (graph) {
      check_cuda(cudaGraphLaunch(graph, stream_), "cudaGraphLaunch");
    } else {
      for (int i = 0; i < calls; ++i) launch(stream_);
    }
  };
  // Untimed: uploads the graph, and keeps the GPU busy while the samples below are enqueued.
  run();
  EventPairs events(samples);
  for (int i = 0; i < samples; ++i) {
    if (options_.cold) flush_l2();
    check_cuda(cudaEventRecord(events.start(i), stream_), "cudaEventRecord");
    run();
    check_cuda(cudaEventRecord(events.stop(i), stream_), "cudaEventRecord");
  }
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  std::vector<double> per_call_ms;
  for (int i = 0; i < samples; ++i) per_call_ms.push_back(events.elapsed_ms(i) / calls);
  return per_call_ms;
}

void Timer::time(const Launch& launch, PassResult& result, int samples) {
  if (samples <= 0) samples = options_.iters;
  for (int i = 0; i < options_.warmup; ++i) launch(stream_);
  const double estimate_ms = time_once(launch);  // also waits for the warm-up calls
  const int calls = calls_per_sample(options_, estimate_ms);
  GraphExec graph;
  if (options_.graph) capture(launch, calls, stream_, graph);
  result.timing.method = graph.get() ? "graph" : "events";
  result.timing.calls_per_sample = calls;
  result.timing.cold = options_.cold;
  result.timing.warmup = options_.warmup;
  const double begin_s = unix_seconds();
  result.samples_ms = sample(launch, graph.get(), calls, samples);  // returns once they are done
  result.sample_spans = {{begin_s, unix_seconds()}};
  result.round_samples = {samples};
}

}  // namespace cuflash::bench
