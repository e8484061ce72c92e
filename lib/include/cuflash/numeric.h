// Host-side fp16 / bf16 bit conversions (round to nearest even), shared by the .npy tools, the
// CPU reference (to emulate low-precision baselines) and the tests. No CUDA headers needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cuflash::numeric {

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline uint16_t float_to_bf16_bits(float x) {
  uint32_t u = float_bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a (quiet) NaN
  u += 0x7fff + ((u >> 16) & 1);                                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_half_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | (abs > 0x7f800000 ? 0x7e00 : 0x7c00);  // NaN / Inf
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds past 65504: overflow to Inf
  if (abs < 0x38800000) {
    // Subnormal half (or zero): value = m * 2^-24; round abs/2^-24 to nearest even integer.
    const float scaled = bits_float(abs) * 16777216.0f;  // exact: power-of-two scaling
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: m * 2^-24
    const float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000 | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Rounds a value to the nearest representable fp16 / bf16 value (kept as float).
inline float round_to_half(float x) { return half_bits_to_float(float_to_half_bits(x)); }
inline float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

}  // namespace cuflash::numeric
