// Memory a `run` case needs, compared before anything is allocated with what the host (and, on
// the GPU path, the device) has free, so that a case too large fails at once with the sizes
// rather than with "out of memory" after minutes of work, or by the kernel's OOM killer.
#pragma once

#include <cstdint>
#include <optional>

#include "cli/backends.h"

namespace cuflash::cli {

struct MemoryNeed {
  double host_bytes = 0;    // peak estimate: inputs, outputs and the backend's working memory
  double device_bytes = 0;  // the GPU path's device buffers; 0 for the CPU backend
};

MemoryNeed run_memory_need(const Problem& p, bool backward, Backend backend);

// Memory the host can give this process now: MemAvailable of /proc/meminfo, lowered to the
// control group's limit minus its usage when there is one; nullopt when neither can be read.
std::optional<double> host_available_bytes();

// The most host memory this process has held so far (its peak resident set size).
double peak_host_bytes();

// Free memory of the current CUDA device (cudaMemGetInfo); nullopt when it cannot be asked.
std::optional<double> device_free_bytes();

// Throws RuntimeFailure (exit 3) naming both sizes and the options that set them when the case
// needs more than is available.
void check_run_memory(const Problem& p, bool backward, Backend backend);

}  // namespace cuflash::cli
