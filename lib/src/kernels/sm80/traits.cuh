// Tile shapes of the sm80 family (mma.sync, every dtype): one configuration per head_dim and
// element size, and the Narrow variants for grids too small to fill the GPU. Measurements
// behind each choice are in share/docs/performance-log.md.
#pragma once

#include <cstddef>
#include <type_traits>

#include "kernels/common/shared_memory.cuh"

namespace cuflash::detail::sm80 {

// Forward: one CTA per (query block, head, batch). Each warp owns kMTiles x 16 query rows
// (16 = the M of one mma A fragment) and, with KeySplit > 1, a 1 / KeySplit share of every key
// block: the KeySplit warps of a row group merge their softmax states and outputs at the end,
// which gives small grids (few query blocks) more warps per SM. kBlockM = 16 * kMTiles *
// kWarps / KeySplit. K and V tiles are double-buffered. With two m tiles per warp every K/V
// fragment read from shared memory feeds twice the mma work, at the price of re-reading Q from
// shared memory (no room in registers; never room for fp32's split fragments).
template <int HeadDim, int Warps, int MTiles, int BlockN, int ElementBytes = 2, int KeySplit = 1>
struct ForwardConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kMTiles = MTiles;
  static constexpr int kWarpRows = 16 * MTiles;
  static constexpr int kKeySplit = KeySplit;
  static constexpr int kRowGroups = Warps / KeySplit;  // warps with distinct rows
  static constexpr int kBlockM = kWarpRows * kRowGroups;  // query rows per CTA
  static constexpr int kBlockN = BlockN;             // keys per iteration
  static constexpr int kWarpKeys = BlockN / KeySplit;  // keys per iteration and warp
  static constexpr int kStages = 2;                  // K/V buffers in flight
  // Q's A fragments take 2 * HeadDim / 8 registers per thread: above 128 they would crowd out
  // the O accumulator (HeadDim / 2).
  static constexpr bool kQInRegisters = MTiles == 1 && ElementBytes == 2 && HeadDim <= 128;
  // Output tile pairs summed apart at a time in O += P V (add_product_of_accumulators; fp32
  // only): all up to 128 columns, 4 pairs (32 registers) beyond.
  static constexpr int kPvStagePairs = HeadDim <= 128 ? HeadDim / 16 : 4;
  static constexpr int kStride = HeadDim + kSmemPadElements<ElementBytes>;
  static constexpr size_t kSmemElements =
      size_t(kBlockM) * kStride                   // Q, later the O tile
      + size_t(2) * kStages * kBlockN * kStride;  // K and V stages
  static constexpr size_t smem_bytes(size_t element_size) { return kSmemElements * element_size; }

  // The merge of the key parts: (KeySplit - 1) parts x 32 lanes x (O fragments, max, sum).
  static constexpr size_t kMergeFloats =
      size_t(KeySplit - 1) * kRowGroups * 32 * kMTiles * (HeadDim / 2 + 4);

  static_assert(HeadDim % 16 == 0, "head_dim is consumed in k16 steps");
  static_assert(kWarpKeys % 16 == 0, "P is reused as A fragments of 16 keys");
  static_assert(Warps % KeySplit == 0, "every row group has KeySplit warps");
  static_assert(kMergeFloats * 4 <= size_t(2) * kStages * BlockN * kStride * ElementBytes,
                "the merge fits the K/V stages");
  static_assert(smem_bytes(ElementBytes) <= kMaxSmemBytes, "fits one CTA of sm_90");
};

// Chosen by measurement on an H200 (fp16, batch 1, 8 heads, seq 4096 and 16384, with and
// without the causal mask) among 4 warps x 1 or 2 m tiles and 8 warps x 1 m tile, block N from
// 16 to 128; all without register spills.
template <int kHeadDim, int kElementBytes>
struct ForwardTraits;
template <>
struct ForwardTraits<32, 2> : ForwardConfig<32, 4, 2, 128> {};  // 128 x 128 blocks
template <>
struct ForwardTraits<64, 2> : ForwardConfig<64, 4, 2, 64> {};   // 128 x 64
// 128: two m tiles per warp do not fit in registers (O alone is 128 per thread); eight warps
// give the same 128-row block.
template <>
struct ForwardTraits<128, 2> : ForwardConfig<128, 8, 1, 64> {};  // 128 x 64
// 96, 192, 256: not measured yet; shapes chosen to stay within sm_80's 163 KB and the register
// file (O takes D / 2 registers per thread, Q is read from shared memory above 128).
template <>
struct ForwardTraits<96, 2> : ForwardConfig<96, 8, 1, 64> {};    // 128 x 64, 78 KB
template <>
struct ForwardTraits<192, 2> : ForwardConfig<192, 8, 1, 64> {};  // 128 x 64, 150 KB
template <>
struct ForwardTraits<256, 2> : ForwardConfig<256, 8, 1, 32> {};  // 128 x 32, 132 KB

// fp32 (split TF32, three products per product): the tensor cores are the limit, so blocks need
// less reuse than 16-bit ones; these fit 99 KB, i.e. also sm_86 / sm_89, and two CTAs per SM on
// sm_80 and sm_90. Narrow and NarrowCausal: for grids that would leave SMs without a CTA (e.g.
// batch 1, 8 heads, 1k queries), smaller query blocks or warps that split the keys; chosen on
// an H200 at B=1, H=8, S=1024 among 9 shapes (performance log, fp32 v2); used where the device
// has the shared memory for them.
template <>
struct ForwardTraits<32, 4> : ForwardConfig<32, 4, 2, 64, 4> {  // 128 x 64, 55 KB
  using Narrow = ForwardConfig<32, 2, 1, 64, 4>;                  // 32 x 64
  using NarrowCausal = Narrow;
};
template <>
struct ForwardTraits<64, 4> : ForwardConfig<64, 4, 2, 32, 4> {  // 128 x 32, 68 KB
  using Narrow = ForwardConfig<64, 2, 1, 32, 4>;                  // 32 x 32
  using NarrowCausal = Narrow;
};
template <>
struct ForwardTraits<128, 4> : ForwardConfig<128, 4, 1, 32, 4> {  // 64 x 32, 99 KB
  // 64 x 64 with two warps per row group (32 keys each), 165 KB.
  using Narrow = ForwardConfig<128, 8, 1, 64, 4, 2>;
  // 32 x 64 with four warps per row group, 152 KB: under the mask its 256 CTAs fill in around
  // the heavy ones (without the mask it takes two waves).
  using NarrowCausal = ForwardConfig<128, 8, 1, 64, 4, 4>;
};
// 96, 192, 256: not measured yet; 64-query blocks like 128, keys per block as sm_80's 163 KB
// allows.
template <>
struct ForwardTraits<96, 4> : ForwardConfig<96, 4, 1, 32, 4> {};    // 64 x 32, 75 KB
template <>
struct ForwardTraits<192, 4> : ForwardConfig<192, 4, 1, 32, 4> {};  // 64 x 32, 147 KB
template <>
struct ForwardTraits<256, 4> : ForwardConfig<256, 4, 1, 16, 4> {};  // 64 x 16, 130 KB

// Backward: one CTA per (key block, kv head, batch) and column part. Each warp owns 16 keys
// (rows of S^T, dP^T, dK, dV) and, with QuerySplit > 1, a 1 / QuerySplit share of every query
// block (the warps of a key group sum their dK and dV at the end), so kBlockN = 16 * kWarps /
// QuerySplit; the CTA walks query blocks of kBlockM rows, with Q, dO, LSE and D double-buffered.
//
// ColumnSplit > 1 (large head dims): dK and dV of a warp's 16 keys over all of D would take D
// fp32 registers per thread (192 or 256), more than the register file leaves. The columns of
// dK, dV and dQ are then divided into ColumnSplit parts of kPartCols, one CTA each: every part
// computes S^T = K Q^T and dP^T = V dO^T over the whole head_dim (K, V, Q and dO are loaded
// whole) but accumulates only its columns of dV = P^T dO, dK = dS^T Q and dQ = dS K. The
// accumulators are those of a head_dim of kPartCols; the price is S^T and dP^T computed
// ColumnSplit times (2 of the 5 products) and Q / dO read ColumnSplit times from L2.
template <int HeadDim, int Warps, int BlockM, int ElementBytes = 2, int QuerySplit = 1,
          int ColumnSplit = 1>
struct BackwardConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kColumnSplit = ColumnSplit;
  static constexpr int kPartCols = HeadDim / ColumnSplit;  // dK, dV, dQ columns per CTA
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kQuerySplit = QuerySplit;
  static constexpr int kKeyGroups = Warps / QuerySplit;  // warps with distinct keys
  static constexpr int kBlockN = 16 * kKeyGroups;  // keys per CTA
  static constexpr int kBlockM = BlockM;      // queries per iteration
  static constexpr int kWarpQueries = BlockM / QuerySplit;  // of them per warp
  static constexpr int kStages = 2;
  static constexpr int kStride = HeadDim + kSmemPadElements<ElementBytes>;  // K, V, Q, dO rows
  static constexpr int kDsStride = BlockM + kSmemPadElements<ElementBytes>;   // dS^T rows
  // dQ = dS K is split over the warps as a grid of (kBlockM / 16) x kDqWarpsN warp tiles.
  static constexpr int kDqWarpsM = BlockM / 16;
  static constexpr int kDqWarpsN = Warps / kDqWarpsM;
  static constexpr int kDqCols = kDqWarpsN > 0 ? kPartCols / kDqWarpsN : 0;  // dQ columns per warp
  static constexpr size_t kSmemElements =
      size_t(2) * kBlockN * kStride                 // K, V
      + size_t(2) * kStages * kBlockM * kStride     // Q and dO stages
      + size_t(kBlockN) * kDsStride;                // dS^T
  static constexpr size_t kSmemFloats = size_t(2) * kStages * kBlockM;  // LSE and D stages
  static constexpr size_t smem_bytes(size_t element_size) {
    return kSmemElements * element_size + kSmemFloats * sizeof(float);
  }

  static_assert(HeadDim % 16 == 0 && BlockM % 16 == 0, "operands are consumed in k16 steps");
  static_assert(kPartCols * ColumnSplit == HeadDim && kPartCols % 16 == 0,
                "column parts are whole pairs of n8 tiles");
  static_assert(kDqWarpsN > 0 && Warps % kDqWarpsM == 0 && kDqCols * kDqWarpsN == kPartCols &&
                    kDqCols % 16 == 0,
                "dQ warp tiles (16 rows x kDqCols) must tile the (kBlockM, kPartCols) block");
  static_assert(BlockM <= kThreads, "one thread per query row loads LSE and D");
  static_assert(Warps % QuerySplit == 0 && kWarpQueries % 16 == 0,
                "every key group has QuerySplit warps of whole k16 query steps");
  // The sum over the query parts: (QuerySplit - 1) parts x 32 lanes x (dK, dV fragments).
  static constexpr size_t kMergeFloats = size_t(QuerySplit - 1) * kKeyGroups * 32 * kPartCols;
  static_assert(kMergeFloats * 4 <= size_t(2) * kStages * BlockM * kStride * ElementBytes,
                "the merge fits the Q / dO stages");
  static_assert(smem_bytes(ElementBytes) <= kMaxSmemBytes, "fits one CTA of sm_90");
};

// Chosen by measurement like the forward ones. 128 keys per CTA (8 warps) halve the dQ atomics
// and the Q/dO traffic per unit of work compared to 64 where registers allow.
template <int kHeadDim, int kElementBytes>
struct BackwardTraits;
template <>
struct BackwardTraits<32, 2> : BackwardConfig<32, 4, 64> {};
template <>
struct BackwardTraits<64, 2> : BackwardConfig<64, 8, 64> {};
// 128: dK + dV accumulators alone take 128 fp32 registers per thread; 32-query blocks keep S^T
// and dP^T at 16 each (64-query blocks ran faster on sm_90 but sit at the 255-register limit
// and spill on sm_80).
template <>
struct BackwardTraits<128, 2> : BackwardConfig<128, 8, 32> {};
// 96, 192, 256: not measured yet. 96 holds dK + dV (96 registers) like 64 with 64-query blocks.
// 192 and 256 split the columns in two (ColumnSplit above): 96 and 128 columns per CTA, the
// registers of D = 96 and 128; four warps (64 keys) keep K, V and the Q / dO stages within
// sm_80's 163 KB.
template <>
struct BackwardTraits<96, 2> : BackwardConfig<96, 8, 64> {};           // 122 KB
template <>
struct BackwardTraits<192, 2> : BackwardConfig<192, 4, 32, 2, 1, 2> {};  // 105 KB
template <>
struct BackwardTraits<256, 2> : BackwardConfig<256, 4, 32, 2, 1, 2> {};  // 137 KB

// Whether Traits offers a Narrow configuration for grids too small to fill the GPU.
template <typename Traits, typename = void>
inline constexpr bool has_narrow_config = false;
template <typename Traits>
inline constexpr bool has_narrow_config<Traits, std::void_t<typename Traits::Narrow>> = true;

// fp32: split-TF32 products (see ForwardTraits<D, 4>). 64 keys per CTA, query blocks as large as
// two CTAs per SM allow (dK and dV of D=128 alone take 128 registers per thread). Two-warp
// 32-key CTAs for small grids ran slower on the H200.
template <>
struct BackwardTraits<32, 4> : BackwardConfig<32, 4, 64, 4> {};   // 74 KB
template <>
struct BackwardTraits<64, 4> : BackwardConfig<64, 4, 32, 4> {};   // 79 KB
template <>
struct BackwardTraits<128, 4> : BackwardConfig<128, 4, 16, 4> {  // 107 KB
  // 32 keys per CTA, two warps per key row: small grids (batch 1, 8 heads, 1k keys) get
  // twice the CTAs with the same work per warp.
  using Narrow = BackwardConfig<128, 4, 32, 4, 2>;  // 106 KB
  using NarrowCausal = Narrow;
};
// 96, 192, 256: not measured yet. K and V of 64 keys alone take 98 KB at D = 192 and 130 KB at
// 256, so: 192 in three column parts of 64 (dQ tiles of 16 columns with 16-query blocks);
// 256 in two parts of 128 with 32 keys per CTA (two warps), as only that fits sm_80's 163 KB.
template <>
struct BackwardTraits<96, 4> : BackwardConfig<96, 4, 32, 4> {};           // 109 KB
template <>
struct BackwardTraits<192, 4> : BackwardConfig<192, 4, 16, 4, 1, 3> {};  // 152 KB
template <>
struct BackwardTraits<256, 4> : BackwardConfig<256, 2, 16, 4, 1, 2> {};  // 133 KB

}  // namespace cuflash::detail::sm80
