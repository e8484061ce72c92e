#include "cuflash/reference/compare.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace cuflash::reference {

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) {
    throw std::invalid_argument("got has " + std::to_string(got.size()) + " elements, ref has " +
                                std::to_string(ref.size()));
  }
  ErrorStats stats;
  stats.count = static_cast<int64_t>(got.size());
  double diff_squares = 0.0;
  double ref_squares = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double r = ref[i];
    if (std::isfinite(g) && std::isfinite(r)) {
      const double diff = std::abs(g - r);
      stats.max_abs = std::max(stats.max_abs, diff);
      diff_squares += diff * diff;
      ref_squares += r * r;
      stats.ref_max_abs = std::max(stats.ref_max_abs, std::abs(r));
    } else if (!(std::isinf(g) && g == r)) {  // the same infinity on both sides is a match
      ++stats.nonfinite;
    }
  }
  const double ref_norm = std::sqrt(ref_squares);
  stats.rel_l2 = std::sqrt(diff_squares) / (ref_norm > 0.0 ? ref_norm : 1.0);
  return stats;
}

double tolerance(const ErrorStats& ours, const ErrorStats& baseline, double floor) {
  return 2.0 * baseline.max_abs + floor * std::max(1.0, ours.ref_max_abs);
}

bool within_tolerance(const ErrorStats& ours, const ErrorStats& baseline, double floor) {
  return ours.nonfinite == 0 && ours.max_abs <= tolerance(ours, baseline, floor);
}

}  // namespace cuflash::reference
