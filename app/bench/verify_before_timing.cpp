#include "bench/verify_before_timing.h"

#include <cstdio>
#include <vector>

#include "bench/stats.h"
#include "cli/accuracy_check.h"

namespace cuflash::bench {

namespace {

std::string describe(const char* name, const reference::ErrorStats& e, double tolerance) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "%s: max_abs %.3g, tolerance %.3g, non-finite %lld", name,
                e.max_abs, tolerance, static_cast<long long>(e.nonfinite));
  return buffer;
}

}  // namespace

bool verify_fits(const Problem& p) {
  const AttentionShape& s = p.shape;
  return double(s.batch) * double(s.heads) * visible_pairs(p) * double(s.head_dim) <=
         kVerifyMaxWork;
}

CheckResult check_against_reference(const Problem& p, uint64_t seed, bool backward) {
  const cli::CaseInputs in = cli::generate_inputs(p, seed, backward);
  const double floor = reference::default_floor(p.dtype);
  CheckResult result;
  double worst_ratio = -1;
  for (const cli::TensorVerdict& v : cli::check_accuracy(p, in, backward, floor)) {
    // The failing tensor, or the one closest to its tolerance when all pass.
    const double ratio = v.ours.nonfinite > 0 ? 1e300 : v.ours.max_abs / v.tolerance;
    if ((!v.pass && result.pass) || (v.pass == result.pass && ratio > worst_ratio)) {
      worst_ratio = ratio;
      result.summary = describe(v.tensor.c_str(), v.ours, v.tolerance);
    }
    result.pass = result.pass && v.pass;
  }
  return result;
}

}  // namespace cuflash::bench
