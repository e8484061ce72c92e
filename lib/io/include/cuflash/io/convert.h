// Host-side conversion between stored element types and double, used by the CLI and the tests.
// Narrowing rounds once, to nearest even: fp16 and bf16 through cuflash/numeric.h (without the
// double -> float -> half double rounding), fp32 by a cast; fp64 is exact. Widening is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/io/npy.h"

namespace cuflash::io {

// One double per element, in C order. Throws NpyError when the bytes do not match the shape.
std::vector<double> to_double(const NpyArray& array);
// Throws NpyError when values.size() is not the element count of `shape`.
NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type);

}  // namespace cuflash::io
