// The facts a result package records about a run (metadata.json): the machine, the GPU, the
// build, the command line and the protocol. share/docs/bench.md lists every field.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"  // Json

namespace cuflash::bench {

// "2026-11-29T14:03:07Z"
std::string utc_now_iso8601();

// Seconds since the Unix epoch, to the microsecond (the system clock, as nvidia-smi's log).
double unix_seconds();

// argv of this process (from /proc/self/cmdline); empty when unavailable.
std::vector<std::string> process_command_line();

// cuflash version, git commit and dirty flag, build type, architectures, compilers and flags,
// as recorded when the build was configured ("unknown" where it was not).
Json build_metadata();

// CUDA driver and runtime versions.
Json cuda_metadata();

// Name, UUID, compute capability, SMs, memory, L2, clocks of `device`; {"name": "none"} when
// the device cannot be queried.
Json device_metadata(int device);

// Everything above plus host name, CPUs, executable, working directory, command line and start
// time; `protocol` is stored as given; "status" is "running" until the caller changes it.
Json run_metadata(int device, const Json& protocol);

}  // namespace cuflash::bench
