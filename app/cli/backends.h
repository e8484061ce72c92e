// Where a case is computed: the float64 CPU reference or the CUDA kernels. Both take and return
// float64 values in [batch, heads, seq, head_dim] order, so callers never see layouts or dtypes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/attention_case.h"

namespace cuflash::cli {

enum class Backend { cpu, cuda };

struct AttentionResult {
  std::vector<double> out, lse;  // O (values of the case's dtype), LSE (fp32 values)
  std::vector<double> dq, dk, dv;  // empty without backward
  double seconds = 0;            // wall time of the computation (uploads included for cuda)
};

// `auto`: the GPU when one exists, else the CPU reference (said on stderr by the caller).
// Throws RuntimeFailure for `cuda` without a GPU.
Backend resolve_backend(const std::string& name);
const char* to_string(Backend backend);

// Throws UsageError when the CUDA kernels cannot compute the problem (a head_dim without
// kernels), saying that the CPU backend can. Needs no GPU.
void require_gpu_support(const Problem& p);

// Progress of the CPU reference, per stage ("forward", "backward"), as
// reference::ProgressCallback: thread-safe, never throwing; false stops the computation.
using StageProgress = std::function<bool(const char* stage, int64_t done, int64_t total)>;

// The GPU throws the library's cuflash::Error as it comes (kinds unsupported or invalid_argument
// for a case the kernels do not serve, e.g. head_dim 96; out_of_memory, cuda, no_device for the
// machine's failures; exit_code() in exit_codes.h maps them); the CPU reference throws
// UsageError for an invalid problem, RuntimeFailure when host memory runs out, and Interrupted
// when `progress` stopped it. The GPU path does not report progress.
AttentionResult compute(Backend backend, const Problem& p, const CaseInputs& inputs,
                        bool backward, const StageProgress& progress = {});

// The CPU reference alone, in float64 (no rounding of outputs).
AttentionResult compute_reference(const Problem& p, const CaseInputs& inputs, bool backward,
                                  const StageProgress& progress = {});

}  // namespace cuflash::cli
