// Where a case is computed: the float64 CPU reference or the CUDA kernels. Both take and return
// float64 values in [batch, heads, seq, head_dim] order, so callers never see layouts or dtypes.
#pragma once

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
Backend resolve_backend(const std::string& name);
const char* to_string(Backend backend);

// The GPU throws the library's cuflash::Error as it comes (kinds unsupported or invalid_argument
// for a case the kernels do not serve, e.g. head_dim 96; out_of_memory, cuda, no_device for the
// machine's failures; exit_code() in exit_codes.h maps them); the CPU reference throws
// UsageError for an invalid problem and RuntimeFailure when host memory runs out.
AttentionResult compute(Backend backend, const Problem& p, const CaseInputs& inputs,
                        bool backward);

// The CPU reference alone, in float64 (no rounding of outputs).
AttentionResult compute_reference(const Problem& p, const CaseInputs& inputs, bool backward);

}  // namespace cuflash::cli
