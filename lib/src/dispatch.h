// Internal interface between the public API (api.cu) and the kernels.
//
// api.cu validates every argument and then calls dispatch_forward() / dispatch_backward(), which
// pick the launcher compiled for (dtype, head_dim) (dispatch.cu). Each launcher,
// launch_forward<Element, kHeadDim> and launch_backward<Element, kHeadDim>, is defined in
// kernels/dispatch.cuh, which chooses the kernel family (sm90: wgmma + TMA; sm80: mma.sync) and
// its configuration, and is instantiated in its own generated file (sources.cmake).
//
// Preconditions every launcher may rely on (api.cu guarantees them):
//   - all arguments validated (sizes, pointers, 16-byte alignment, strides, mask, dtype);
//   - args.scale is the effective softmax scale (> 0; 1/sqrt(head_dim) already substituted);
//   - backward: the workspace is laid out as workspace.h describes;
//   - forward: args.workspace_bytes is 0 without a workspace, and a forced split count (> 1)
//     has its workspace (kernels/split/plan.h).
// Launchers enqueue work on `stream`; the caller checks cudaGetLastError() afterwards.
#pragma once

#include <cuda_runtime_api.h>

#include "cuflash/attention.h"

namespace cuflash::detail {

void dispatch_forward(const ForwardArgs& args, cudaStream_t stream);
void dispatch_backward(const BackwardArgs& args, cudaStream_t stream);
// merge_attention_partials() for out's dtype (merge.cu).
void dispatch_merge(const MergePartialsArgs& args, cudaStream_t stream);

// Element is __half, __nv_bfloat16 or float (split TF32 on the tensor cores).
template <typename Element, int kHeadDim>
void launch_forward(const ForwardArgs& args, cudaStream_t stream);
template <typename Element, int kHeadDim>
void launch_backward(const BackwardArgs& args, cudaStream_t stream);

// Whether the sm90 family (wgmma + TMA) runs on `device`: it was compiled (the architecture list
// holds 90a), the device has compute capability 9.0, and the environment variable
// CUFLASH_DISABLE_WGMMA is unset, empty or 0 (read once per process).
bool use_sm90_kernels(int device);

}  // namespace cuflash::detail
