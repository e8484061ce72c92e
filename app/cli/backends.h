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

// Throws RuntimeFailure for a missing GPU, out of memory or a CUDA error; UsageError for a case
// the kernels do not support (e.g. head_dim 96 on the GPU).
AttentionResult compute(Backend backend, const Problem& p, const CaseInputs& inputs,
                        bool backward);

// The CPU reference alone, in float64 (no rounding of outputs).
AttentionResult compute_reference(const Problem& p, const CaseInputs& inputs, bool backward);

}  // namespace cuflash::cli
