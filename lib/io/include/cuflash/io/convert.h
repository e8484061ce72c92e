// Host-side conversion between stored element types and double (round to nearest even when
// narrowing, through cuflash/numeric.h), used by the CLI and the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "cuflash/io/npy.h"

namespace cuflash::io {

std::vector<double> to_double(const NpyArray& array);
NpyArray from_double(const std::vector<double>& values, std::vector<int64_t> shape,
                     ElementType type);

}  // namespace cuflash::io
