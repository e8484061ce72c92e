// Internal interface between the public API (api.cu) and the kernels: one launcher per
// direction x dtype x head_dim, each explicitly instantiated in its own generated file under
// instantiations/ (see share/scripts/generate_instantiations.py).
//
// Preconditions every launcher may rely on (api.cu guarantees them):
//   - all arguments validated (sizes, pointers, 16-byte alignment, strides, mask, dtype);
//   - args.scale is the effective softmax scale (> 0; 1/sqrt(head_dim) already substituted);
//   - backward: the workspace holds an fp32 dQ accumulator of batch*heads*seq_q*head_dim floats
//     at offset 0 ([B, H, Sq, D], contiguous), then, at the next 256-byte boundary, the row sums
//     D_i of batch*heads*seq_q floats ([B, H, Sq]); see split_workspace().
// Launchers enqueue work on `stream`; the caller checks cudaGetLastError() afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuflash/attention.h"
#include "cuflash/error.h"

namespace cuflash::detail {

// Head dimensions with compiled kernels (every dtype), in increasing order.
inline constexpr int kSupportedHeadDims[] = {32, 64, 128};

// Alignment of the sections of the backward workspace.
inline constexpr size_t kWorkspaceAlignment = 256;

constexpr size_t round_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// The mma.sync kernels, kernels/forward_tc.cuh and kernels/backward_tc.cuh: Element is __half,
// __nv_bfloat16 or float (split TF32); on sm_90a they hand fp16/bf16 at head_dim 64 and 128 to
// the wgmma kernels under kernels/sm90/.
template <typename Element, int kHeadDim>
void launch_forward_tc(const ForwardArgs& args, cudaStream_t stream);
template <typename Element, int kHeadDim>
void launch_backward_tc(const BackwardArgs& args, cudaStream_t stream);

// The two sections of the backward workspace.
struct BackwardWorkspace {
  float* dq_accum;  // [B, H, Sq, D] fp32, contiguous
  float* row_dot;   // [B, H, Sq] fp32: D_i = rowsum(dO_i * O_i)
};

inline size_t dq_accum_bytes(const AttentionShape& s) {
  const size_t elements = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads) *
                          static_cast<size_t>(s.seq_q) * static_cast<size_t>(s.head_dim);
  return round_up(elements * sizeof(float), kWorkspaceAlignment);
}

inline BackwardWorkspace split_workspace(const BackwardArgs& args) {
  auto* base = static_cast<unsigned char*>(args.workspace);
  return {reinterpret_cast<float*>(base),
          reinterpret_cast<float*>(base + dq_accum_bytes(args.shape))};
}

inline Error::Kind error_kind(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation: return Error::Kind::out_of_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return Error::Kind::no_device;
    default: return Error::Kind::cuda;
  }
}

// Throws cuflash::Error for a failed CUDA call (out_of_memory for allocation failures, no_device
// when there is no usable GPU, cuda otherwise); the message is "<what>: <CUDA's description>".
inline void throw_on_cuda_error(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(error_kind(status), std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace cuflash::detail
