// A result package: one folder per run that holds what a published number needs.
//   metadata.json  machine, build, command line, protocol settings, status of the run
//   results.json   the timings in Google Benchmark's schema (formats.h), one line per row: the
//                  median row of each pass with every statistic, or with JsonRows::all
//                  (`bench --samples`) every sample's row and the six aggregates
//   results.md     the same as a markdown table, for people
//   failures.json  the cases that failed and why (an empty list when none did)
//   README.md      each item a published number needs and where it is here, or why it is absent
// With --profile, results.json and results.md also hold Nsight Compute's figures per kernel
// (profile_report.h); the raw reports live beside the folder, in "<dir>-ncu".
// The files are rewritten after every case, each through a temporary file and a rename, and
// metadata.json last: a run that stops at any point (Ctrl-C, a crash, a lost machine) leaves a
// package of the cases finished so far whose metadata never claims more than the other files hold.
#pragma once

#include <string>
#include <vector>

#include "bench/formats.h"
#include "bench/results.h"

namespace cuflash::bench {

// Throws cli::UsageError unless `dir` is absent or an empty folder: a package's files have
// common names (README.md, results.json, ...), and no file of the user's may be replaced.
void require_new_package_folder(const std::string& dir);

class ResultPackage {
 public:
  // Creates `dir` (with parents). Throws cli::UsageError when it exists and is not empty
  // (require_new_package_folder()), cli::RuntimeFailure when it cannot be created. `rows`: the
  // rows of results.json.
  explicit ResultPackage(std::string dir, JsonRows rows = JsonRows::medians);

  // Rewrites the package from the records so far; `metadata` is written as given.
  // Throws cli::RuntimeFailure naming the file that could not be written.
  void write(const std::vector<CaseRecord>& records, const RunSettings& settings,
             const Json& metadata) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  JsonRows rows_;
};

// Writes `text` to `path` through `path.tmp` and a rename, so readers see the old file or the
// new one, never a part. Throws cli::RuntimeFailure naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace cuflash::bench
