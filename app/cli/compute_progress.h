// Progress of the CPU reference on stderr, and its stop on Ctrl-C.
//
// The line ("CPU reference, forward: 37.5%, 12 s elapsed, about 20 s left") is drawn only when
// stderr is a terminal and -q is off, first after half a second and then at most four times a
// second, and erased when the computation ends; nothing is written otherwise. The callback asks
// the reference to stop once SIGINT, SIGTERM or SIGHUP arrived (cli/interrupt.h), whether or not
// the line is shown.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "cli/backends.h"

namespace cuflash::cli {

class ComputeProgress {
 public:
  explicit ComputeProgress(bool show);
  ~ComputeProgress();  // erases the line
  ComputeProgress(const ComputeProgress&) = delete;
  ComputeProgress& operator=(const ComputeProgress&) = delete;

  // For compute(): thread-safe, never throws.
  StageProgress callback();

 private:
  bool report(const char* stage, int64_t done, int64_t total);

  bool show_;
  std::atomic<int64_t> next_draw_ns_;
  std::atomic<const char*> stage_{nullptr};  // compute() names its stages with literals
  std::atomic<int64_t> stage_start_ns_{0};
  std::mutex draw_;  // one thread draws at a time; the others skip
  bool drawn_ = false;
};

}  // namespace cuflash::cli
