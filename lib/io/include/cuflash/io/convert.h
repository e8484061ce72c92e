// Host-side conversion between stored element types and double, used by the CLI and the tests.
// Narrowing rounds once, to nearest even: fp16 and bf16 through cuflash/numeric.h (without the
// double -> float -> half double rounding), fp32 by a cast; fp64 is exact. Widening is exact.
// Large arrays are converted on all CPU cores.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/io/npy.h"
#include "cuflash/problem.h"
#include "cuflash/types.h"

namespace cuflash::io {

// The stored element type of an attention dtype.
ElementType element_type(DType dtype);

// The value of one element of `type` at `bytes` (little-endian).
double element_to_double(ElementType type, const unsigned char* bytes);

// One double per element, in C order. Throws NpyError when the bytes do not match the shape.
std::vector<double> to_double(const NpyArray& array);
// Throws NpyError when values.size() is not the element count of `shape`.
NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type);

// The values of a 4-D tensor stored in `layout` (shape [batch, heads, seq, head_dim] for bhsd,
// [batch, seq, heads, head_dim] for bshd) in [batch, heads, seq, head_dim] order, decoded and
// reordered in one pass: the CPU reference's form of a tensor. A thd tensor is 3-D [tokens,
// heads, head_dim] (a varlen batch, Problem::seqlens_q) and comes out as [1, heads, tokens,
// head_dim]. Throws NpyError for an array of the wrong rank or whose bytes do not match its
// shape.
std::vector<double> to_bhsd_values(const NpyArray& array, Layout layout);
// The inverse: values in [batch, heads, seq, head_dim] order (of `bhsd_shape`) as an array of
// `type` stored in `layout`, each rounded once (thd: bhsd_shape [1, heads, tokens, head_dim]).
NpyArray from_bhsd_values(const std::vector<double>& values,
                          const std::vector<int64_t>& bhsd_shape, Layout layout,
                          ElementType type);

}  // namespace cuflash::io
