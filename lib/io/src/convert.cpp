// Element conversions between NpyArray bytes (little-endian) and double.
#include "cuflash/io/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "cuflash/io/parallel.h"
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

// Below this many elements a conversion stays on the calling thread.
constexpr size_t kElementsPerThread = size_t{1} << 20;

// The element count of `array`, checked against its bytes.
size_t checked_count(const NpyArray& array, const char* what) {
  const int64_t count = array.element_count();
  const size_t width = static_cast<size_t>(element_size(array.type));
  if (array.bytes.size() != static_cast<size_t>(count) * width) {
    throw NpyError(std::string(what) + ": array holds " + std::to_string(array.bytes.size()) +
                   " bytes but its shape needs " + std::to_string(count) + " elements of " +
                   to_string(array.type));
  }
  return static_cast<size_t>(count);
}

// An array of `shape` and `type` with room for exactly `count` elements.
NpyArray sized_array(size_t count, std::vector<int64_t> shape, ElementType type,
                     const char* what) {
  NpyArray array;
  array.type = type;
  array.shape = std::move(shape);
  const int64_t expected = array.element_count();
  if (count != static_cast<size_t>(expected)) {
    throw NpyError(std::string(what) + ": " + std::to_string(count) +
                   " values given for a shape of " + std::to_string(expected) + " elements");
  }
  array.bytes.resize(count * static_cast<size_t>(element_size(type)));
  return array;
}

// Where the rows of a 4-D tensor lie when it is stored in `layout`: row r of the [batch, heads,
// seq, head_dim] order (r = (b * heads + h) * seq + s) starts at element stored_start(r).
struct RowMap {
  size_t batch, heads, seq, row_length;
  Layout layout;

  size_t count() const { return batch * heads * seq; }
  size_t min_rows_per_thread() const {
    return std::max<size_t>(1, kElementsPerThread / std::max<size_t>(row_length, 1));
  }
  size_t stored_start(size_t row) const {
    if (layout == Layout::bhsd) return row * row_length;
    const size_t s = row % seq, bh = row / seq;
    const size_t h = bh % heads, b = bh / heads;
    return ((b * seq + s) * heads + h) * row_length;
  }
};

// The row map of an array of `stored_shape` ([batch, heads, seq, head_dim] for bhsd, [batch,
// seq, heads, head_dim] for bshd, [tokens, heads, head_dim] for thd: bshd of batch 1).
RowMap row_map(const std::vector<int64_t>& stored_shape, Layout layout, const char* what) {
  if (layout == Layout::thd) {
    if (stored_shape.size() != 3) {
      throw NpyError(std::string(what) + ": expected a 3-D tensor [tokens, heads, head_dim], "
                     "got " + std::to_string(stored_shape.size()) + "-D");
    }
    const auto at = [&](size_t i) { return static_cast<size_t>(stored_shape[i]); };
    return RowMap{1, at(1), at(0), at(2), layout};
  }
  if (stored_shape.size() != 4) {
    throw NpyError(std::string(what) + ": expected a 4-D tensor, got " +
                   std::to_string(stored_shape.size()) + "-D");
  }
  const auto at = [&](size_t i) { return static_cast<size_t>(stored_shape[i]); };
  return layout == Layout::bhsd ? RowMap{at(0), at(1), at(2), at(3), layout}
                                : RowMap{at(0), at(2), at(1), at(3), layout};
}

}  // namespace

double element_to_double(ElementType type, const unsigned char* bytes) {
  switch (type) {
    case ElementType::f16: return numeric::half_bits_to_float(load<uint16_t>(bytes));
    case ElementType::bf16: return numeric::bf16_bits_to_float(load<uint16_t>(bytes));
    case ElementType::f32: return load<float>(bytes);
    case ElementType::f64: return load<double>(bytes);
  }
  return 0.0;
}

std::vector<double> to_double(const NpyArray& array) {
  const size_t count = checked_count(array, "to_double");
  const size_t width = static_cast<size_t>(element_size(array.type));
  std::vector<double> values(count);
  parallel_ranges(count, kElementsPerThread, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      values[i] = element_to_double(array.type, &array.bytes[i * width]);
    }
  });
  return values;
}

NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type) {
  NpyArray array = sized_array(values.size(), std::move(shape), type, "from_double");
  const size_t width = static_cast<size_t>(element_size(type));
  parallel_ranges(values.size(), kElementsPerThread, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) double_to_element(values[i], type, &array.bytes[i * width]);
  });
  return array;
}

std::vector<double> to_bhsd_values(const NpyArray& array, Layout layout) {
  const size_t count = checked_count(array, "to_bhsd_values");
  const RowMap rows = row_map(array.shape, layout, "to_bhsd_values");
  const size_t width = static_cast<size_t>(element_size(array.type));
  std::vector<double> values(count);
  parallel_ranges(rows.count(), rows.min_rows_per_thread(), [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {
      const unsigned char* from = &array.bytes[rows.stored_start(row) * width];
      double* to = &values[row * rows.row_length];
      for (size_t j = 0; j < rows.row_length; ++j) to[j] = element_to_double(array.type, from + j * width);
    }
  });
  return values;
}

NpyArray from_bhsd_values(const std::vector<double>& values,
                          const std::vector<int64_t>& bhsd_shape, Layout layout,
                          ElementType type) {
  std::vector<int64_t> stored_shape = bhsd_shape;
  if (layout == Layout::bshd && stored_shape.size() == 4) std::swap(stored_shape[1], stored_shape[2]);
  if (layout == Layout::thd && stored_shape.size() == 4 && stored_shape[0] == 1) {
    stored_shape = {bhsd_shape[2], bhsd_shape[1], bhsd_shape[3]};  // [1, H, T, D] -> [T, H, D]
  }
  NpyArray array = sized_array(values.size(), stored_shape, type, "from_bhsd_values");
  const RowMap rows = row_map(stored_shape, layout, "from_bhsd_values");
  const size_t width = static_cast<size_t>(element_size(type));
  parallel_ranges(rows.count(), rows.min_rows_per_thread(), [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {
      const double* from = &values[row * rows.row_length];
      unsigned char* to = &array.bytes[rows.stored_start(row) * width];
      for (size_t j = 0; j < rows.row_length; ++j) double_to_element(from[j], type, to + j * width);
    }
  });
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

}  // namespace cuflash::io
