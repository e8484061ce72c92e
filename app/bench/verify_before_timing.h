// `cuflash bench --verify`: before a case is timed, it runs once through the GPU and every output
// is compared with the float64 CPU reference under the rule of `cuflash verify` (compare.h:
// max abs error <= 2x that of a plain attention in the same precision, plus a floor relative to
// the values' size; NaN never passes). Cases whose CPU reference would take too long are skipped
// and marked so (verify_fits). The comparison itself is cli/accuracy_check.h, shared with
// `cuflash verify`; this adds the size limit and the one-line summary of the worst tensor.
#pragma once

#include <cstdint>
#include <string>

#include "cuflash/problem.h"

namespace cuflash::bench {

// Cases above this many multiply-adds per score product (B * H * visible pairs * D) are not
// checked: the float64 reference and the baseline together take seconds per 2^32 on a
// many-core host. 2^33 admits B=1, H=8, S=4096, D=64 and everything smaller.
constexpr double kVerifyMaxWork = 8589934592.0;  // 2^33

bool verify_fits(const Problem& p);

struct CheckResult {
  bool pass = true;
  std::string summary;  // one line: the worst tensor relative to its tolerance
};

// Runs forward (and with `backward` dQ, dK, dV) on the GPU with inputs from `seed` and compares.
// Throws like cli::compute(): cuflash::Error from the GPU (unsupported case, CUDA error, out of
// memory), cli::UsageError or cli::RuntimeFailure from the CPU reference.
CheckResult check_against_reference(const Problem& p, uint64_t seed, bool backward);

}  // namespace cuflash::bench
