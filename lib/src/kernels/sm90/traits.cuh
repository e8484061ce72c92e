// Tile shapes of the sm90 family (wgmma + TMA, fp16 / bf16 on compute capability 9.0): one
// configuration per head_dim. Measurements behind each choice are in
// share/docs/performance-log.md.
#pragma once

#include <cstddef>

#include "kernels/common/shared_memory.cuh"

namespace cuflash::detail::sm90 {

// Forward on Hopper's warpgroup mma (wgmma) and TMA (sm_90a): one CTA per (query block, head,
// batch) of kWarpGroups consumer warpgroups and one producer warpgroup. Each consumer warpgroup
// (128 threads) owns 64 query rows, so kBlockM = 64 * kWarpGroups; one thread of the producer
// warpgroup issues the TMA loads of Q and of the K and V tiles (kStages slots each), and the
// warpgroup hands its registers to the consumers (a whole warpgroup, because registers move
// between warpgroups). The consumers of a CTA share the K/V tiles, which halves the L2 ->
// shared traffic per FLOP compared to one-warpgroup CTAs.
template <int HeadDim, int WarpGroups, int BlockN>
struct ForwardConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarpGroups = WarpGroups;
  static constexpr int kConsumerThreads = 128 * WarpGroups;
  static constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
  static constexpr int kBlockM = 64 * WarpGroups;  // query rows per CTA
  static constexpr int kBlockN = BlockN;           // keys per iteration
  static constexpr int kStages = 2;                // slots for K and for V
  // The two consumer warpgroups take turns at issuing their products, so that the softmax of
  // one runs while the products of the other occupy the tensor cores (H200, fp16: +7% at D=64
  // S=4096, +11% at D=64 S=512, +1 to +8% at D=128).
  static constexpr bool kAlternate = WarpGroups == 2;
  static constexpr size_t kQBytes = size_t(kBlockM) * HeadDim * 2;
  static constexpr size_t kKvBytes = size_t(kBlockN) * HeadDim * 2;  // one K or V tile
  static constexpr size_t kTileBytes = kQBytes + 2 * kStages * kKvBytes;
  static constexpr int kBarriers = 1 + 4 * kStages;  // Q; K and V slots: full and empty
  // + 1 KB: the tiles start at the first 1024-byte boundary of the dynamic shared memory.
  static constexpr size_t kSmemBytes = 1024 + kTileBytes + 8 * kBarriers;

  static_assert(HeadDim % 64 == 0, "swizzled tiles hold whole 64-column blocks");
  static_assert(BlockN % 16 == 0 && BlockN <= 256, "wgmma N is a multiple of 8 up to 256");
  static_assert(kBlockM <= 256, "one TMA box covers the Q tile's rows");
};

// Head dims with a wgmma forward (the others use the mma.sync kernel everywhere).
template <int kHeadDim>
inline constexpr bool kHasForward = kHeadDim == 64 || kHeadDim == 128;

template <int kHeadDim>
struct ForwardTraits;
// Chosen by measurement on an H200 (fp16, B=4 H=32 S=4096 and B=1 H=8 S=1024 at D=64; B=4 H=16
// S=4096 and B=1 H=16 S=16384 at D=128): block N 64, 128 and 192 at D=64 (128 best), and 3
// stages instead of 2 (12% slower at D=128: the third slot costs more than it hides).
template <>
struct ForwardTraits<64> : ForwardConfig<64, 2, 128> {};   // 128 x 128 blocks
template <>
struct ForwardTraits<128> : ForwardConfig<128, 2, 128> {};  // 128 x 128

// Backward on wgmma and TMA (sm_90a): one CTA per (key block of 128, kv head, batch) of two
// consumer warpgroups (64 keys each: rows of S^T, dP^T, dK, dV) and one producer warpgroup that
// loads K and V once and Q, dO, LSE and D per query block of kBlockM rows (kStages slots). dQ
// of a query block needs dS of all 128 keys, so dS^T goes through shared memory (two buffers,
// so that one warpgroup may run an iteration ahead) and the two warpgroups split dQ's
// (kBlockM, D) tile: by rows when kBlockM = 128, by columns (D / 2 each) when kBlockM = 64.
template <int HeadDim, int BlockM>
struct BackwardConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockN = 128;  // keys per CTA
  static constexpr int kBlockM = BlockM;  // queries per iteration
  static constexpr int kConsumerThreads = 256;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kStages = 2;
  static constexpr bool kDqSplitRows = BlockM == 128;
  static constexpr int kDqCols = kDqSplitRows ? HeadDim : HeadDim / 2;  // dQ columns per warpgroup
  static constexpr size_t kKvBytes = size_t(kBlockN) * HeadDim * 2;      // K or V
  static constexpr size_t kQBytes = size_t(kBlockM) * HeadDim * 2;       // Q or dO, one stage
  static constexpr size_t kDsBytes = size_t(kBlockN) * kBlockM * 2;      // dS^T, one buffer
  static constexpr size_t kTileBytes = 2 * kKvBytes + 2 * kStages * kQBytes + 2 * kDsBytes;
  static constexpr size_t kFloatBytes = size_t(2) * kStages * kBlockM * 4;  // LSE and D stages
  static constexpr int kBarriers = 1 + 2 * kStages;  // K and V; Q/dO slots: full and empty
  static constexpr size_t kSmemBytes = 1024 + kTileBytes + kFloatBytes + 8 * kBarriers;

  static_assert(HeadDim % 64 == 0 && (BlockM == 64 || BlockM == 128), "whole swizzle atoms");
  static_assert(kDqCols % 32 == 0, "wgmma shapes exist for dQ blocks of 32, 64, 128 columns");
};

template <int kHeadDim>
inline constexpr bool kHasBackward = kHeadDim == 64 || kHeadDim == 128;

template <int kHeadDim>
struct BackwardTraits;
template <>
struct BackwardTraits<64> : BackwardConfig<64, 64> {};
template <>
struct BackwardTraits<128> : BackwardConfig<128, 64> {};

}  // namespace cuflash::detail::sm90
