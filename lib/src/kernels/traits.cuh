// Tile shapes of the tensor-core kernels, one choice per head_dim.
#pragma once

#include <cstddef>
#include <type_traits>

namespace cuflash::detail {

// The most dynamic shared memory one CTA may use: sm_90's 227 KB. Default configurations stay
// within sm_80's 163 KB; larger ones (and those above the 99 KB of sm_86 / sm_89) are launched
// only where fits_dynamic_smem() says so. The 16-bit D=128 kernels and the fp32 D=128 backward
// need more than 99 KB.
inline constexpr size_t kMaxSmemBytes = 227 * 1024;

// Padding at the end of every shared-memory row: 16 bytes make consecutive rows start 16 bytes
// further into the bank pattern, so the eight rows an ldmatrix phase reads hit eight different
// 16-byte bank groups for every head_dim we compile, and the fp32 scalar fragment reads
// (mma_ops.cuh) hit 32 different banks.
inline constexpr int kSmemPadBytes = 16;
template <int kElementBytes>
inline constexpr int kSmemPadElements = kSmemPadBytes / kElementBytes;

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
  static constexpr bool kQInRegisters = MTiles == 1 && ElementBytes == 2;
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
template <int kHeadDim>
struct ForwardTraits;
template <>
struct ForwardTraits<32> : ForwardConfig<32, 4, 2, 128> {};  // 128 x 128 blocks
template <>
struct ForwardTraits<64> : ForwardConfig<64, 4, 2, 64> {};   // 128 x 64
// 128: two m tiles per warp do not fit in registers (O alone is 128 per thread); eight warps
// give the same 128-row block.
template <>
struct ForwardTraits<128> : ForwardConfig<128, 8, 1, 64> {};  // 128 x 64

// fp32 (split TF32, three products per product): the tensor cores are the limit, so blocks need
// less reuse than 16-bit ones; these fit 99 KB, i.e. also sm_86 / sm_89, and two CTAs per SM on
// sm_80 and sm_90. Narrow and NarrowCausal: for grids that would leave SMs without a CTA (e.g.
// batch 1, 8 heads, 1k queries), smaller query blocks or warps that split the keys; chosen on
// an H200 at B=1, H=8, S=1024 among 9 shapes (performance log, fp32 v2); used where the device
// has the shared memory for them.
template <int kHeadDim>
struct ForwardFp32Traits;
template <>
struct ForwardFp32Traits<32> : ForwardConfig<32, 4, 2, 64, 4> {  // 128 x 64, 55 KB
  using Narrow = ForwardConfig<32, 2, 1, 64, 4>;                  // 32 x 64
  using NarrowCausal = Narrow;
};
template <>
struct ForwardFp32Traits<64> : ForwardConfig<64, 4, 2, 32, 4> {  // 128 x 32, 68 KB
  using Narrow = ForwardConfig<64, 2, 1, 32, 4>;                  // 32 x 32
  using NarrowCausal = Narrow;
};
template <>
struct ForwardFp32Traits<128> : ForwardConfig<128, 4, 1, 32, 4> {  // 64 x 32, 99 KB
  // 64 x 64 with two warps per row group (32 keys each), 165 KB: 0.117 -> 0.099 ms (16 keys
  // each, 101 KB: 0.105 ms).
  using Narrow = ForwardConfig<128, 8, 1, 64, 4, 2>;
  // 32 x 64 with four warps per row group, 152 KB: causal 0.112 -> 0.074 ms (its 256 CTAs fill
  // in around the heavy ones; without the mask it takes two waves: 0.13 ms).
  using NarrowCausal = ForwardConfig<128, 8, 1, 64, 4, 4>;
};

// Forward on Hopper's warpgroup mma (wgmma) and TMA (sm_90a): one CTA per (query block, head,
// batch) of kWarpGroups consumer warpgroups and one producer warpgroup. Each consumer warpgroup
// (128 threads) owns 64 query rows, so kBlockM = 64 * kWarpGroups; one thread of the producer
// warpgroup issues the TMA loads of Q and of the K and V tiles (kStages slots each), and the
// warpgroup hands its registers to the consumers (a whole warpgroup, because registers move
// between warpgroups). The consumers of a CTA share the K/V tiles, which halves the L2 ->
// shared traffic per FLOP compared to one-warpgroup CTAs.
template <int HeadDim, int WarpGroups, int BlockN>
struct ForwardSm90Config {
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
inline constexpr bool kHasForwardSm90 = kHeadDim == 64 || kHeadDim == 128;

template <int kHeadDim>
struct ForwardSm90Traits;
// Chosen by measurement on an H200 (fp16, B=4 H=32 S=4096 and B=1 H=8 S=1024 at D=64; B=4 H=16
// S=4096 and B=1 H=16 S=16384 at D=128): block N 64, 128 and 192 at D=64 (128 best), and 3
// stages instead of 2 (12% slower at D=128: the third slot costs more than it hides).
template <>
struct ForwardSm90Traits<64> : ForwardSm90Config<64, 2, 128> {};   // 128 x 128 blocks
template <>
struct ForwardSm90Traits<128> : ForwardSm90Config<128, 2, 128> {};  // 128 x 128

// Backward on wgmma and TMA (sm_90a): one CTA per (key block of 128, kv head, batch) of two
// consumer warpgroups (64 keys each: rows of S^T, dP^T, dK, dV) and one producer warpgroup that
// loads K and V once and Q, dO, LSE and D per query block of kBlockM rows (kStages slots). dQ
// of a query block needs dS of all 128 keys, so dS^T goes through shared memory (two buffers,
// so that one warpgroup may run an iteration ahead) and the two warpgroups split dQ's
// (kBlockM, D) tile: by rows when kBlockM = 128, by columns (D / 2 each) when kBlockM = 64.
template <int HeadDim, int BlockM>
struct BackwardSm90Config {
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
inline constexpr bool kHasBackwardSm90 = kHeadDim == 64 || kHeadDim == 128;

template <int kHeadDim>
struct BackwardSm90Traits;
template <>
struct BackwardSm90Traits<64> : BackwardSm90Config<64, 64> {};
template <>
struct BackwardSm90Traits<128> : BackwardSm90Config<128, 64> {};

// Backward: one CTA per (key block, kv head, batch). Each warp owns 16 keys (rows of S^T, dP^T,
// dK, dV) and, with QuerySplit > 1, a 1 / QuerySplit share of every query block (the warps of a
// key group sum their dK and dV at the end), so kBlockN = 16 * kWarps / QuerySplit; the CTA
// walks query blocks of kBlockM rows, with Q, dO, LSE and D double-buffered.
template <int HeadDim, int Warps, int BlockM, int ElementBytes = 2, int QuerySplit = 1>
struct BackwardConfig {
  static constexpr int kHeadDim = HeadDim;
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
  static constexpr int kDqCols = kDqWarpsN > 0 ? HeadDim / kDqWarpsN : 0;  // dQ columns per warp
  static constexpr size_t kSmemElements =
      size_t(2) * kBlockN * kStride                 // K, V
      + size_t(2) * kStages * kBlockM * kStride     // Q and dO stages
      + size_t(kBlockN) * kDsStride;                // dS^T
  static constexpr size_t kSmemFloats = size_t(2) * kStages * kBlockM;  // LSE and D stages
  static constexpr size_t smem_bytes(size_t element_size) {
    return kSmemElements * element_size + kSmemFloats * sizeof(float);
  }

  static_assert(HeadDim % 16 == 0 && BlockM % 16 == 0, "operands are consumed in k16 steps");
  static_assert(kDqWarpsN > 0 && Warps % kDqWarpsM == 0 && kDqCols * kDqWarpsN == HeadDim &&
                    kDqCols % 16 == 0,
                "dQ warp tiles (16 rows x kDqCols) must tile the (kBlockM, D) block exactly");
  static_assert(BlockM <= kThreads, "one thread per query row loads LSE and D");
  static_assert(Warps % QuerySplit == 0 && kWarpQueries % 16 == 0,
                "every key group has QuerySplit warps of whole k16 query steps");
  // The sum over the query parts: (QuerySplit - 1) parts x 32 lanes x (dK, dV fragments).
  static constexpr size_t kMergeFloats = size_t(QuerySplit - 1) * kKeyGroups * 32 * HeadDim;
  static_assert(kMergeFloats * 4 <= size_t(2) * kStages * BlockM * kStride * ElementBytes,
                "the merge fits the Q / dO stages");
  static_assert(smem_bytes(ElementBytes) <= kMaxSmemBytes, "fits one CTA of sm_90");
};

// Chosen by measurement like the forward ones. 128 keys per CTA (8 warps) halve the dQ atomics
// and the Q/dO traffic per unit of work compared to 64 where registers allow.
template <int kHeadDim>
struct BackwardTraits;
template <>
struct BackwardTraits<32> : BackwardConfig<32, 4, 64> {};
template <>
struct BackwardTraits<64> : BackwardConfig<64, 8, 64> {};
// 128: dK + dV accumulators alone take 128 fp32 registers per thread; 32-query blocks keep S^T
// and dP^T at 16 each. (64-query blocks ran 15% faster on sm_90 but sit at the 255-register
// limit and spill on sm_80.)
template <>
struct BackwardTraits<128> : BackwardConfig<128, 8, 32> {};

// Whether Traits offers a Narrow configuration for grids too small to fill the GPU.
template <typename Traits, typename = void>
inline constexpr bool has_narrow_config = false;
template <typename Traits>
inline constexpr bool has_narrow_config<Traits, std::void_t<typename Traits::Narrow>> = true;

// fp32: split-TF32 products (see ForwardFp32Traits). 64 keys per CTA, query blocks as large as
// two CTAs per SM allow (dK and dV of D=128 alone take 128 registers per thread). Two-warp
// 32-key CTAs for small grids ran slower on the H200 (D=128, 1k: 0.42 -> 0.49 ms).
template <int kHeadDim>
struct BackwardFp32Traits;
template <>
struct BackwardFp32Traits<32> : BackwardConfig<32, 4, 64, 4> {};   // 74 KB
template <>
struct BackwardFp32Traits<64> : BackwardConfig<64, 4, 32, 4> {};   // 79 KB
template <>
struct BackwardFp32Traits<128> : BackwardConfig<128, 4, 16, 4> {  // 107 KB
  // 32 keys per CTA, two warps per key row: small grids (batch 1, 8 heads, 1k keys) get
  // twice the CTAs with the same work per warp (0.43 -> 0.30 ms).
  using Narrow = BackwardConfig<128, 4, 32, 4, 2>;  // 106 KB
};

}  // namespace cuflash::detail
