// Seeded inputs: the one generator of `cuflash run` and `verify`, `cuflash bench` and the tests,
// so that a problem and a seed give the same bits everywhere.
//
// Values are standard normal (never all zeros, which would flatter the kernels), rounded to the
// problem's dtype. The generator is counter-based: element i of a tensor depends only on
// (seed, stream, i) -- Box-Muller on two 24-bit uniforms from splitmix64 of the pair index i / 2
// -- so the work splits over all CPU cores and the values are the same however it is split.
// The index i is the element's position in [batch, heads, seq, head_dim] (bhsd) order whatever
// the layout the bytes are stored in: a problem holds the same tensors in both layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuflash/problem.h"
#include "cuflash/types.h"

namespace cuflash::io {

// The generator stream of each input tensor of a problem.
enum class InputTensor : uint64_t { q = 1, k = 2, v = 3, dout = 4 };

// Tensor `tensor` of `problem` as raw elements of problem.dtype (2 or 4 bytes each), densely
// packed in problem.layout: Q and dO hold batch * heads * seq_q * head_dim elements, K and V
// batch * heads_kv * seq_k * head_dim.
std::vector<unsigned char> random_input_bytes(const Problem& problem, InputTensor tensor,
                                              uint64_t seed);

// The same values as float64 in bhsd order (each exactly a value of problem.dtype).
std::vector<double> random_input_values(const Problem& problem, InputTensor tensor,
                                        uint64_t seed);

// The building blocks, for tests: `count` elements of `dtype` of stream `stream` in index order,
// and the value of element `index` before rounding to a dtype.
std::vector<unsigned char> standard_normal_bytes(size_t count, DType dtype, uint64_t seed,
                                                 uint64_t stream);
float standard_normal_at(uint64_t seed, uint64_t stream, uint64_t index);

// [batch, heads, seq, head_dim] of an input tensor of `problem` (the bhsd order of its indices).
// Throws std::invalid_argument when a size is not positive.
struct InputDims {
  size_t batch, heads, seq, head_dim;
  size_t elements() const { return batch * heads * seq * head_dim; }
};
InputDims input_dims(const Problem& problem, InputTensor tensor);

// Where element `index` (bhsd order) of a tensor of `d` is stored: bhsd keeps the order, every
// other layout is placed as bshd (thd is bshd with batch 1).
constexpr size_t input_position(const InputDims& d, bool bhsd, size_t index) {
  if (bhsd) return index;
  const size_t column = index % d.head_dim, row = index / d.head_dim;  // (b * H + h) * S + s
  const size_t s = row % d.seq, bh = row / d.seq;
  const size_t h = bh % d.heads, b = bh / d.heads;
  return ((b * d.seq + s) * d.heads + h) * d.head_dim + column;
}

// The generator step by step, for a copy of it on the GPU (`cuflash bench` makes its inputs
// there) that must give the same bits. Element i of stream `key` is
//   bits = splitmix64(key + i / 2),
//   float(normal_radius(bits >> 40) * (i even ? normal_cosine : normal_sine)(bits & 0xFFFFFF))
// with the product in float64. The three factors take 2^24 values each, so tables of them
// (normal_tables()) let another processor reproduce every value with one IEEE multiply and one
// rounding, without its own log, cos and sin.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr uint64_t stream_key(uint64_t seed, uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ (stream * 0xD1B54A32D192ED03ull));
}
inline constexpr uint32_t kNormalTableSize = uint32_t{1} << 24;
constexpr uint32_t radius_index(uint64_t bits) { return uint32_t(bits >> 40); }
constexpr uint32_t angle_index(uint64_t bits) { return uint32_t(bits & (kNormalTableSize - 1)); }
double normal_radius(uint32_t index);  // sqrt(-2 log u1), u1 = (index + 1) / 2^24 in (0, 1]
double normal_cosine(uint32_t index);  // cos(2 pi u2), u2 = index / 2^24 in [0, 1)
double normal_sine(uint32_t index);    // sin(2 pi u2)

// The three factors at every index (3 x 2^24 doubles, 384 MB), computed once per process on
// all cores.
struct NormalTables {
  std::vector<double> radius, cosine, sine;
};
const NormalTables& normal_tables();

}  // namespace cuflash::io
