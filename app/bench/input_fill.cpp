#include "bench/input_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "cuflash/numeric.h"

namespace cuflash::bench {

namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr double kInv2Pow24 = 1.0 / 16777216.0;
constexpr size_t kElementsPerThreadMin = size_t{1} << 20;  // below this, threads cost more

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t stream_key(uint64_t seed, uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ (stream * 0xD1B54A32D192ED03ull));
}

// The two normals of pair `pair`: Box-Muller with u1 in (0, 1] (so log(u1) is finite) and
// u2 in [0, 1).
void normal_pair(uint64_t key, uint64_t pair, float& first, float& second) {
  const uint64_t bits = splitmix64(key + pair);
  const double u1 = double((bits >> 40) + 1) * kInv2Pow24;
  const double u2 = double(bits & 0xFFFFFF) * kInv2Pow24;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  first = static_cast<float>(radius * std::cos(kTwoPi * u2));
  second = static_cast<float>(radius * std::sin(kTwoPi * u2));
}

void store(unsigned char* out, size_t index, float value, DType dtype) {
  switch (dtype) {
    case DType::fp32:
      std::memcpy(out + 4 * index, &value, 4);
      return;
    case DType::fp16: {
      const uint16_t h = numeric::float_to_half_bits(value);
      std::memcpy(out + 2 * index, &h, 2);
      return;
    }
    case DType::bf16: {
      const uint16_t b = numeric::float_to_bf16_bits(value);
      std::memcpy(out + 2 * index, &b, 2);
      return;
    }
  }
}

// Elements [begin, end) with begin even.
void fill_range(unsigned char* out, size_t begin, size_t end, DType dtype, uint64_t key) {
  for (size_t i = begin; i < end; i += 2) {
    float first = 0, second = 0;
    normal_pair(key, i / 2, first, second);
    store(out, i, first, dtype);
    if (i + 1 < end) store(out, i + 1, second, dtype);
  }
}

}  // namespace

float standard_normal_at(uint64_t seed, uint64_t stream, size_t index) {
  float first = 0, second = 0;
  normal_pair(stream_key(seed, stream), index / 2, first, second);
  return index % 2 ? second : first;
}

std::vector<unsigned char> standard_normal_bytes(size_t count, DType dtype, uint64_t seed,
                                                 uint64_t stream) {
  std::vector<unsigned char> bytes(count * static_cast<size_t>(dtype_size(dtype)));
  const uint64_t key = stream_key(seed, stream);
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::clamp<size_t>(count / kElementsPerThreadMin, 1, cores);
  // Even, so no pair is split between threads; threads * chunk >= count.
  const size_t chunk = ((count + threads - 1) / threads + 1) & ~size_t{1};
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) {
    const size_t begin = std::min(count, t * chunk), end = std::min(count, begin + chunk);
    workers.emplace_back(fill_range, bytes.data(), begin, end, dtype, key);
  }
  fill_range(bytes.data(), 0, std::min(count, chunk), dtype, key);
  for (std::thread& w : workers) w.join();
  return bytes;
}

}  // namespace cuflash::bench
