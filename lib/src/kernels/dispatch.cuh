// The one place that chooses a kernel family and its configuration for a launch:
//   - sm90 (wgmma + TMA), for fp16 / bf16, at the next of its head dims from 64 on (head_dims.h:
//     the forward's 96 runs on the 128 kernels, TMA filling the columns past 96 with zeros; the
//     backward's on 128-column tiles with products of 96 columns), on a
//     compute capability 9.0 device of a build with sm_90a (use_sm90_kernels()), when every
//     tensor can be described to TMA;
//   - sm80 (mma.sync, every dtype) otherwise and for a varlen batch's backward above head_dim
//     128, with its Narrow configuration where the grid would leave SMs without a CTA and the
//     device has the shared memory for it;
//   - before both, for dense fp16 / bf16 forward calls, the split-KV kernel (split/forward.cuh)
//     where split::plan_forward() routes them: short queries (the query heads of a kv head
//     stacked, at most a Wide block of rows or of queries: 64, 32 above head_dim 128), small
//     grids over long keys where the sm90 forward does not run, and forced key splits; where it
//     runs, the sm90 forward splits the keys of small grids itself (its key_splits kernel) and
//     the split kernel's merge combines them. The plan lives next to the kernel because
//     forward_workspace_size() reads it too.
// Each tiled family has a second instantiation (kVariants) for calls with a softcap, ALiBi or a
// window bounded on the left (uses_variant_kernels()), so that the default kernels carry none of
// their code and keep their registers: they serve no mask, the causal masks and windows bounded
// on the right only, which move the causal bound. In sm80 only for the default configuration,
// which keeps the number of kernels (and the build time) down. The sm90 forward has a third,
// for a window bounded on the left alone (sm90/forward.cuh, ForwardKernel).
// kHeadDim is the compiled head dim; the call's own (args.shape.head_dim) may be smaller
// (head_dims.h), which every family handles with zero columns. The sm90 kernels of a head dim
// are compiled in the instantiation files of each compiled head dim they serve (the forward's
// 128 in 96's too): simpler than sharing them, for a few more kernels to build.
// Included by the generated instantiation files, one per (direction, dtype, head_dim).
#pragma once

#include "dispatch.h"
#include "kernels/common/launch_util.cuh"
#include "kernels/sm80/backward.cuh"
#include "kernels/sm80/forward.cuh"
#include "kernels/sm80/traits.cuh"
#include "kernels/sm90/backward.cuh"
#include "kernels/sm90/backward_column_split.cuh"
#include "kernels/sm90/forward.cuh"
#include "kernels/sm90/traits.cuh"
#include "kernels/split/forward.cuh"
#include "kernels/split/plan.h"

namespace cuflash::detail {

// Whether the sm90 family runs on the current device.
inline bool use_sm90_kernels_here() {
  int device = 0;
  return cudaGetDevice(&device) == cudaSuccess && use_sm90_kernels(device);
}

// Calls launch(Config{}) with Traits::Narrow (Traits::NarrowCausal under a mask) when Traits has
// such variants, `ctas` (the grid of Traits itself) would leave SMs idle and the device has the
// variant's shared memory; with Traits itself otherwise.
template <typename Element, typename Traits, typename Launch>
void launch_with_config(int64_t ctas, bool masked, Launch&& launch) {
  if constexpr (sm80::has_narrow_config<Traits>) {
    if (ctas < current_device_limits().multiprocessors) {
      using Narrow = typename Traits::Narrow;
      using NarrowCausal = typename Traits::NarrowCausal;
      if (!masked && fits_dynamic_smem(Narrow::smem_bytes(sizeof(Element)))) {
        return launch(Narrow{});
      }
      if (masked && fits_dynamic_smem(NarrowCausal::smem_bytes(sizeof(Element)))) {
        return launch(NarrowCausal{});
      }
    }
  }
  launch(Traits{});
}

// Runs the split-KV kernel when the plan says so; false leaves the call to the tiled kernels.
template <typename Element, int kHeadDim>
bool launch_split_forward(const ForwardArgs& args, const split::ForwardPlan& plan,
                          cudaStream_t stream) {
  using Traits = split::SplitTraits<kHeadDim>;
  switch (plan.kernel) {
    case split::ForwardKernel::tiled: return false;
    case split::ForwardKernel::split_narrow:
      split::launch_split_forward<Element, typename Traits::Narrow>(args, plan.splits, stream);
      return true;
    case split::ForwardKernel::split_narrow_deep:
      split::launch_split_forward<Element, typename Traits::NarrowDeep>(args, plan.splits, stream);
      return true;
    case split::ForwardKernel::split_medium:
      split::launch_split_forward<Element, typename Traits::Medium>(args, plan.splits, stream);
      return true;
    case split::ForwardKernel::split_wide:
      split::launch_split_forward<Element, typename Traits::Wide>(args, plan.splits, stream);
      return true;
  }
  return false;
}

// A varlen batch (VarlenBatch) does not run on the split kernel (no per-sequence offsets); the
// sm90 forward takes it on its variant kernels. A plan for the tiled kernels with key splits is
// the sm90 forward's (split::plan_forward() with tiled_splits), whose partials the split
// kernel's merge combines; where the sm90 forward cannot take the call after all, the mma.sync
// kernels run it whole.
template <typename Element, int kHeadDim>
void launch_forward(const ForwardArgs& args, cudaStream_t stream) {
  const bool varlen = args.varlen.enabled();
  constexpr int kWgmmaHeadDim = wgmma_head_dim(kWgmmaForwardHeadDims, kHeadDim);
  [[maybe_unused]] split::ForwardPlan plan;  // tiled, one split
  if constexpr (sizeof(Element) == 2) {
    if (!varlen) {
      const bool tiled_splits = kWgmmaHeadDim != 0 && use_sm90_kernels_here();
      plan = split::plan_forward<kHeadDim>(args, current_device_limits(), tiled_splits);
      if (launch_split_forward<Element, kHeadDim>(args, plan, stream)) return;
    }
  }
  if constexpr (sizeof(Element) == 2 && kWgmmaHeadDim != 0) {
    if (use_sm90_kernels_here()) {
      const PartialOutputs partials =
          plan.splits > 1 ? split::partial_outputs(args, plan.splits) : PartialOutputs{};
      if (sm90::launch_forward<Element, kWgmmaHeadDim>(args, stream, partials)) {
        if (partials.splits > 1) split::merge_partial_outputs(args, partials, stream);
        return;
      }
    }
  }
  using Traits = sm80::ForwardTraits<kHeadDim, sizeof(Element)>;
  if (uses_variant_kernels(args)) return sm80::launch_forward<Element, Traits, true>(args, stream);
  const AttentionShape& s = args.shape;
  const int64_t ctas = ceil_div(s.seq_q, Traits::kBlockM) * s.batch * s.heads;
  launch_with_config<Element, Traits>(ctas, args.mask != Mask::none, [&](auto config) {
    sm80::launch_forward<Element, decltype(config), false>(args, stream);
  });
}

template <typename Element, int kHeadDim>
void launch_backward(const BackwardArgs& args, cudaStream_t stream) {
  constexpr int kWgmmaHeadDim = wgmma_head_dim(kWgmmaBackwardHeadDims, kHeadDim);
  if constexpr (sizeof(Element) == 2 && kWgmmaHeadDim != 0) {
    if (use_sm90_kernels_here() && sm90::launch_backward<Element, kWgmmaHeadDim>(args, stream)) {
      return;
    }
  }
  using Traits = sm80::BackwardTraits<kHeadDim, sizeof(Element)>;
  if (uses_variant_kernels(args)) return sm80::launch_backward<Element, Traits, true>(args, stream);
  const AttentionShape& s = args.shape;
  const int64_t ctas = ceil_div(s.seq_k, Traits::kBlockN) * s.batch * s.heads_kv;
  launch_with_config<Element, Traits>(ctas, args.mask != Mask::none, [&](auto config) {
    sm80::launch_backward<Element, decltype(config), false>(args, stream);
  });
}

}  // namespace cuflash::detail
