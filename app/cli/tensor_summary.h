// Summary statistics of an output tensor as `run` prints them, computed from the stored elements
// on all CPU cores: no float64 copy of a tensor that may be gigabytes.
#pragma once

#include <cstdint>

#include "cuflash/io/npy.h"

namespace cuflash::cli {

struct TensorSummary {
  double mean = 0, rms = 0, abs_max = 0;  // over the finite elements
  int64_t nonfinite = 0;                  // NaN and infinities, but see summarize_tensor()
};

// `is_lse`: +inf is LSE's value for a row that sees no key, not a defect, so it is not counted
// as non-finite (and, like every non-finite value, not averaged either).
TensorSummary summarize_tensor(const io::NpyArray& array, bool is_lse);

}  // namespace cuflash::cli
