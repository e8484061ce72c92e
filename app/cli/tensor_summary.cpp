#include "cli/tensor_summary.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/io/parallel.h"

namespace cuflash::cli {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // elements summed by one task

struct PartialSums {
  double sum = 0, squares = 0, abs_max = 0;
  int64_t finite = 0, nonfinite = 0, positive_infinite = 0;
};

PartialSums sums_of(const io::NpyArray& array, size_t begin, size_t end) {
  const size_t width = static_cast<size_t>(io::element_size(array.type));
  PartialSums s;
  for (size_t i = begin; i < end; ++i) {
    const double x = io::element_to_double(array.type, &array.bytes[i * width]);
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      if (x == INFINITY) ++s.positive_infinite;
      continue;
    }
    ++s.finite;
    s.sum += x;
    s.squares += x * x;
    s.abs_max = std::max(s.abs_max, std::abs(x));
  }
  return s;
}

size_t element_count(const io::NpyArray& array) {
  return array.bytes.size() / static_cast<size_t>(io::element_size(array.type));
}

PartialSums total_sums(const io::NpyArray& array) {
  const size_t count = element_count(array);
  // Fixed-size chunks summed in chunk order: the figures are the same on any number of cores.
  const size_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<PartialSums> partials(chunks);
  io::parallel_ranges(chunks, 1, [&](size_t first, size_t end) {
    for (size_t c = first; c < end; ++c) {
      partials[c] = sums_of(array, c * kChunk, std::min(count, (c + 1) * kChunk));
    }
  });
  PartialSums total;
  for (const PartialSums& p : partials) {
    total.sum += p.sum;
    total.squares += p.squares;
    total.abs_max = std::max(total.abs_max, p.abs_max);
    total.finite += p.finite;
    total.nonfinite += p.nonfinite;
    total.positive_infinite += p.positive_infinite;
  }
  return total;
}

// The rows of `row_elements` elements of `array` whose elements are all zero (either sign).
int64_t zero_rows(const io::NpyArray& array, int64_t row_elements) {
  const size_t width = static_cast<size_t>(io::element_size(array.type));
  const size_t row_bytes = width * size_t(row_elements);
  const size_t rows = row_bytes == 0 ? 0 : array.bytes.size() / row_bytes;
  std::atomic<int64_t> total{0};
  io::parallel_ranges(rows, 1024, [&](size_t first, size_t end) {
    int64_t zeros = 0;
    for (size_t r = first; r < end; ++r) {
      const unsigned char* row = &array.bytes[r * row_bytes];
      bool zero = true;
      for (size_t i = 0; i < size_t(row_elements) && zero; ++i) {
        zero = io::element_to_double(array.type, row + i * width) == 0.0;
      }
      zeros += zero;
    }
    total += zeros;
  });
  return total;
}

TensorSummary summary_of(const PartialSums& total, int64_t nonfinite) {
  TensorSummary summary;
  summary.nonfinite = nonfinite;
  summary.abs_max = total.abs_max;
  if (total.finite > 0) {
    summary.mean = total.sum / double(total.finite);
    summary.rms = std::sqrt(total.squares / double(total.finite));
  }
  return summary;
}

}  // namespace

TensorSummary summarize_tensor(const io::NpyArray& array) {
  const PartialSums total = total_sums(array);
  return summary_of(total, total.nonfinite);
}

TensorSummary summarize_lse(const io::NpyArray& lse, const io::NpyArray& out, int64_t head_dim) {
  const PartialSums total = total_sums(lse);
  const int64_t keyless = std::min(total.positive_infinite, zero_rows(out, head_dim));
  return summary_of(total, total.nonfinite - keyless);
}

}  // namespace cuflash::cli
