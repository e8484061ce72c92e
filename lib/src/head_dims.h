// The head dimensions with compiled kernels, for every dtype and both directions: the one list.
// The launcher table (dispatch.cu), is_supported_head_dim() and supported_head_dims() are
// derived from it, and sources.cmake reads the line below to generate one instantiation file
// per (direction, dtype, head_dim), so keep it on one line.
#pragma once

namespace cuflash::detail {

inline constexpr int kHeadDims[] = {32, 64, 128};

}  // namespace cuflash::detail
