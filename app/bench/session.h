// One `cuflash bench` run once its options are parsed: metadata, the optional result package,
// the sweep (through any runner: the GPU one, or a fake in tests), the final outputs and the
// exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/formats.h"
#include "bench/results.h"
#include "bench/sweep_runner.h"

namespace cuflash::bench {

struct SessionPlan {
  std::vector<Problem> cases;
  RunSettings settings;
  Json protocol = Json::object();  // stored as metadata.json's "protocol"
  Format format = Format::table;
  std::string output;   // results file; empty: stdout
  std::string out_dir;  // result package folder; empty: none
  bool samples = false;  // the package's results.json keeps every sample (JsonRows::all)
  bool show_progress = true;
  int rounds = 1;  // visits of every case, each with its share of the samples (sweep_runner.h)
  int device = 0;
  // The passes the runner times of each case ("fwd", "bwd"): the baseline must have one of them.
  std::vector<std::string> passes = {"fwd", "bwd"};
  std::string compare;          // baseline results document for --compare; empty: none
  bool compare_across = false;  // compare with a baseline of another GPU or kernel family
  // With --profile: metadata.json's "profile" (bench/profiler.h), asked again before every write
  // since it changes when ncu is refused the counters half-way.
  std::function<Json()> profile_metadata;
};

// Writes the package as the sweep goes (when out_dir is set), then the results in plan.format
// to stdout or plan.output, and logs a summary on stderr. Returns sweep_exit_code().
// With plan.compare, the comparison with that baseline (compare.h) follows the results in the
// same format (JSON: a "comparisons" member) and goes into the package as comparison.md and
// comparison.json.
// Throws cli::UsageError for an out_dir that is not new or empty, an --output that is no regular
// file, or an unusable baseline,
// cli::RuntimeFailure when a file cannot be written.
int run_session(const SessionPlan& plan, const CaseRunner& runner);

// Throws unless `output` (--output; "" for stdout) can take the results once a sweep is done:
// cli::UsageError for a folder, link or other non-regular file there (the file is replaced by a
// rename), cli::RuntimeFailure for a folder that does not exist or cannot be written.
void check_output_writable(const std::string& output);

}  // namespace cuflash::bench
