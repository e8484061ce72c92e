// Host side of the split-KV forward: whether a forward call runs on the split kernel
// (split/forward.cuh) or the tiled ones, with how many key splits, and the workspace the
// splits' partial results take. forward() (through kernels/dispatch.cuh) and
// forward_workspace_size() read the same plan, so the size asked for is the size used.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuflash/attention.h"
#include "dispatch.h"
#include "head_dims.h"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/params.cuh"
#include "kernels/split/split_count.h"
#include "kernels/split/traits.cuh"
#include "workspace.h"

namespace cuflash::detail::split {

enum class ForwardKernel {
  tiled,              // the sm90 / sm80 kernels of one CTA per query block
  split_narrow,       // SplitTraits::Narrow: <= 16 packed rows per kv head
  split_narrow_deep,  // SplitTraits::NarrowDeep: the same rows where deep_pipeline_pays()
  split_medium,       // SplitTraits::Medium: <= 32 packed rows per kv head (where Wide has more)
  split_wide,         // SplitTraits::Wide: 64 packed rows per CTA (32 above head_dim 128)
};

struct ForwardPlan {
  ForwardKernel kernel = ForwardKernel::tiled;
  int64_t splits = 1;  // key splits per row block; > 1 only on the split kernel
};

// Rows a (batch, kv head) pair owns once its query heads are stacked: heads_per_kv * seq_q.
inline int64_t packed_rows(const AttentionShape& s) { return s.heads / s.heads_kv * s.seq_q; }

inline int64_t key_blocks(int64_t seq_k) { return ceil_div(seq_k, kBlockKeys); }

// --- Workspace: partial O [splits, B, H, Sq, D] fp32 at offset 0, then partial LSE
// [splits, B, H, Sq] fp32 at the next 256-byte boundary. Nothing without a split.

inline size_t partial_rows(const AttentionShape& s, int64_t splits) {
  return size_t(splits) * size_t(s.batch) * size_t(s.heads) * size_t(s.seq_q);
}

inline size_t partial_out_bytes(const AttentionShape& s, int64_t splits) {
  return round_up(partial_rows(s, splits) * size_t(s.head_dim) * sizeof(float),
                  kWorkspaceAlignment);
}

inline size_t forward_workspace_bytes(const AttentionShape& s, int64_t splits) {
  if (splits <= 1) return 0;
  return partial_out_bytes(s, splits) +
         round_up(partial_rows(s, splits) * sizeof(float), kWorkspaceAlignment);
}

// The partial results of `splits` key splits in the call's workspace: O [splits, B, H, Sq, D],
// then LSE [splits, B, H, Sq].
inline PartialOutputs partial_outputs(const ForwardArgs& args, int64_t splits) {
  auto* base = static_cast<unsigned char*>(args.workspace);
  return {splits, reinterpret_cast<float*>(base),
          reinterpret_cast<float*>(base + partial_out_bytes(args.shape, splits))};
}

// CTAs of Config one SM holds: those its registers were compiled for (kMinCtasPerSm), fewer
// where the device's shared memory per SM takes fewer.
template <typename Config>
int64_t ctas_per_sm(const DeviceLimits& limits) {
  constexpr size_t kReservedPerCta = 1024;  // the runtime's share of each CTA's shared memory
  const size_t by_smem = limits.smem_per_multiprocessor / (Config::kSmemBytes + kReservedPerCta);
  return std::clamp<int64_t>(int64_t(by_smem), 1, Config::kMinCtasPerSm);
}

// The split configuration for `rows` packed rows per kv head: the smallest that holds them in
// one CTA (the products cost every row of a configuration), Wide for more.
template <typename Traits>
ForwardKernel split_kernel_for_rows(int64_t rows) {
  if (rows <= Traits::Narrow::kBlockM) return ForwardKernel::split_narrow;
  if (rows <= Traits::Medium::kBlockM && Traits::Medium::kBlockM < Traits::Wide::kBlockM) {
    return ForwardKernel::split_medium;
  }
  return ForwardKernel::split_wide;
}

// What the plan needs of a split configuration.
struct SplitShape {
  int64_t block_rows;
  size_t smem_bytes;
  int64_t slots_per_sm;
};

template <typename Config>
SplitShape config_shape(const DeviceLimits& limits) {
  return {Config::kBlockM, Config::kSmemBytes, ctas_per_sm<Config>(limits)};
}

template <typename Traits>
SplitShape split_shape(ForwardKernel kernel, const DeviceLimits& limits) {
  switch (kernel) {
    case ForwardKernel::split_narrow: return config_shape<typename Traits::Narrow>(limits);
    case ForwardKernel::split_narrow_deep:
      return config_shape<typename Traits::NarrowDeep>(limits);
    case ForwardKernel::split_medium: return config_shape<typename Traits::Medium>(limits);
    default: return config_shape<typename Traits::Wide>(limits);
  }
}

// Query rows of a tiled kernel's CTA (the sm90 forward's 128; the mma.sync kernels' 64-128).
inline constexpr int64_t kTiledBlockRows = 128;

inline int64_t tiled_ctas(const AttentionShape& s) {
  return ceil_div(s.seq_q, kTiledBlockRows) * s.batch * s.heads;
}

// Whether the tiled kernels' grid would leave most SMs idle on a key sequence long enough for
// splitting to pay: B=1, H=8, 1k x 128k gets 64 CTAs.
inline bool tiled_grid_is_small(const AttentionShape& s, const DeviceLimits& limits) {
  constexpr int64_t kMinSplitKeys = 8192;
  return 2 * tiled_ctas(s) <= limits.multiprocessors && s.seq_k >= kMinSplitKeys;
}

// Key splits of the sm90 forward on a small grid: one wave of one CTA per SM (the kernel's
// occupancy), each split at least kMinTiledSplitBlocks blocks of 64 keys, so that a CTA's loop
// outlasts its prologue and epilogue.
inline constexpr int64_t kMinTiledSplitBlocks = 16;
inline int64_t tiled_key_splits(const AttentionShape& s, const DeviceLimits& limits) {
  const int64_t by_multiprocessors = limits.multiprocessors / tiled_ctas(s);
  const int64_t by_keys = key_blocks(s.seq_k) / kMinTiledSplitBlocks;
  return std::clamp<int64_t>(std::min(by_multiprocessors, by_keys), 1, kMaxAutoSplits);
}

// Whether only the split kernel can serve the call: it alone reads K/V through a block table
// and follows per-sequence key lengths.
inline bool needs_split_kernel(const ForwardArgs& args) {
  return args.paged.enabled() || args.cache_seqlens != nullptr;
}

// Whether the call has a window, a softcap or ALiBi, which the split kernel does not apply: such
// calls run on the tiled kernels, and cannot be paged, have cache lengths or forced splits.
inline bool has_score_variants(const ForwardArgs& args) {
  return args.window.bounded() || args.softcap > 0.f || args.alibi.data != nullptr;
}

// The plan of a validated forward call at head_dim kHeadDim on a device with `limits`: the
// split kernel for packed rows or queries up to a Wide block (64; 32 above head_dim 128:
// decoding, GQA groups of short queries, speculative decoding), for small tiled grids over long
// keys and for every call that needs it (needs_split_kernel()); Narrow's rows on NarrowDeep
// where deep_pipeline_pays() on Narrow's grid; `args.splits` when given, otherwise
// auto_splits() for the configuration (split_count.h), reduced to 1 when the caller's workspace
// cannot hold the partial results. A tiled plan for a call that needs the split kernel is
// refused by forward().
// `tiled_splits`: the tiled kernels of the call split keys themselves (the sm90 forward); then
// they take the small grids the automatic count would split, with tiled_key_splits(): those
// shapes are long enough to be bound by the products, which the split kernel runs on mma.sync
// (B=1, H=8, 1k x 128k keys, head_dim 128: 0.87x cuDNN there, performance log).
template <int kHeadDim>
ForwardPlan plan_forward(const ForwardArgs& args, const DeviceLimits& limits, bool tiled_splits) {
  using Traits = SplitTraits<kHeadDim>;
  const AttentionShape& s = args.shape;
  if (args.dtype == DType::fp32 || has_score_variants(args)) return {};
  const int64_t rows = packed_rows(s);
  // Short queries: one row block, or queries no more than a Wide block, which the tiled kernels'
  // 128-row query blocks would hold at most half full while every query head of a group
  // re-reads the kv head's K and V (B=8, 32 query heads on 1 kv head, 4 queries x 8k keys:
  // 268 us tiled, as 2 packed row blocks per kv head on the split kernel a fraction of that).
  const bool decode = rows <= Traits::Wide::kBlockM || s.seq_q <= Traits::Wide::kBlockM;
  if (tiled_splits && !decode && !needs_split_kernel(args) && args.splits == 0 &&
      tiled_grid_is_small(s, limits)) {
    const int64_t splits = tiled_key_splits(s, limits);
    return {ForwardKernel::tiled,
            forward_workspace_bytes(s, splits) <= args.workspace_bytes ? splits : 1};
  }
  ForwardKernel kernel = split_kernel_for_rows<Traits>(rows);
  SplitShape shape = split_shape<Traits>(kernel, limits);
  if (shape.smem_bytes > limits.max_dynamic_smem) return {};  // e.g. D=128 on sm_86 / sm_89
  const int64_t blocks = key_blocks(s.seq_k);
  const auto ctas = [&] { return s.batch * s.heads_kv * ceil_div(rows, shape.block_rows); };
  const auto slots = [&] { return int64_t(limits.multiprocessors) * shape.slots_per_sm; };
  const auto splits_for_shape = [&] {
    if (args.splits != 0) return args.splits;
    const bool load_bound =
        kernel == ForwardKernel::split_narrow || kernel == ForwardKernel::split_narrow_deep;
    return auto_splits(ctas(), blocks, limits.multiprocessors, shape.slots_per_sm,
                       s.batch * s.heads * s.seq_q, load_bound);
  };
  int64_t splits = splits_for_shape();
  if constexpr (!std::is_same_v<typename Traits::Narrow, typename Traits::NarrowDeep>) {
    const SplitShape deep = split_shape<Traits>(ForwardKernel::split_narrow_deep, limits);
    if (kernel == ForwardKernel::split_narrow && deep.smem_bytes <= limits.max_dynamic_smem &&
        deep_pipeline_pays(ctas(), splits, blocks, slots())) {
      kernel = ForwardKernel::split_narrow_deep;
      shape = deep;
      splits = splits_for_shape();
    }
  }
  if (args.splits == 0 && forward_workspace_bytes(s, splits) > args.workspace_bytes) splits = 1;
  if (!decode && !needs_split_kernel(args) &&
      (splits <= 1 || (args.splits == 0 && !tiled_grid_is_small(s, limits)))) {
    return {};
  }
  return {kernel, splits};
}

// The same for a head_dim known at run time (validated; planned at compiled_head_dim()).
template <size_t... kIndex>
ForwardPlan plan_forward(const ForwardArgs& args, const DeviceLimits& limits, bool tiled_splits,
                         std::index_sequence<kIndex...>) {
  ForwardPlan plan;
  ((kHeadDims[kIndex] == compiled_head_dim(args.shape.head_dim)
        ? (plan = plan_forward<kHeadDims[kIndex]>(args, limits, tiled_splits), 0)
        : 0),
   ...);
  return plan;
}

// Whether the tiled kernels that would run a dense call split keys: the sm90 forward, for
// fp16 / bf16 at head dims it serves, on a device that runs it (dispatch.cuh's choice).
inline bool tiled_kernels_split_keys(const ForwardArgs& args) {
  int device = 0;
  return args.dtype != DType::fp32 && !args.varlen.enabled() &&
         wgmma_head_dim(kWgmmaForwardHeadDims, compiled_head_dim(args.shape.head_dim)) != 0 &&
         cudaGetDevice(&device) == cudaSuccess && use_sm90_kernels(device);
}

inline ForwardPlan plan_forward(const ForwardArgs& args) {
  return plan_forward(args, current_device_limits(), tiled_kernels_split_keys(args),
                      std::make_index_sequence<std::size(kHeadDims)>{});
}

}  // namespace cuflash::detail::split
