// Conversions between stored element types and double: exact widening, one rounding to nearest
// even when narrowing, and size checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/numeric.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using cuflash::io::ElementType;
using cuflash::io::NpyArray;
using cuflash::io::NpyError;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double pow2(int exponent) { return std::ldexp(1.0, exponent); }

// The stored 16-bit pattern of one value narrowed to fp16 or bf16.
uint16_t bits_of(double value, ElementType type) {
  const NpyArray array = cuflash::io::from_double({value}, {}, type);
  REQUIRE(array.bytes.size() == 2);
  return static_cast<uint16_t>(array.bytes[0] | array.bytes[1] << 8);
}

NpyArray sixteen_bit_array(const std::vector<uint16_t>& bits, ElementType type) {
  NpyArray array;
  array.type = type;
  array.shape = {static_cast<int64_t>(bits.size())};
  array.bytes.resize(bits.size() * 2);
  std::memcpy(array.bytes.data(), bits.data(), array.bytes.size());
  return array;
}

template <typename T>
NpyArray wide_array(const std::vector<T>& values, ElementType type) {
  NpyArray array;
  array.type = type;
  array.shape = {static_cast<int64_t>(values.size())};
  array.bytes.resize(values.size() * sizeof(T));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

}  // namespace

TEST_CASE("convert: fp16 and bf16 bit patterns widen exactly", "[convert]") {
  const std::vector<double> halves = cuflash::io::to_double(sixteen_bit_array(
      {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x8000, 0x7c00, 0xfc00, 0x3555},
      ElementType::f16));
  const std::vector<double> expected_halves = {
      1.0, -2.0, 65504.0, pow2(-24), 1023 * pow2(-24), pow2(-14), -0.0, kInf, -kInf,
      0x555 * pow2(-12)};  // 0x3555: 2^-2 * (1 + 0x155 / 1024)
  REQUIRE(halves.size() == expected_halves.size());
  for (size_t i = 0; i < halves.size(); ++i) CHECK(same_value(halves[i], expected_halves[i]));
  CHECK(std::isnan(cuflash::io::to_double(sixteen_bit_array({0x7e00}, ElementType::f16))[0]));

  const std::vector<double> bf16s = cuflash::io::to_double(sixteen_bit_array(
      {0x3f80, 0xc049, 0x7f7f, 0x0001, 0x8000, 0x7f80}, ElementType::bf16));
  const std::vector<double> expected_bf16s = {
      1.0, -3.140625, 0xff * pow2(120), pow2(-133), -0.0, kInf};
  REQUIRE(bf16s.size() == expected_bf16s.size());
  for (size_t i = 0; i < bf16s.size(); ++i) CHECK(same_value(bf16s[i], expected_bf16s[i]));
  CHECK(std::isnan(cuflash::io::to_double(sixteen_bit_array({0x7fc0}, ElementType::bf16))[0]));
}

TEST_CASE("convert: fp32 and fp64 widen exactly", "[convert]") {
  const std::vector<float> floats = {1.5f, -0.0f, 3.4028235e38f, 1.4e-45f, 0.1f};
  const std::vector<double> widened = cuflash::io::to_double(wide_array(floats, ElementType::f32));
  for (size_t i = 0; i < floats.size(); ++i) CHECK(same_value(widened[i], floats[i]));

  const std::vector<double> doubles = {0.1, -1e300, 5e-324, -0.0, kInf};
  CHECK(cuflash::io::to_double(wide_array(doubles, ElementType::f64)) == doubles);
}

TEST_CASE("convert: fp16 narrowing rounds once, to nearest even", "[convert]") {
  const ElementType f16 = ElementType::f16;
  CHECK(bits_of(1.0, f16) == 0x3c00);
  CHECK(bits_of(1 + pow2(-11), f16) == 0x3c00);                // tie: down to even
  CHECK(bits_of(1 + 3 * pow2(-11), f16) == 0x3c02);            // tie: up to even
  CHECK(bits_of(1 + pow2(-11) + pow2(-40), f16) == 0x3c01);    // just above a tie: up
  CHECK(bits_of(1 + 3 * pow2(-11) - pow2(-40), f16) == 0x3c01);  // just below a tie: down
  CHECK(bits_of(-(1 + pow2(-11) + pow2(-40)), f16) == 0xbc01);
  CHECK(bits_of(65504.0, f16) == 0x7bff);
  CHECK(bits_of(65519.99, f16) == 0x7bff);
  CHECK(bits_of(65520.0, f16) == 0x7c00);  // the tie above the largest value overflows
  CHECK(bits_of(1e300, f16) == 0x7c00);
  CHECK(bits_of(-kInf, f16) == 0xfc00);
  CHECK(bits_of(pow2(-24), f16) == 0x0001);
  CHECK(bits_of(pow2(-25), f16) == 0x0000);                 // tie with zero: even
  CHECK(bits_of(pow2(-25) + pow2(-60), f16) == 0x0001);     // above it: smallest subnormal
  CHECK(bits_of(3 * pow2(-25), f16) == 0x0002);
  CHECK(bits_of(1e-300, f16) == 0x0000);
  CHECK(bits_of(-1e-300, f16) == 0x8000);
  CHECK(bits_of(-0.0, f16) == 0x8000);
  const uint16_t nan = bits_of(kNaN, f16);
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
}

TEST_CASE("convert: bf16 narrowing rounds once, to nearest even", "[convert]") {
  const ElementType bf16 = ElementType::bf16;
  CHECK(bits_of(1.0, bf16) == 0x3f80);
  CHECK(bits_of(1 + pow2(-8), bf16) == 0x3f80);                // tie: down to even
  CHECK(bits_of(1 + 3 * pow2(-8), bf16) == 0x3f82);            // tie: up to even
  CHECK(bits_of(1 + pow2(-8) + pow2(-40), bf16) == 0x3f81);    // just above a tie
  CHECK(bits_of(1 + 3 * pow2(-8) - pow2(-40), bf16) == 0x3f81);  // just below a tie
  CHECK(bits_of(3.14159265358979, bf16) == 0x4049);
  CHECK(bits_of(1e300, bf16) == 0x7f80);
  CHECK(bits_of(-1e300, bf16) == 0xff80);
  CHECK(bits_of(pow2(-133), bf16) == 0x0001);
  CHECK(bits_of(pow2(-134), bf16) == 0x0000);                // tie with zero: even
  CHECK(bits_of(pow2(-134) + pow2(-180), bf16) == 0x0001);   // above it
  CHECK(bits_of(1e-300, bf16) == 0x0000);
  CHECK(bits_of(-0.0, bf16) == 0x8000);
  const uint16_t nan = bits_of(kNaN, bf16);
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x007f) != 0);
}

TEST_CASE("convert: fp32 narrowing is a cast, fp64 is exact", "[convert]") {
  const std::vector<double> values = {1 + pow2(-24), 1 + pow2(-24) + pow2(-50), 0.1, -1e300};
  const std::vector<double> floats =
      cuflash::io::to_double(cuflash::io::from_double(values, {4}, ElementType::f32));
  CHECK(floats[0] == 1.0);
  CHECK(floats[1] == 1 + pow2(-23));
  CHECK(floats[2] == static_cast<double>(0.1f));
  CHECK(floats[3] == -kInf);
  CHECK(cuflash::io::to_double(cuflash::io::from_double(values, {2, 2}, ElementType::f64)) ==
        values);
}

TEST_CASE("convert: every fp16 and bf16 value survives a trip through double", "[convert]") {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (const ElementType type : {ElementType::f16, ElementType::bf16}) {
    INFO(cuflash::io::to_string(type));
    const std::vector<double> values = cuflash::io::to_double(sixteen_bit_array(all, type));
    const NpyArray back = cuflash::io::from_double(values, {65536}, type);
    const std::vector<double> back_values = cuflash::io::to_double(back);
    size_t mismatches = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const uint16_t bits = static_cast<uint16_t>(back.bytes[2 * i] | back.bytes[2 * i + 1] << 8);
      // A NaN must stay a NaN; its payload may be quieted.
      const bool same = std::isnan(values[i]) ? std::isnan(back_values[i]) : bits == all[i];
      if (!same) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("convert: the narrowing agrees with cuflash/numeric.h on floats", "[convert]") {
  // Values that are already floats round once either way, so both paths must agree.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997 * 4099) {
    const float x = cuflash::numeric::bits_float(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    CHECK(bits_of(x, ElementType::f16) == cuflash::numeric::float_to_half_bits(x));
    CHECK(bits_of(x, ElementType::bf16) == cuflash::numeric::float_to_bf16_bits(x));
  }
}

TEST_CASE("convert: element counts and size mismatches", "[convert]") {
  NpyArray array;
  CHECK(array.element_count() == 1);  // shape (): a scalar
  array.shape = {3, 0, 5};
  CHECK(array.element_count() == 0);
  array.shape = {2, 3, 4};
  CHECK(array.element_count() == 24);
  array.shape = {int64_t(1) << 40, int64_t(1) << 40};
  CHECK_THROWS_WITH(array.element_count(), StartsWith("element_count: ") && Contains("too large"));
  array.shape = {-1};
  CHECK_THROWS_WITH(array.element_count(), Contains("negative dimension"));

  NpyArray short_data;
  short_data.type = ElementType::f32;
  short_data.shape = {2};
  short_data.bytes.resize(7);
  CHECK_THROWS_WITH(cuflash::io::to_double(short_data),
                    StartsWith("to_double: ") && Contains("holds 7 bytes"));
  CHECK_THROWS_WITH(cuflash::io::from_double({1.0, 2.0, 3.0}, {2, 2}, ElementType::f16),
                    StartsWith("from_double: ") &&
                        Contains("3 values given for a shape of 4 elements"));
  CHECK_THROWS_AS(cuflash::io::from_double({}, {-4}, ElementType::f16), NpyError);
}

TEST_CASE("convert: to_bhsd_values and from_bhsd_values reorder bshd tensors in one pass",
          "[convert]") {
  const int64_t batch = 2, heads = 3, seq = 4, head_dim = 5;
  std::vector<double> bhsd(static_cast<size_t>(batch * heads * seq * head_dim));
  for (size_t i = 0; i < bhsd.size(); ++i) bhsd[i] = static_cast<double>(i);
  const std::vector<int64_t> bhsd_shape{batch, heads, seq, head_dim};

  const NpyArray bshd = cuflash::io::from_bhsd_values(bhsd, bhsd_shape, cuflash::Layout::bshd,
                                                      ElementType::f32);
  CHECK(bshd.shape == std::vector<int64_t>{batch, seq, heads, head_dim});
  const std::vector<double> stored = cuflash::io::to_double(bshd);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < head_dim; ++d) {
          CHECK(stored[static_cast<size_t>(((b * seq + s) * heads + h) * head_dim + d)] ==
                bhsd[static_cast<size_t>(((b * heads + h) * seq + s) * head_dim + d)]);
        }
  CHECK(cuflash::io::to_bhsd_values(bshd, cuflash::Layout::bshd) == bhsd);

  const NpyArray same = cuflash::io::from_bhsd_values(bhsd, bhsd_shape, cuflash::Layout::bhsd,
                                                      ElementType::f64);
  CHECK(same.shape == bhsd_shape);
  CHECK(cuflash::io::to_double(same) == bhsd);
  CHECK(cuflash::io::to_bhsd_values(same, cuflash::Layout::bhsd) == bhsd);

  CHECK_THROWS_AS(cuflash::io::to_bhsd_values(cuflash::io::from_double(bhsd, {120}, ElementType::f32),
                                              cuflash::Layout::bhsd),
                  NpyError);
  CHECK_THROWS_AS(cuflash::io::from_bhsd_values({1.0}, bhsd_shape, cuflash::Layout::bhsd,
                                                ElementType::f32),
                  NpyError);
}

TEST_CASE("convert: large arrays split over the cores round-trip exactly",
          "[convert]") {
  // Above the size at which conversions split over the cores, with a length that does not
  // divide evenly.
  const size_t count = (size_t{1} << 22) + 7;
  // Integers of magnitude below 256 are exact in every type, so a round trip must give them
  // back unchanged wherever the ranges split.
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i % 511) - 255;
  for (const ElementType type : {ElementType::f16, ElementType::bf16, ElementType::f32}) {
    const NpyArray array = cuflash::io::from_double(values, {static_cast<int64_t>(count)}, type);
    CHECK(cuflash::io::to_double(array) == values);
  }
}
