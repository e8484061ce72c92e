// The seeded input generator (io/random_inputs.h) that `run`, `verify`, `bench` and the GPU
// tests share: fixed values, independence from the thread split and from the layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuflash/io/convert.h"
#include "cuflash/io/random_inputs.h"
#include "cuflash/numeric.h"

using namespace cuflash;
using io::InputTensor;

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

std::string hex(const std::vector<unsigned char>& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string text;
  for (const unsigned char b : bytes) {
    text += kDigits[b >> 4];
    text += kDigits[b & 15];
  }
  return text;
}

Problem problem(DType dtype, Layout layout, int64_t head_dim) {
  Problem p;
  p.shape = AttentionShape{2, 4, 2, 5, 7, head_dim};
  p.dtype = dtype;
  p.layout = layout;
  return p;
}

double rounded(DType dtype, float x) {
  return dtype == DType::fp16   ? numeric::round_to_half(x)
         : dtype == DType::bf16 ? numeric::round_to_bf16(x)
                                : x;
}

std::vector<double> values_of(const std::vector<unsigned char>& bytes, DType dtype) {
  io::NpyArray array;
  array.type = io::element_type(dtype);
  array.shape = {static_cast<int64_t>(bytes.size() / io::element_size(array.type))};
  array.bytes = bytes;
  return io::to_double(array);
}

}  // namespace

TEST_CASE("random inputs: the values are fixed for a seed and stream", "[random_inputs]") {
  // The generator's values since it was written (as `cuflash bench`'s): results and result
  // packages made with a seed stay reproducible.
  const uint32_t seed0_stream1[] = {0xbdf195f6, 0xbf0d8bda, 0x3fa10024, 0x3d4c0c20};
  const uint32_t seed7_stream4[] = {0xbfbf5d79, 0xbf6adcde, 0xbd3e9790, 0x3f16cf53};
  for (uint64_t i = 0; i < 4; ++i) {
    CHECK(bits_of(io::standard_normal_at(0, 1, i)) == seed0_stream1[i]);
    CHECK(bits_of(io::standard_normal_at(7, 4, i)) == seed7_stream4[i]);
  }
  CHECK(hex(io::standard_normal_bytes(6, DType::bf16, 3, 2)) == "72bf49be8cbc67bf313fcabe");
}

TEST_CASE("random inputs: standard normals, the same however the work is split",
          "[random_inputs]") {
  const size_t count = (size_t{1} << 21) + 3;  // several threads, an odd tail
  const auto bytes = io::standard_normal_bytes(count, DType::fp32, 7, 1);
  REQUIRE(bytes.size() == 4 * count);
  double sum = 0, squares = 0;
  size_t zeros = 0;
  size_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    float x;
    std::memcpy(&x, &bytes[4 * i], 4);
    sum += x;
    squares += double(x) * x;
    zeros += x == 0.0f;
    mismatches += bits_of(x) != bits_of(io::standard_normal_at(7, 1, i));
  }
  CHECK(std::abs(sum / double(count)) < 0.01);
  CHECK(std::sqrt(squares / double(count)) == Approx(1.0).margin(0.01));
  CHECK(zeros == 0);
  CHECK(mismatches == 0);
  CHECK(io::standard_normal_at(7, 2, 0) != io::standard_normal_at(7, 1, 0));  // tensors differ
  CHECK(io::standard_normal_at(8, 1, 0) != io::standard_normal_at(7, 1, 0));  // seeds differ
  const auto half = io::standard_normal_bytes(5, DType::fp16, 7, 1);
  const auto bf16 = io::standard_normal_bytes(5, DType::bf16, 7, 1);
  REQUIRE(half.size() == 10);
  for (size_t i = 0; i < 5; ++i) {
    uint16_t h, b;
    std::memcpy(&h, &half[2 * i], 2);
    std::memcpy(&b, &bf16[2 * i], 2);
    CHECK(h == numeric::float_to_half_bits(io::standard_normal_at(7, 1, i)));
    CHECK(b == numeric::float_to_bf16_bits(io::standard_normal_at(7, 1, i)));
  }
}

TEST_CASE("random inputs: a problem's tensors, in either layout, as bytes or as values",
          "[random_inputs]") {
  const InputTensor tensors[] = {InputTensor::q, InputTensor::k, InputTensor::v,
                                 InputTensor::dout};
  for (const DType dtype : {DType::fp16, DType::bf16, DType::fp32}) {
    // An odd head_dim: Box-Muller pairs straddle rows.
    for (const int64_t head_dim : {int64_t{3}, int64_t{8}}) {
      const Problem bhsd = problem(dtype, Layout::bhsd, head_dim);
      const Problem bshd = problem(dtype, Layout::bshd, head_dim);
      for (const InputTensor tensor : tensors) {
        const bool q_side = tensor == InputTensor::q || tensor == InputTensor::dout;
        const int64_t heads = q_side ? 4 : 2, seq = q_side ? 5 : 7;
        INFO(to_string(dtype) << " D=" << head_dim << " tensor " << uint64_t(tensor));
        const std::vector<double> values = io::random_input_values(bhsd, tensor, 11);
        REQUIRE(values.size() == size_t(2 * heads * seq * head_dim));
        size_t wrong = 0;
        for (size_t i = 0; i < values.size(); ++i) {
          wrong += values[i] != rounded(dtype, io::standard_normal_at(11, uint64_t(tensor), i));
        }
        CHECK(wrong == 0);
        // The values are the layout's bytes, in bhsd order.
        CHECK(values_of(io::random_input_bytes(bhsd, tensor, 11), dtype) == values);
        io::NpyArray stored;
        stored.type = io::element_type(dtype);
        stored.shape = {2, seq, heads, head_dim};
        stored.bytes = io::random_input_bytes(bshd, tensor, 11);
        CHECK(io::to_bhsd_values(stored, Layout::bshd) == values);
      }
    }
  }
  const Problem p = problem(DType::fp32, Layout::bhsd, 8);
  Problem same_sizes = p;
  same_sizes.shape.heads_kv = 4;
  same_sizes.shape.seq_k = 5;  // K has Q's sizes: the streams still differ
  CHECK(io::random_input_values(same_sizes, InputTensor::q, 1) !=
        io::random_input_values(same_sizes, InputTensor::k, 1));
  CHECK(io::random_input_values(p, InputTensor::q, 1) !=
        io::random_input_values(p, InputTensor::q, 2));
  Problem empty = p;
  empty.shape.seq_k = 0;
  CHECK_THROWS_AS(io::random_input_bytes(empty, InputTensor::k, 1), std::invalid_argument);
}

TEST_CASE("random inputs: a large bshd tensor split over threads", "[random_inputs]") {
  Problem p;
  p.shape = AttentionShape{1, 4, 4, 200003, 200003, 3};  // 2.4M elements, rows of 3
  p.dtype = DType::fp32;
  p.layout = Layout::bshd;
  const std::vector<unsigned char> bytes = io::random_input_bytes(p, InputTensor::v, 5);
  const auto& s = p.shape;
  REQUIRE(bytes.size() == size_t(s.kv_elements()) * 4);
  size_t wrong = 0;
  for (int64_t h = 0; h < s.heads_kv; ++h) {
    for (int64_t row = 0; row < s.seq_k; ++row) {
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const uint64_t index = uint64_t((h * s.seq_k + row) * s.head_dim + d);  // bhsd order
        const size_t position = size_t((row * s.heads_kv + h) * s.head_dim + d);  // bshd memory
        float x;
        std::memcpy(&x, &bytes[4 * position], 4);
        wrong += bits_of(x) != bits_of(io::standard_normal_at(5, uint64_t(InputTensor::v), index));
      }
    }
  }
  CHECK(wrong == 0);
}

// bench makes its inputs on the GPU from the tables of the generator's factors
// (bench/device_inputs.cu): the tables and the steps of the header must give every value.
TEST_CASE("random inputs: the generator's tables give its bits", "[random_inputs]") {
  const io::NormalTables& tables = io::normal_tables();
  REQUIRE(tables.radius.size() == io::kNormalTableSize);
  REQUIRE(tables.cosine.size() == io::kNormalTableSize);
  REQUIRE(tables.sine.size() == io::kNormalTableSize);
  for (const uint64_t stream : {uint64_t{1}, uint64_t{4}}) {
    const uint64_t seed = 1234 + stream;
    const uint64_t key = io::stream_key(seed, stream);
    size_t mismatches = 0;
    for (uint64_t index = 0; index < 1'000'000; ++index) {
      const uint64_t bits = io::splitmix64(key + index / 2);
      const double angle = index % 2 ? tables.sine[io::angle_index(bits)]
                                     : tables.cosine[io::angle_index(bits)];
      const float value = static_cast<float>(tables.radius[io::radius_index(bits)] * angle);
      mismatches += bits_of(value) != bits_of(io::standard_normal_at(seed, stream, index));
    }
    CHECK(mismatches == 0);
  }
  // The ends of the tables: u1 = 1 (radius 0) and u1 = 2^-24 (the largest radius); angle 0.
  CHECK(tables.radius[io::kNormalTableSize - 1] == 0.0);
  CHECK(tables.radius[0] == Approx(std::sqrt(2.0 * 24.0 * std::log(2.0))));
  CHECK(tables.cosine[0] == 1.0);
  CHECK(tables.sine[0] == 0.0);
}
