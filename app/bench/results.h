// What a sweep produces: per case, the timed passes and, when something went wrong, why. Every
// output format and the result package are written from these structures alone.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "bench/sweep.h"
#include "cuflash/host_runner.h"
#include "cuflash/types.h"

namespace cuflash::bench {

// The JSON documents `cuflash bench` writes (results, metadata.json, failures.json):
// nlohmann-json's value with object keys kept in insertion order, the order the documents show.
using Json = nlohmann::ordered_json;

// The member `key` of `object`, or nullptr when it is absent or `object` is not an object.
const Json* find_member(const Json& object, const std::string& key);

// How the samples of one pass were taken (share/docs/bench.md, "Timing").
struct TimingInfo {
  // "graph": each sample replays N calls captured in a CUDA graph; "events": each sample is N
  // calls launched directly between two events.
  std::string method = "graph";
  int calls_per_sample = 1;  // N
  bool cold = false;         // L2 flushed before every sample
  int warmup = 0;            // untimed calls before sampling
};

// Device memory of one pass, in bytes.
struct MemoryInfo {
  int64_t alloc_bytes = 0;        // buffers the pass needs: tensors and workspace
  int64_t workspace_bytes = 0;    // the library's scratch (forward_ or backward_workspace_size), in alloc_bytes
  int64_t memgetinfo_bytes = -1;  // drop of cudaMemGetInfo's free memory over the case; -1 unknown
};

// When a round's samples ran: from before the first was enqueued to after the last finished, in
// seconds since the Unix epoch. A log of the GPU's clock is matched against these
// (share/tools/case_clocks.py): under sustained load the clock falls within seconds.
struct TimeSpan {
  double begin_s = 0;
  double end_s = 0;
};

// One timed pass of one case.
struct PassResult {
  std::string pass;                 // "fwd" or "bwd"
  std::vector<double> samples_ms;   // per-call time of each sample (sample time / N)
  std::vector<int> round_samples;   // how many of them each round took, in order (sweep_runner.h)
  std::vector<TimeSpan> sample_spans;  // each round's, in the same order
  TimingInfo timing;
  MemoryInfo memory;
  double flops = 0;                 // credited to one call (stats.h)
  double bytes = 0;                 // moved by one call at least (stats.h, pass_bytes)
  // Over several GPUs (--gpus): the communication of one more call after the timed ones.
  std::optional<CommunicationTimes> communication;
  // The kernels one call launched (cuflash::LaunchRecord, recorded on the untimed first call),
  // in launch order, each once.
  std::vector<std::string> kernels;
};

enum class FailureKind { unsupported, out_of_memory, cuda_error, verification_failed, error };
const char* to_string(FailureKind kind);

struct Failure {
  std::string pass;  // "fwd", "bwd", "verify" or "setup" (buffers, inputs, first calls)
  FailureKind kind = FailureKind::error;
  std::string reason;  // one line
  bool fatal = false;  // the device is unusable afterwards (a sticky CUDA error): the sweep stops
};

// Nsight Compute's figures for one kernel launch of a profiled case (`bench --profile`,
// profiler.h).
struct KernelProfile {
  std::string pass;   // "fwd" or "bwd": the call that launched it
  std::string name;   // as ncu printed it (demangled, with template arguments)
  std::string block;  // "(128, 1, 1)"; empty when ncu did not print it
  std::string grid;
  // Our key (profiler.h, kProfileMetrics) -> value in our unit; no value: ncu had none ("n/a").
  std::vector<std::pair<std::string, std::optional<double>>> metrics;
};

// The profile of one case: its kernels, or why there are none.
struct CaseProfile {
  std::string status = "ok";  // "ok", "failed" (ncu ran and gave no figures), "not_run"
  std::string reason;         // one line, when not "ok" (or "ok" for only some passes)
  std::vector<KernelProfile> kernels;
  std::vector<std::string> reports;   // the .ncu-rep files written
  std::vector<std::string> commands;  // the command line that writes each report again
};

// Everything about one case of the sweep.
struct CaseRecord {
  Problem spec;
  std::vector<PassResult> passes;  // the passes that were timed, in order
  std::optional<Failure> failure;  // set when the case (or one of its passes) failed
  std::string verify = "off";      // "pass", "fail", "skipped" (too large for the CPU) or "off"
  std::optional<CaseProfile> profile;  // with --profile
};

// Settings that every row of a run shares and that outputs show.
struct RunSettings {
  std::string backend = "cuflash";
  std::map<std::string, double> peak_tflops;  // per dtype name; absent: no % of peak
  std::optional<double> peak_gbps;            // memory bandwidth, GB/s; absent: no % of it
};

// The % of peak for `dtype`, when a peak was given for it.
std::optional<double> percent_of_peak(const RunSettings& settings, DType dtype, double tflops);
// The % of the peak bandwidth, when one was given.
std::optional<double> percent_of_peak_gbps(const RunSettings& settings, double gbps);

// Parses --peak-gbps: one positive number. Throws cli::UsageError naming the option.
double parse_peak_gbps(const std::string& text);

// Parses --peak-tflops: "989" (every dtype) or "fp16=989,bf16=989,fp32=67". Throws
// cli::UsageError naming the option.
std::map<std::string, double> parse_peak_tflops(const std::string& text);

// One failure as the failures.json and "failures" entries show it.
Json failure_json(const CaseRecord& record);

}  // namespace cuflash::bench
