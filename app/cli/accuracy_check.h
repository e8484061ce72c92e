// The accuracy check behind `cuflash verify` and `cuflash bench --verify`: one case on the GPU,
// every output compared with the float64 CPU reference under the rule of reference/compare.h
// (max abs error <= 2x that of a plain attention in the same precision, plus a floor relative to
// the values' size; NaN never passes). `bench --verify` wraps it in bench/verify_before_timing.h
// (which cases are checked, and one summary line per case).
#pragma once

#include <string>
#include <vector>

#include "cli/attention_case.h"
#include "cuflash/reference/compare.h"

namespace cuflash::cli {

struct TensorVerdict {
  std::string tensor;              // o, lse, dq, dk, dv
  reference::ErrorStats ours;      // GPU result against the reference
  reference::ErrorStats baseline;  // low-precision plain attention against the reference
  double tolerance = 0;            // the largest max_abs the rule allows
  bool pass = false;
};

// Computes the case on the GPU, with the CPU reference and with the baseline, and judges each
// output. Throws like compute(): cuflash::Error from the GPU (unsupported case, CUDA error, out of
// memory), UsageError or RuntimeFailure from the CPU reference.
std::vector<TensorVerdict> check_accuracy(const Problem& p, const CaseInputs& inputs,
                                      bool backward, double floor);

}  // namespace cuflash::cli
