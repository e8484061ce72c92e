// Tile shapes of the split-KV forward (split/forward.cuh): small query groups against long key
// sequences, where reading K and V once at full memory bandwidth is the whole cost.
//
// A CTA owns kBlockM packed rows (the query heads that share one kv head, stacked: see
// split/forward.cuh) and walks 64-key blocks of one kv head through kStages cp.async buffers.
// Four warps: Narrow (<= 16 rows, e.g. one decoded token of 8 grouped heads) gives each warp a
// quarter of every key block and merges the four softmax states at the end; Medium (<= 32 rows,
// e.g. one token of 32 heads on one kv head) two row groups of two warps, each with half of
// every key block; Wide (<= 64 rows per block) gives each warp 16 rows and all of every key
// block. The products cost as many rows as the configuration has, valid or not: 32 rows on
// Wide's 64 made MQA decoding wait on the tensor cores (3.4 TB/s) rather than on memory.
// Q stays in registers, so the shared memory is the K/V stages alone; stage counts let two
// (D=128), three (D=32, 64, D=64 NarrowDeep) or four (D=64 Narrow) CTAs share an SM of sm_90
// with 70-100 KB of loads in flight per SM.
#pragma once

#include <cstddef>

#include "kernels/common/shared_memory.cuh"

namespace cuflash::detail::split {

// Keys per block; a split is a contiguous run of key blocks (max_forward_splits() counts them).
inline constexpr int kBlockKeys = 64;
inline constexpr int kLog2BlockKeys = 6;
static_assert(1 << kLog2BlockKeys == kBlockKeys);

template <int HeadDim, int RowGroups, int Stages>
struct SplitConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowGroups = RowGroups;          // warps with distinct rows
  static constexpr int kKeySplit = kWarps / RowGroups;  // warps sharing each key block
  static constexpr int kMTiles = 1;                     // m16 tiles per warp
  static constexpr int kBlockM = 16 * RowGroups;        // packed rows per CTA
  static constexpr int kBlockN = kBlockKeys;
  static constexpr int kWarpKeys = kBlockN / kKeySplit;  // keys of a block per warp
  static constexpr int kStages = Stages;
  // K/V rows of whole 128-byte segments are swizzled (ChunkSwizzledTile: each line of a cp.async
  // lands in one segment), others padded: 32 and 96, and 192 and 256, whose kernels sit at the
  // register limit, where the swizzle's address arithmetic added spills (ptxas, 256 Wide: 212 ->
  // 252 bytes stored).
  static constexpr bool kSwizzled = HeadDim * 2 % 128 == 0 && HeadDim <= 128;
  static constexpr int kStride = kSwizzled ? HeadDim : HeadDim + kSmemPadElements<2>;  // 16-bit
  static constexpr size_t kSmemBytes = size_t(2) * Stages * kBlockN * kStride * 2;  // K, V
  // CTAs per SM of sm_90 by shared memory (228 KB), which registers must allow too (four: at
  // most 128 registers a thread).
  static constexpr int kMinCtasPerSm = kSmemBytes > 76 * 1024 ? 2
                                                              : (kSmemBytes > 56 * 1024 ? 3 : 4);
  // The merge of the key parts (sm80::merge_key_parts) over the stages after the loop.
  static constexpr size_t kMergeFloats = size_t(kKeySplit - 1) * RowGroups * 32 * (HeadDim / 2 + 4);

  static_assert(kWarps % RowGroups == 0, "every row group has kKeySplit warps");
  static_assert(kWarpKeys % 16 == 0, "P is reused as A fragments of 16 keys");
  static_assert(HeadDim % 16 == 0, "head_dim is consumed in k16 steps");
  static_assert(Stages >= 2, "one stage loads while another is read");
  static_assert(kMergeFloats * 4 <= kSmemBytes, "the merge fits the K/V stages");
  static_assert(kSmemBytes <= kMaxSmemBytes, "fits one CTA of sm_90");
};

template <int kHeadDim>
struct SplitTraits;
template <>
struct SplitTraits<32> {  // 10 KB stages: 61 KB, three CTAs per SM
  using Narrow = SplitConfig<32, 1, 6>;
  using NarrowDeep = Narrow;
  using Medium = SplitConfig<32, 2, 6>;
  using Wide = SplitConfig<32, 4, 6>;
};
// Narrow at D=64 (one decoded token of up to 16 grouped heads) runs three 16 KB stages, 48 KB,
// four CTAs per SM (ptxas, sm_90a: 128 registers, 12 bytes spilled; 136 in the padded-head_dim
// kernel): 512 kv heads then fill 132 SMs in one wave of splits, where three CTAs per
// SM took 3.9 waves and read the cache at 78 % of the bandwidth (ncu, B=64, GQA-4, 4k keys).
// NarrowDeep, four stages and three CTAs, serves the same rows on grids that take several
// waves anyway or stream long runs of keys, where it reads faster (deep_pipeline_pays()).
// Elsewhere NarrowDeep is Narrow: the plan then never chooses it.
template <>
struct SplitTraits<64> {  // 16 KB stages: 64 KB, three CTAs per SM; Narrow 48 KB, four
  using Narrow = SplitConfig<64, 1, 3>;
  using NarrowDeep = SplitConfig<64, 1, 4>;
  using Medium = SplitConfig<64, 2, 4>;
  using Wide = SplitConfig<64, 4, 4>;
};
template <>
struct SplitTraits<128> {  // 32 KB stages: 96 KB, two CTAs per SM
  using Narrow = SplitConfig<128, 1, 3>;
  using NarrowDeep = Narrow;
  using Medium = SplitConfig<128, 2, 3>;
  using Wide = SplitConfig<128, 4, 3>;
};
// 96, 192, 256: not measured yet. Q (D / 4 registers) and O (D / 2) stay in registers as for
// 128, which above 128 leaves little room: Wide has two row groups of two warps each (32 rows,
// S of 32 keys per warp) instead of four, and ptxas still spills a little at 192 (Wide) and
// more at 256 (both; see the performance log). The stages are sized for two CTAs per SM at 96
// and 192 and one at 256.
template <>
struct SplitTraits<96> {  // 26 KB stages: 78 KB, two CTAs per SM
  using Narrow = SplitConfig<96, 1, 3>;
  using NarrowDeep = Narrow;
  using Medium = SplitConfig<96, 2, 3>;
  using Wide = SplitConfig<96, 4, 3>;
};
template <>
struct SplitTraits<192> {  // 50 KB stages: 100 KB, two CTAs per SM (sm_90)
  using Narrow = SplitConfig<192, 1, 2>;
  using NarrowDeep = Narrow;
  using Wide = SplitConfig<192, 2, 2>;
  using Medium = Wide;  // Wide already has 32 rows
};
template <>
struct SplitTraits<256> {  // 66 KB stages: 132 KB, one CTA per SM
  using Narrow = SplitConfig<256, 1, 2>;
  using NarrowDeep = Narrow;
  using Wide = SplitConfig<256, 2, 2>;
  using Medium = Wide;  // Wide already has 32 rows
};

}  // namespace cuflash::detail::split
