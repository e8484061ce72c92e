// `cuflash bench --profile`: Nsight Compute's view of the kernels each case launches.
//
// For each timed case and pass, ncu runs this same binary again as a child process
// (`cuflash profile-target`, hidden), which computes the case once: for the backward pass the
// forward call runs first, untimed and unprofiled, since backward reads its O and LSE. The child
// starts the profiler (cudaProfilerStart) around the one call of interest and ncu starts with
// --profile-from-start off, so exactly that call's kernels are captured: forward's kernel, or
// backward's row sums, main kernel and dQ conversion. Each kernel is replayed to collect the
// metrics of kProfileMetrics; the report (.ncu-rep) goes beside the package, never into it
// (`<out-dir>-ncu/`), and its figures are read back with `ncu --import ... --csv --page raw`.
//
// Nothing here stops the sweep: a missing ncu, counters the user may not read
// (ERR_NVGPUCTRPERM), or any ncu failure is recorded with its reason in the case's profile and
// the timings stand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/ncu_csv.h"
#include "bench/results.h"

namespace cuflash::bench {

// One figure of a kernel: where ncu has it and how we report it.
struct ProfileMetric {
  const char* key;      // our name, in results.json
  const char* ncu;      // Nsight Compute's metric name (sm_90, Nsight Compute 2024/2025)
  double scale;         // our unit per ncu's base unit (e.g. 1e6: seconds -> microseconds)
  const char* meaning;  // for the documentation and metadata.json
};

// Every figure collected, in the order results.json lists them. A metric ncu does not offer
// for the GPU (or cannot collect) is no value, "n/a", in the outputs; the others still count.
extern const std::vector<ProfileMetric> kProfileMetrics;

// The figures of `kernels` (parsed ncu output) under our keys, for kernels launched by `pass`.
std::vector<KernelProfile> kernel_profiles(const std::vector<NcuKernel>& kernels,
                                           const std::string& pass);

// Where the ncu binary is: $CUFLASH_NCU when set (it must then be an executable file: no
// fallback, so that a wrong setting is not hidden), else the first executable `ncu` on PATH,
// /usr/local/cuda/bin/ncu, /opt/nvidia/nsight-compute/*/ncu (the highest version first).
struct NcuLocation {
  std::string path;   // empty when none was found
  std::string error;  // why, when path is empty
};
NcuLocation find_ncu();

// The folder of the raw reports of the package at `out_dir`: "<out-dir>-ncu" beside it.
std::string reports_dir_for(const std::string& out_dir);

// A file-name form of a case name: "fp16/b:1/h:8" -> "fp16_b-1_h-8".
std::string file_safe(const std::string& case_name);

// One command line as a shell would take it, each argument quoted where needed.
std::string shell_command(const std::vector<std::string>& argv);

struct ProfilerSettings {
  NcuLocation ncu;
  std::string reports_dir;  // created when the first report is written
  std::string self;         // this binary, run by ncu as the child
  bool forward = true;      // profile the passes that are timed (--pass)
  bool backward = true;
};

class Profiler {
 public:
  // Asks ncu for its version and the metrics it offers for this machine's GPUs. A missing ncu
  // is not an error here: every case then records why it was not profiled.
  explicit Profiler(ProfilerSettings settings);

  // Profiles a finished case (one ncu run per pass) and sets record.profile. A case that failed
  // is not profiled. After ncu was refused the counters, later cases are not tried again.
  void profile(CaseRecord& record, uint64_t seed);

  // metadata.json's "profile": ncu, its version, the metrics, where the reports are, and why
  // profiling is unavailable when it is.
  Json metadata() const;

  // Why no case can be profiled (ncu missing, counters refused); empty while profiling works.
  const std::string& unavailable() const { return unavailable_; }

 private:
  std::vector<std::string> collect_command(const Problem& c, const std::string& pass,
                                           uint64_t seed, const std::string& report) const;
  void profile_pass(const Problem& c, const std::string& pass, uint64_t seed,
                    CaseProfile& profile);
  void query_ncu();

  ProfilerSettings settings_;
  std::string version_;
  std::vector<std::string> metrics_;      // ncu names asked for
  std::vector<std::string> not_offered_;  // in kProfileMetrics but not offered by this ncu/GPU
  std::string unavailable_;
};

}  // namespace cuflash::bench
