// Element conversions between NpyArray bytes (little-endian) and double.
#include "cuflash/io/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "cuflash/numeric.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "NpyArray bytes are little-endian and decoded with memcpy: little-endian hosts only");

namespace cuflash::io {
namespace {

template <typename T>
T load(const unsigned char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

template <typename T>
void store(T value, unsigned char* bytes) {
  std::memcpy(bytes, &value, sizeof value);
}

// double -> float, rounding toward zero and then setting the lowest mantissa bit whenever bits
// were dropped ("round to odd"). Rounding that float to fp16 or bf16 (nearest even) then gives
// the same result as rounding the double directly: the float keeps at least two more bits than
// either target, and the odd bit stands in for everything dropped, so a double just above or
// below a tie can never turn into an exact tie. A plain double -> float cast would round twice.
float round_to_odd_float(double x) {
  float f = static_cast<float>(x);  // nearest
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // toward 0
  return numeric::bits_float(numeric::float_bits(f) | 1u);
}

double element_to_double(ElementType type, const unsigned char* bytes) {
  switch (type) {
    case ElementType::f16: return numeric::half_bits_to_float(load<uint16_t>(bytes));
    case ElementType::bf16: return numeric::bf16_bits_to_float(load<uint16_t>(bytes));
    case ElementType::f32: return load<float>(bytes);
    case ElementType::f64: return load<double>(bytes);
  }
  return 0.0;
}

void double_to_element(double value, ElementType type, unsigned char* bytes) {
  switch (type) {
    case ElementType::f16:
      store(numeric::float_to_half_bits(round_to_odd_float(value)), bytes);
      return;
    case ElementType::bf16:
      store(numeric::float_to_bf16_bits(round_to_odd_float(value)), bytes);
      return;
    case ElementType::f32: store(static_cast<float>(value), bytes); return;
    case ElementType::f64: store(value, bytes); return;
  }
}

}  // namespace

std::vector<double> to_double(const NpyArray& array) {
  const int64_t count = array.element_count();
  const size_t width = static_cast<size_t>(element_size(array.type));
  if (array.bytes.size() != static_cast<size_t>(count) * width) {
    throw NpyError("to_double: array holds " + std::to_string(array.bytes.size()) +
                   " bytes but its shape needs " + std::to_string(count) + " elements of " +
                   to_string(array.type));
  }
  std::vector<double> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = element_to_double(array.type, &array.bytes[i * width]);
  }
  return values;
}

NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type) {
  NpyArray array;
  array.type = type;
  array.shape = std::move(shape);
  const int64_t count = array.element_count();
  if (values.size() != static_cast<size_t>(count)) {
    throw NpyError("from_double: " + std::to_string(values.size()) +
                   " values given for a shape of " + std::to_string(count) + " elements");
  }
  const size_t width = static_cast<size_t>(element_size(type));
  array.bytes.resize(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    double_to_element(values[i], type, &array.bytes[i * width]);
  }
  return array;
}

ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::fp16: return ElementType::f16;
    case DType::bf16: return ElementType::bf16;
    case DType::fp32: return ElementType::f32;
  }
  return ElementType::f32;
}

std::vector<double> swap_middle_axes(const std::vector<double>& values, int64_t outer, int64_t a,
                                     int64_t b, int64_t inner) {
  if (static_cast<int64_t>(values.size()) != outer * a * b * inner) {
    throw NpyError("swap_middle_axes: " + std::to_string(values.size()) + " values for a [" +
                   std::to_string(outer) + ", " + std::to_string(a) + ", " + std::to_string(b) +
                   ", " + std::to_string(inner) + "] tensor");
  }
  std::vector<double> out(values.size());
  for (int64_t n = 0; n < outer; ++n) {
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < b; ++j) {
        const auto from = values.begin() + ((n * a + i) * b + j) * inner;
        std::copy(from, from + inner, out.begin() + ((n * b + j) * a + i) * inner);
      }
    }
  }
  return out;
}

}  // namespace cuflash::io
