// Error statistics of a result against the float64 reference, and the pass rule used by
// `cuflash verify` and the GPU tests.
//
// The rule (FlashAttention's): a kernel passes when its largest absolute error is at most twice
// that of a plain attention computed in the same low precision (baseline.h), plus a small
// absolute floor, and it produced nothing non-finite where the reference is finite. Comparing
// against the low-precision baseline rather than a fixed tolerance makes the check meaningful
// for every dtype, shape and input scale at once.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/types.h"

namespace cuflash::reference {

struct ErrorStats {
  double max_abs = 0.0;  // largest |got - ref| over the elements where both are finite
  // ||got - ref||_2 / ||ref||_2 over the same elements. When ||ref||_2 == 0 the denominator is
  // taken as 1, so rel_l2 is then the absolute ||got - ref||_2: 0 for an exact match, always
  // finite for finite inputs (JSON-safe), never a division by zero.
  double rel_l2 = 0.0;
  // Elements where got or ref is NaN or infinite and the two do not hold the same infinity.
  // NaN never matches (not even a NaN in ref); the same infinity in both (e.g. LSE = +inf of a
  // row that sees no key) counts as equal and is left out of max_abs and rel_l2.
  int64_t nonfinite = 0;
  int64_t count = 0;  // elements compared
};

// Throws std::invalid_argument when the two sizes differ.
ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref);

// ours.nonfinite == 0 && ours.max_abs <= 2 * baseline.max_abs + floor.
bool within_tolerance(const ErrorStats& ours, const ErrorStats& baseline, double floor);

// The absolute floor of the pass rule for outputs of `dtype`. The floor only matters when the
// baseline's error is tiny (e.g. a short row whose results happen to round exactly); it is about
// one rounding step of the dtype near |O| ~ 1 divided by a few, so it forgives one rounding that
// the baseline happened to avoid and nothing more.
constexpr double default_floor(DType dtype) {
  switch (dtype) {
    // fp16 spacing at 1 is 2^-10; a quarter of it, 2^-12 ~ 2.4e-4.
    case DType::fp16: return 1.0 / 4096.0;
    // bf16 spacing at 1 is 2^-7; a quarter of it, 2^-9 ~ 2.0e-3.
    case DType::bf16: return 1.0 / 512.0;
    // fp32 spacing at 1 is 2^-23 ~ 1.2e-7; a quarter of it would be stricter than the few-ulp
    // error of the GPU's exp2 approximation and of a reordered fp32 sum, which the baseline
    // (exact std::exp, one summation order) does not share. 1e-6 is ~8 ulp at 1.
    case DType::fp32: return 1e-6;
  }
  return 0.0;
}

}  // namespace cuflash::reference
