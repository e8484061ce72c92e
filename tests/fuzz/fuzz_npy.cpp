// libFuzzer harness for the .npy reader. Any input must either be rejected with NpyError or give
// an array that converts to double and survives serialize_npy -> parse_npy unchanged; anything
// else (a crash, a sanitizer report, another exception, a mismatch) is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/io/npy.h"

namespace {

using cuflash::io::NpyArray;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_npy: %s\n", what);
  std::abort();
}

bool same_array(const NpyArray& a, const NpyArray& b) {
  return a.type == b.type && a.shape == b.shape && a.bytes == b.bytes;
}

// Elements whose double round trip must reproduce the stored bits: all but NaNs, whose payload
// may be quieted.
bool same_values(const NpyArray& stored, const std::vector<double>& values,
                 const NpyArray& narrowed) {
  const size_t width = static_cast<size_t>(cuflash::io::element_size(stored.type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    for (size_t b = 0; b < width; ++b) {
      if (stored.bytes[i * width + b] != narrowed.bytes[i * width + b]) return false;
    }
  }
  return true;
}

void check_accepted(const NpyArray& array, const cuflash::io::ReadOptions& options) {
  const int64_t count = array.element_count();
  const std::vector<double> values = cuflash::io::to_double(array);
  if (values.size() != static_cast<size_t>(count)) finding("to_double gave the wrong count");
  if (!same_values(array, values, cuflash::io::from_double(values, array.shape, array.type))) {
    finding("from_double(to_double(x)) changed a value");
  }
  const std::vector<unsigned char> image = cuflash::io::serialize_npy(array);
  const NpyArray again = cuflash::io::parse_npy(image.data(), image.size(), "round-trip", options);
  if (!same_array(array, again)) finding("serialize_npy -> parse_npy changed the array");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const bool two_byte_as_bf16 : {true, false}) {
    cuflash::io::ReadOptions options;
    options.two_byte_as_bf16 = two_byte_as_bf16;
    options.max_bytes = size_t(1) << 20;
    NpyArray array;
    try {
      array = cuflash::io::parse_npy(data, size, "fuzz-input", options);
    } catch (const cuflash::io::NpyError&) {
      continue;  // a clean rejection is the expected outcome for most inputs
    }
    try {
      check_accepted(array, options);
    } catch (const cuflash::io::NpyError&) {
      finding("an accepted array failed to convert or to round-trip");
    }
  }
  return 0;
}
