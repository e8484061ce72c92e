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

}  // namespace cuflash::io
