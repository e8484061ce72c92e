// Helpers shared by the host unit tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace cuflash::unit_test {

// `n` standard-normal values, the same for the same `seed`.
inline std::vector<double> random_values(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(gen);
  return v;
}

}  // namespace cuflash::unit_test
