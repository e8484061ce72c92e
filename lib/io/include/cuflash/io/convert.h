// Host-side conversion between stored element types and double, used by the CLI and the tests.
// Narrowing rounds once, to nearest even: fp16 and bf16 through cuflash/numeric.h (without the
// double -> float -> half double rounding), fp32 by a cast; fp64 is exact. Widening is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/io/npy.h"
#include "cuflash/types.h"

namespace cuflash::io {

// The stored element type of an attention dtype.
ElementType element_type(DType dtype);

// One double per element, in C order. Throws NpyError when the bytes do not match the shape.
std::vector<double> to_double(const NpyArray& array);
// Throws NpyError when values.size() is not the element count of `shape`.
NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type);

// The C-order [outer, a, b, inner] tensor `values` reordered as [outer, b, a, inner]: the
// [batch, heads, seq, head_dim] <-> [batch, seq, heads, head_dim] change of layout (swapping the
// same two sizes back undoes it). Throws NpyError when values.size() is not the product.
std::vector<double> swap_middle_axes(const std::vector<double>& values, int64_t outer, int64_t a,
                                     int64_t b, int64_t inner);

}  // namespace cuflash::io
