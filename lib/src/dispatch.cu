// The launcher table: (dtype, head_dim) of a validated call -> the launcher instantiation
// compiled for it, at compiled_head_dim(head_dim) (the call's head_dim itself, or the next
// compiled one, whose kernels treat the extra columns as zeros). The head dims come from
// head_dims.h; the instantiations are generated from the same list (sources.cmake).
#include "dispatch.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "head_dims.h"

namespace cuflash::detail {
namespace {

using ForwardLauncher = void (*)(const ForwardArgs&, cudaStream_t);
using BackwardLauncher = void (*)(const BackwardArgs&, cudaStream_t);

template <int kHeadDim>
ForwardLauncher forward_launcher(DType dtype) {
  switch (dtype) {
    case DType::fp16: return &launch_forward<__half, kHeadDim>;
    case DType::bf16: return &launch_forward<__nv_bfloat16, kHeadDim>;
    case DType::fp32: return &launch_forward<float, kHeadDim>;
  }
  return nullptr;
}

template <int kHeadDim>
BackwardLauncher backward_launcher(DType dtype) {
  switch (dtype) {
    case DType::fp16: return &launch_backward<__half, kHeadDim>;
    case DType::bf16: return &launch_backward<__nv_bfloat16, kHeadDim>;
    case DType::fp32: return &launch_backward<float, kHeadDim>;
  }
  return nullptr;
}

// The launcher of the listed head_dim that equals compiled_head_dim(head_dim) (validation
// guarantees one does).
template <size_t... kIndex>
ForwardLauncher forward_launcher(DType dtype, int64_t head_dim, std::index_sequence<kIndex...>) {
  ForwardLauncher launcher = nullptr;
  ((kHeadDims[kIndex] == head_dim ? (launcher = forward_launcher<kHeadDims[kIndex]>(dtype))
                                  : nullptr),
   ...);
  return launcher;
}

template <size_t... kIndex>
BackwardLauncher backward_launcher(DType dtype, int64_t head_dim,
                                   std::index_sequence<kIndex...>) {
  BackwardLauncher launcher = nullptr;
  ((kHeadDims[kIndex] == head_dim ? (launcher = backward_launcher<kHeadDims[kIndex]>(dtype))
                                  : nullptr),
   ...);
  return launcher;
}

constexpr auto kHeadDimIndices = std::make_index_sequence<std::size(kHeadDims)>{};

}  // namespace

void dispatch_forward(const ForwardArgs& args, cudaStream_t stream) {
  forward_launcher(args.dtype, compiled_head_dim(args.shape.head_dim), kHeadDimIndices)(args,
                                                                                        stream);
}

void dispatch_backward(const BackwardArgs& args, cudaStream_t stream) {
  backward_launcher(args.dtype, compiled_head_dim(args.shape.head_dim), kHeadDimIndices)(args,
                                                                                          stream);
}

bool use_sm90_kernels(int device) {
#if defined(CUFLASH_HAVE_SM90A)
  static const bool disabled = [] {
    const char* value = std::getenv("CUFLASH_DISABLE_WGMMA");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  int major = 0;
  int minor = 0;
  if (disabled ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return false;  // a launch that follows reports the device problem
  }
  return major == 9 && minor == 0;
#else
  (void)device;
  return false;
#endif
}

}  // namespace cuflash::detail
