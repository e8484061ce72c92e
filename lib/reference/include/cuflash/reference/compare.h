// Error statistics of a result against the float64 reference, and the pass rule used by
// `cuflash verify` and the GPU tests.
//
// The rule (FlashAttention's): a kernel passes when its largest absolute error is at most twice
// that of a plain attention computed in the same low precision (baseline.h), plus a small
// floor relative to the size of the values (max(1, largest |ref|)), and it produced nothing
// non-finite where the reference is finite. Comparing
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
  double ref_max_abs = 0.0;  // largest finite |ref|: the scale the floor is relative to
};

// Throws std::invalid_argument when the two sizes differ.
ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref);

// The largest error the rule allows: 2 * baseline.max_abs + floor * max(1, ours.ref_max_abs).
double tolerance(const ErrorStats& ours, const ErrorStats& baseline, double floor);

// ours.nonfinite == 0 && ours.max_abs <= tolerance(ours, baseline, floor).
bool within_tolerance(const ErrorStats& ours, const ErrorStats& baseline, double floor);

// The floor of the pass rule for outputs of `dtype`, relative to max(1, largest |ref|) so that
// it means the same for O (|O| <= max|V|) and for gradients that grow with the sequence length.
// The floor only matters when the baseline's error is tiny (e.g. a short row whose results
// happen to round exactly); for fp16/bf16 it is about one rounding step of the dtype divided by
// a few, so it forgives one rounding that the baseline happened to avoid and nothing more.
constexpr double default_floor(DType dtype) {
  switch (dtype) {
    // fp16 spacing at 1 is 2^-10; a quarter of it, 2^-12 ~ 2.4e-4.
    case DType::fp16: return 1.0 / 4096.0;
    // bf16 spacing at 1 is 2^-7; a quarter of it, 2^-9 ~ 2.0e-3.
    case DType::bf16: return 1.0 / 512.0;
    // fp32: the baseline rounds nothing to a narrower type, so its error is only fp32
    // accumulation. The GPU kernels multiply split-TF32 operands (about 2^-20 relative per
    // product instead of 2^-24) and sum in another order (dK/dV of grouped-query attention add
    // seq_q * heads/heads_kv terms one tile after another), ~sqrt(n) * 2^-20 * |value| per
    // element: on the H200 at most 1.4e-5 against a baseline of 8.9e-6 (dQ, D=128, 1023 x 777,
    // GQA), relative L2 ~2e-6. 5e-5 of max(1, |ref|) covers that; a real defect (a wrong mask,
    // a missed tile) is >= 1e-3.
    case DType::fp32: return 5e-5;
  }
  return 0.0;
}

}  // namespace cuflash::reference
