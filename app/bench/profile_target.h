// The child process that `bench --profile` runs under Nsight Compute (profiler.h): the hidden
// `cuflash profile-target` computes one case once, with the CUDA profiler started around the
// single call whose kernels are wanted.
#pragma once

#include <cstdint>
#include <string>

#include "cuflash/problem.h"

namespace cuflash::bench {

// Runs `pass` ("fwd" or "bwd") of `c` once on the benchmark's inputs for `seed`, between
// cudaProfilerStart() and cudaProfilerStop(); for "bwd" a forward call runs first, outside them,
// for the O and LSE that backward reads. Throws cuflash::Error on CUDA or library errors.
void run_profile_target(const Problem& c, const std::string& pass, uint64_t seed);

}  // namespace cuflash::bench
