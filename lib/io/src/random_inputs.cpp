#include "cuflash/io/random_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "cuflash/io/parallel.h"
#include "cuflash/numeric.h"

namespace cuflash::io {

namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr double kInv2Pow24 = 1.0 / 16777216.0;
constexpr size_t kElementsPerThreadMin = size_t{1} << 20;  // below this, threads cost more
constexpr size_t kFlatRowLength = size_t{1} << 16;         // rows of a flat fill (even)

// The two normals of pair `pair`: Box-Muller with u1 in (0, 1] (so log(u1) is finite) and
// u2 in [0, 1), through the factors of the header (the GPU copy of bench uses the same ones).
void normal_pair(uint64_t key, uint64_t pair, float& first, float& second) {
  const uint64_t bits = splitmix64(key + pair);
  const double radius = normal_radius(radius_index(bits));
  first = static_cast<float>(radius * normal_cosine(angle_index(bits)));
  second = static_cast<float>(radius * normal_sine(angle_index(bits)));
}

// Element i of a tensor is the element of index i; rows of consecutive indices go to
// consecutive memory positions: index `row * row_length + j` (j < row_length, and the index
// below `count`) is stored at position `row_start(row) + j`. `store(position, value)` writes one
// value; rows [first, end) are filled.
template <class RowStart, class Store>
void fill_rows(size_t first, size_t end, size_t row_length, size_t count, uint64_t key,
               const RowStart& row_start, const Store& store) {
  float a = 0, b = 0;
  for (size_t row = first; row < end; ++row) {
    const size_t begin = row * row_length;
    const size_t length = std::min(row_length, count - begin);
    const size_t at = row_start(row);
    size_t j = 0;
    if (begin % 2 == 1 && length > 0) {  // the row starts with the second value of a pair
      normal_pair(key, begin / 2, a, b);
      store(at, b);
      j = 1;
    }
    for (; j + 1 < length; j += 2) {
      normal_pair(key, (begin + j) / 2, a, b);
      store(at + j, a);
      store(at + j + 1, b);
    }
    if (j < length) {
      normal_pair(key, (begin + j) / 2, a, b);
      store(at + j, a);
    }
  }
}

// Runs fill_rows over all rows, split over the CPU cores when there is enough work.
template <class RowStart, class Store>
void fill(size_t count, size_t row_length, uint64_t key, const RowStart& row_start,
          const Store& store) {
  const size_t rows = (count + row_length - 1) / row_length;
  parallel_ranges(rows, std::max<size_t>(1, kElementsPerThreadMin / row_length),
                  [&](size_t first, size_t end) {
                    fill_rows(first, end, row_length, count, key, row_start, store);
                  });
}

// Stores values as raw elements of `dtype` at `out`.
struct ByteStore {
  unsigned char* out;
  DType dtype;
  void operator()(size_t position, float value) const {
    switch (dtype) {
      case DType::fp32:
        std::memcpy(out + 4 * position, &value, 4);
        return;
      case DType::fp16: {
        const uint16_t h = numeric::float_to_half_bits(value);
        std::memcpy(out + 2 * position, &h, 2);
        return;
      }
      case DType::bf16: {
        const uint16_t b = numeric::float_to_bf16_bits(value);
        std::memcpy(out + 2 * position, &b, 2);
        return;
      }
    }
  }
};

// Stores values rounded to `dtype` as doubles at `out`.
struct DoubleStore {
  double* out;
  DType dtype;
  void operator()(size_t position, float value) const {
    out[position] = dtype == DType::fp16   ? numeric::round_to_half(value)
                    : dtype == DType::bf16 ? numeric::round_to_bf16(value)
                                           : value;
  }
};

// Fills the tensor with rows of head_dim values, each placed where `layout` keeps it.
template <class Store>
void fill_tensor(const InputDims& d, Layout layout, uint64_t key, const Store& store) {
  const auto row_start = [&d, layout](size_t row) {  // row = (b * heads + h) * seq + s
    return input_position(d, layout == Layout::bhsd, row * d.head_dim);
  };
  fill(d.elements(), d.head_dim, key, row_start, store);
}

}  // namespace

double normal_radius(uint32_t index) {
  return std::sqrt(-2.0 * std::log(double(uint64_t{index} + 1) * kInv2Pow24));
}
double normal_cosine(uint32_t index) { return std::cos(kTwoPi * (double(index) * kInv2Pow24)); }
double normal_sine(uint32_t index) { return std::sin(kTwoPi * (double(index) * kInv2Pow24)); }

const NormalTables& normal_tables() {
  static const NormalTables tables = [] {
    NormalTables t;
    t.radius.resize(kNormalTableSize);
    t.cosine.resize(kNormalTableSize);
    t.sine.resize(kNormalTableSize);
    parallel_ranges(kNormalTableSize, kElementsPerThreadMin / 4, [&t](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        t.radius[i] = normal_radius(uint32_t(i));
        t.cosine[i] = normal_cosine(uint32_t(i));
        t.sine[i] = normal_sine(uint32_t(i));
      }
    });
    return t;
  }();
  return tables;
}

InputDims input_dims(const Problem& problem, InputTensor tensor) {
  const AttentionShape& s = problem.shape;
  const bool q_side = tensor == InputTensor::q || tensor == InputTensor::dout;
  const int64_t heads = q_side ? s.heads : s.heads_kv;
  const int64_t seq = q_side ? s.seq_q : s.seq_k;
  for (const int64_t dim : {s.batch, heads, seq, s.head_dim}) {
    if (dim <= 0) {
      throw std::invalid_argument("random inputs: the problem's sizes must be positive");
    }
  }
  return {size_t(s.batch), size_t(heads), size_t(seq), size_t(s.head_dim)};
}

std::vector<unsigned char> random_input_bytes(const Problem& problem, InputTensor tensor,
                                              uint64_t seed) {
  const InputDims d = input_dims(problem, tensor);
  std::vector<unsigned char> bytes(d.elements() * size_t(dtype_size(problem.dtype)));
  fill_tensor(d, problem.layout, stream_key(seed, uint64_t(tensor)),
              ByteStore{bytes.data(), problem.dtype});
  return bytes;
}

std::vector<double> random_input_values(const Problem& problem, InputTensor tensor,
                                        uint64_t seed) {
  const InputDims d = input_dims(problem, tensor);
  std::vector<double> values(d.elements());
  fill_tensor(d, Layout::bhsd, stream_key(seed, uint64_t(tensor)),
              DoubleStore{values.data(), problem.dtype});
  return values;
}

std::vector<unsigned char> standard_normal_bytes(size_t count, DType dtype, uint64_t seed,
                                                 uint64_t stream) {
  std::vector<unsigned char> bytes(count * size_t(dtype_size(dtype)));
  fill(count, kFlatRowLength, stream_key(seed, stream),
       [](size_t row) { return row * kFlatRowLength; }, ByteStore{bytes.data(), dtype});
  return bytes;
}

float standard_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  float first = 0, second = 0;
  normal_pair(stream_key(seed, stream), index / 2, first, second);
  return index % 2 ? second : first;
}

}  // namespace cuflash::io
