// Summary statistics of an output tensor as `run` prints them, computed from the stored elements
// on all CPU cores: no float64 copy of a tensor that may be gigabytes.
#pragma once

#include <cstdint>

#include "cuflash/io/npy.h"

namespace cuflash::cli {

struct TensorSummary {
  double mean = 0, rms = 0, abs_max = 0;  // over the finite elements
  int64_t nonfinite = 0;                  // NaN and infinities, but see summarize_lse()
};

// Not for LSE (summarize_lse()).
TensorSummary summarize_tensor(const io::NpyArray& array);

// LSE's summary: +inf is the LSE of a row that sees no key, whose O row is all zeros (problem.h),
// so +inf values up to the count of O's all-zero rows (`out`, rows of `head_dim` elements) are
// not counted as non-finite; those beyond it are (scores that overflowed fp32, say). The rows
// are matched by count, not one by one (no layout needed): an overflow can hide behind a row
// whose O is 0 for another reason (V of zeros). Non-finite values are never averaged.
TensorSummary summarize_lse(const io::NpyArray& lse, const io::NpyArray& out, int64_t head_dim);

}  // namespace cuflash::cli
