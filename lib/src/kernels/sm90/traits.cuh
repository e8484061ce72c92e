// Tile shapes of the sm90 family (wgmma + TMA, fp16 / bf16 on compute capability 9.0): one
// configuration per head_dim. Measurements behind each choice are in
// share/docs/performance-log.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/shared_memory.cuh"

namespace cuflash::detail::sm90 {

// Tiles start at multiples of this: the 128-byte swizzle of the TMA loads and of the wgmma
// descriptors repeats every 8 rows of 128 bytes (wgmma.cuh's kSwizzleAtomBytes). The dynamic
// shared memory itself is only 16-byte aligned, so a CTA asks for this much more than its
// storage and starts the storage at the first such boundary.
inline constexpr size_t kTileAlignment = 1024;

// Registers per thread of the consumer and producer warpgroups after the producer gives its
// registers away (setmaxnreg): together they must fit the SM's register file, and setmaxnreg
// takes multiples of 8 from 24 to 256.
inline constexpr int kRegisterFile = 65536;
template <int kConsumerWarpGroups, int kConsumerRegisters, int kProducerRegisters>
inline constexpr bool kFitsRegisterFile =
    128 * (kConsumerWarpGroups * kConsumerRegisters + kProducerRegisters) <= kRegisterFile &&
    kConsumerRegisters % 8 == 0 && kProducerRegisters % 8 == 0 && kProducerRegisters >= 24 &&
    kConsumerRegisters <= 256;

// The shared memory of a forward CTA, in this order: the Q slots, the K and the V slots (16-bit
// elements, swizzled), O's staging rows (kOutBytes: a CTA that runs several tiles stages O apart
// from the tiles, which the next tile's loads fill meanwhile; 16 where O is staged over the
// tiles), then the mbarriers. Tile sizes are multiples of kTileAlignment, so every tile starts on
// such a boundary (checked in ForwardConfig).
template <int kBlockM, int kBlockN, int kHeadDim, int kQStages, int kStages, size_t kOutBytes>
struct ForwardStorage {
  unsigned char q[kQStages][size_t(kBlockM) * kHeadDim * 2];
  unsigned char k[kStages][size_t(kBlockN) * kHeadDim * 2];
  unsigned char v[kStages][size_t(kBlockN) * kHeadDim * 2];
  unsigned char out[kOutBytes];
  uint64_t q_full[kQStages];   // Q slot landed
  uint64_t q_empty[kQStages];  // every consumer is done with the Q slot (a later tile's may come)
  uint64_t k_full[kStages];   // K slot landed
  uint64_t v_full[kStages];   // V slot landed
  uint64_t k_empty[kStages];  // every consumer is done with the K slot
  uint64_t v_empty[kStages];
};

// The shared memory of a backward CTA: K and V, the Q and dO slots, the dS^T buffers (16-bit,
// swizzled), the staged dQ parts (fp32) where they have a place of their own (kDqStages > 0;
// otherwise a placeholder of a few bytes, and dQ is staged in the dS^T buffers), the LSE and D
// slots (fp32), then the mbarriers.
template <int kBlockM, int kBlockN, int kHeadDim, int kStages, int kDqStages, int kDsBuffers = 2>
struct BackwardStorage {
  static constexpr size_t kQTileBytes = size_t(kBlockM) * kHeadDim * 2;
  static constexpr bool kHasDq = kDqStages > 0;
  static constexpr int kDqSlots = kHasDq ? kDqStages : kDsBuffers;
  unsigned char k[size_t(kBlockN) * kHeadDim * 2];
  unsigned char v[size_t(kBlockN) * kHeadDim * 2];
  unsigned char q[kStages][kQTileBytes];
  unsigned char dout[kStages][kQTileBytes];
  // dS^T, keys x queries (dS, queries x keys, with BackwardConfig::kDqTransposed)
  unsigned char ds[kDsBuffers][size_t(kBlockN) * kBlockM * 2];
  // Query blocks' dQ parts, fp32 rows in the accumulator's swizzled order
  // (dq_swizzled_column()), each added to it by one bulk reduce.
  float dq[kHasDq ? kDqStages : 1][kHasDq ? kBlockM : 1][kHasDq ? kHeadDim : 4];
  float lse[kStages][kBlockM];
  float row_dot[kStages][kBlockM];
  uint64_t kv_full;          // K and V landed
  uint64_t full[kStages];    // Q, dO, LSE and D of the slot landed
  uint64_t empty[kStages];   // every consumer is done with the slot
  uint64_t dq_staged[kDqSlots];  // every consumer has stored its dQ part in the stage
  uint64_t dq_free[kDqSlots];    // the bulk reduce has read the stage: it may be stored again
  // A persistent CTA's key blocks (sm90/backward.cuh): each completes once a key block.
  uint64_t kv_empty;       // every consumer is done with K and V: the next block's may come
  uint64_t stage_free;     // the reduces have read every dQ stage: dK and dV may be staged
  uint64_t out_staged;     // every consumer has staged its dK and dV rows
  uint64_t out_free;       // their stores have read them: dS^T and dQ may be staged again
  uint64_t tile_ready[4];  // the producer has written the walk_tiles entry
  uint32_t walk_tiles[4];  // the tile of key block n (a ring), written before its K and V load

  static constexpr size_t q_offset(int64_t slot) {
    return offsetof(BackwardStorage, q) + size_t(slot) * sizeof(q[0]);
  }
  static constexpr size_t dout_offset(int64_t slot) {
    return offsetof(BackwardStorage, dout) + size_t(slot) * sizeof(dout[0]);
  }
};

// Forward on Hopper's warpgroup mma (wgmma) and TMA (sm_90a): CTAs of kWarpGroups consumer
// warpgroups and one producer warpgroup, each running one (query block, head, batch) tile or,
// persistent (kPersistent), a share of them (sm90/forward.cuh). Each consumer warpgroup
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
  // The consumer warpgroups take turns at issuing their products (0, 1, .. in a ring), so that
  // the softmax of one runs while the products of the others occupy the tensor cores.
  static constexpr bool kAlternate = WarpGroups >= 2;
  // The running max raised only when it grows past a bound (OnlineSoftmax's kLazyMax), so that
  // O is rescaled in few key blocks: above head_dim 64, where O holds D / 2 registers a thread
  // (H200, `fa` forward at 128: 2.5 % less time); at 64 the branch around the rescale cost more
  // than it saved (5.8 % more time).
  static constexpr bool kLazyMax = HeadDim > 64;
  // 2 x 128 x 232 + 128 x 40 = 64512 of the 65536 registers; 3 x 128 x 160 + 128 x 32 = 65536.
  static constexpr int kConsumerRegisters = WarpGroups == 2 ? 232 : 160;
  static constexpr int kProducerRegisters = WarpGroups == 2 ? 40 : 32;
  static_assert(kFitsRegisterFile<WarpGroups, kConsumerRegisters, kProducerRegisters>);
  static_assert(WarpGroups <= 3, "named barriers for the turns: kFirstTurnBarrier + 0..2");
  // O staged in padded rows for whole-row stores (kSmemPadElements of 16-bit elements: 8).
  static constexpr int kOutStride = HeadDim + 8;
  static constexpr size_t kOutStageBytes = size_t(kBlockM) * kOutStride * 2;
  template <int kQSlots>
  static constexpr bool kFitsWithOut =
      kTileAlignment +
          sizeof(ForwardStorage<kBlockM, BlockN, HeadDim, kQSlots, kStages, kOutStageBytes>) <=
      kMaxSmemBytes;
  // Persistent CTAs (one per SM, each walking a share of the tiles) when O's staging rows fit
  // next to the tiles (head_dim <= 128): a CTA's epilogue then overlaps the next tile's loads,
  // which matters where tiles are short (few key blocks: short sequences, windows). Otherwise
  // one CTA per tile, staging O over the tiles.
  static constexpr bool kPersistent = kFitsWithOut<1>;
  // A persistent CTA loads the next tile's Q into a second slot while it works on this one
  // where that fits (head_dim 64; at 128 it misses by 96 bytes): the next tile's first scores
  // then need not wait for a Q load issued only once both warpgroups are done with this tile's.
  static constexpr int kQStages = kPersistent && kFitsWithOut<2> ? 2 : 1;
  using Storage = ForwardStorage<kBlockM, BlockN, HeadDim, kQStages, kStages,
                                 kPersistent ? kOutStageBytes : 16>;
  static constexpr size_t kSmemBytes = kTileAlignment + sizeof(Storage);
  // Where O is staged: its own rows, or the tiles' bytes (every tile's: Q and beyond).
  static constexpr size_t kOutOffset = kPersistent ? offsetof(Storage, out) : 0;
  static constexpr size_t kOutBytes = kPersistent ? kOutStageBytes : offsetof(Storage, out);
  static_assert(kOutStageBytes <= kOutBytes, "O's staging rows fit where they go");

  static_assert(HeadDim % 64 == 0, "swizzled tiles hold whole 64-column blocks");
  static_assert(BlockN % 16 == 0 && BlockN <= 256, "wgmma N is a multiple of 8 up to 256");
  static_assert(kBlockM <= 256, "one TMA box covers the Q tile's rows");
  static_assert(sizeof(Storage::q[0]) % kTileAlignment == 0 &&
                    offsetof(Storage, k) % kTileAlignment == 0 &&
                    offsetof(Storage, v) % kTileAlignment == 0 &&
                    sizeof(Storage::k[0]) % kTileAlignment == 0,
                "every tile starts on a swizzle boundary");
};

// One for each of kWgmmaForwardHeadDims (head_dims.h).
template <int kHeadDim>
struct ForwardTraits;
// Chosen by measurement on an H200 (fp16, B=4 H=32 S=4096 and B=1 H=8 S=1024 at D=64; B=4 H=16
// S=4096 and B=1 H=16 S=16384 at D=128) among block N 64, 128 and 192 at D=64, and 3 stages
// instead of 2 (slower at D=128: the third slot costs more than it hides).
template <>
struct ForwardTraits<64> : ForwardConfig<64, 2, 128> {};   // 128 x 128 blocks
template <>
struct ForwardTraits<128> : ForwardConfig<128, 2, 128> {};  // 128 x 128
// Tall tiles: three consumer warpgroups on 192 query rows, where a head_dim has them, for the
// plain kernel on grids with enough tiles (launch_forward's estimate). At head_dim 64 the
// softmax, a chain of dependent steps, bounds the 128-row kernel at two math warps a scheduler
// (performance log, "what the time is made of"); a third warpgroup hides more of it. 160
// registers a consumer thread hold S, P and O of 128 keys at 64 columns (ptxas: 8 bytes of
// spills), not at 128.
template <int kHeadDim>
inline constexpr bool kHasTallForward = kHeadDim == 64;
template <int kHeadDim>
using ForwardTallTraits = ForwardConfig<kHeadDim, 3, 128>;  // 192 x 128
// Above 128 the O accumulator (D / 2 registers a thread) and the K/V slots (two stages of block
// N x D each, 227 KB of shared memory in all) leave room for narrower key blocks only: at 192,
// S of 96 keys (48 registers) next to O's 96 and 192 KB of tiles; at 256, S of 64 keys next to
// O's 128 and 192 KB.
template <>
struct ForwardTraits<192> : ForwardConfig<192, 2, 96> {};  // 128 x 96
template <>
struct ForwardTraits<256> : ForwardConfig<256, 2, 64> {};  // 128 x 64

// Backward on wgmma and TMA (sm_90a): one CTA per (key block of 128, kv head, batch) of two
// consumer warpgroups (64 keys each: rows of S^T, dP^T, dK, dV) and one producer warpgroup that
// loads K and V once and Q, dO, LSE and D per query block of kBlockM rows (kStages slots). dQ
// of a query block needs dS of all 128 keys, so dS^T goes through shared memory (two buffers or
// more, so that one warpgroup may run an iteration ahead) and the two warpgroups split dQ's
// (kBlockM, D) tile: by rows when kBlockM = 128, by columns (D / 2 each) when kBlockM = 64 or
// 80 (there as dQ^T, kDqTransposed).
// The warpgroups of both backward kernels: two consumers and the producer, which hands them
// its registers (2 x 128 x 240 + 128 x 24 = 64512 of the 65536).
struct BackwardWarpgroups {
  static constexpr int kConsumerThreads = 256;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kProducerRegisters = 24;
  static_assert(kFitsRegisterFile<kConsumerThreads / 128, kConsumerRegisters, kProducerRegisters>);
  static constexpr int kThreads = kConsumerThreads + 128;
};

// ComputeDim: the columns of the products, where the tiles hold more (96 on 128-column tiles:
// TMA fills the last 32 with zeros, which the products skip, and the dQ accumulator keeps rows of
// kHeadDim).
template <int HeadDim, int BlockM, int ComputeDim = HeadDim, int MaxDqStages = 2>
struct BackwardConfig : BackwardWarpgroups {
  static constexpr int kHeadDim = HeadDim;  // of the tiles, the dQ stage and accumulator rows
  static constexpr int kComputeDim = ComputeDim;
  static_assert(ComputeDim <= HeadDim && ComputeDim % 32 == 0, "whole column pieces");
  static constexpr int kBlockN = 128;  // keys per CTA
  static constexpr int kBlockM = BlockM;  // queries per iteration
  static constexpr int kStages = 2;
  static constexpr bool kDqSplitRows = BlockM == 128;
  // Query blocks that are no multiple of 64 rows (80) cannot be the M of the dQ product: there
  // the warpgroups compute dQ^T = K^T dS^T (M: their D / 2 columns, N: the block's queries), and
  // dS is stored query-major (dS^T's transpose) to be that product's K-major B.
  static constexpr bool kDqTransposed = BlockM % 64 != 0;
  static constexpr int kDqCols = kDqSplitRows ? HeadDim : HeadDim / 2;  // dQ columns per warpgroup
  // As many dQ stages as fit, up to MaxDqStages, so that the consumers do not wait for the
  // reduces of the blocks before (it matters where a block's products are short: head_dim 64).
  // With dQ split by rows, a warpgroup's dQ rows take as many bytes as the column block of the
  // block's dS^T that only its own dQ product reads: dQ is staged there once that product is
  // done (kDqInScoreBuffers), and the dS^T buffers, as many as fit up to MaxDqStages, are the
  // stages (at head_dim 64, two stages of their own did not fit next to 128-query tiles).
  static constexpr bool kDqInScoreBuffers = kDqSplitRows && HeadDim * 4 == kBlockN * 2;
  template <int kDqStageCount, int kDsBuffers>
  static constexpr bool kFits =
      kTileAlignment + sizeof(BackwardStorage<BlockM, kBlockN, HeadDim, kStages, kDqStageCount,
                                              kDsBuffers>) <=
      kMaxSmemBytes;
  static constexpr int kDqStages = kDqInScoreBuffers                    ? 0
                                   : MaxDqStages >= 4 && kFits<4, 2>   ? 4
                                   : MaxDqStages >= 3 && kFits<3, 2>   ? 3
                                   : MaxDqStages >= 2 && kFits<2, 2>   ? 2
                                                                       : 1;
  static constexpr int kDsBuffers =
      kDqInScoreBuffers && MaxDqStages >= 3 && kFits<0, 3> ? 3 : 2;
  static constexpr bool kDqInQuerySlots = false;  // see ColumnSplitBackwardConfig
  using Storage = BackwardStorage<BlockM, kBlockN, HeadDim, kStages, kDqStages, kDsBuffers>;
  static constexpr int kDqSlots = Storage::kDqSlots;  // the dS^T buffers or the stages
  static constexpr size_t kSmemBytes = kTileAlignment + sizeof(Storage);
  static_assert(kSmemBytes <= kMaxSmemBytes, "fits one CTA of sm_90");
  // Bytes of the tiles alone (the epilogue reuses them to stage dK and dV).
  // The dQ stages after them are not among them: the producer's reduces may still read them.
  static constexpr size_t kTileBytes =
      kDqInScoreBuffers ? offsetof(Storage, ds) : offsetof(Storage, dq);

  static_assert(HeadDim % 64 == 0 && (BlockM == 64 || BlockM == 80 || BlockM == 128),
                "whole swizzle atoms (80: dS stored query-major, kDqTransposed)");
  static_assert(!kDqTransposed || kDqCols == 64, "dQ^T's M is one wgmma of 64 rows");
  static_assert(kDqCols % 32 == 0, "wgmma shapes exist for dQ blocks of 32, 64, 128 columns");
  static_assert(offsetof(Storage, v) % kTileAlignment == 0 &&
                    offsetof(Storage, q) % kTileAlignment == 0 &&
                    offsetof(Storage, dout) % kTileAlignment == 0 &&
                    offsetof(Storage, ds) % kTileAlignment == 0 &&
                    sizeof(Storage::q[0]) % kTileAlignment == 0 &&
                    sizeof(Storage::ds[0]) % kTileAlignment == 0,
                "every tile starts on a swizzle boundary");
};

// The shared memory of a column-split backward CTA (head dims above 128): K and V, the slots of
// Q and dO (each slot's Q and dO side by side: 64 x D 16-bit elements each, together the bytes
// of 64 x D fp32, so that at head_dim 256 they can be the query block's dQ stage once read), two
// P^T and two dS^T buffers (16-bit, swizzled; keys x queries), the dQ stage of the bulk reduce
// where it has its own (kDqStages 1 at 128 and 192, 2 at 128 in deterministic mode; 0 at 256,
// and the members below are placeholders of a few bytes), the LSE and D slots, then the mbarriers.
template <int kBlockM, int kBlockN, int kHeadDim, int kStages, int kDqStages, int kDqSlots>
struct ColumnSplitBackwardStorage {
  static constexpr bool kHasDq = kDqStages > 0;
  static constexpr size_t kQTileBytes = size_t(kBlockM) * kHeadDim * 2;
  unsigned char k[size_t(kBlockN) * kHeadDim * 2];
  unsigned char v[size_t(kBlockN) * kHeadDim * 2];
  unsigned char q_dout[kStages][2][kQTileBytes];
  unsigned char pt[2][size_t(kBlockN) * kBlockM * 2];  // P^T, from warpgroup 0 to both
  unsigned char ds[2][size_t(kBlockN) * kBlockM * 2];  // dS^T, from warpgroup 1 to both
  float dq[kHasDq ? kDqStages : 1][kHasDq ? kBlockM : 1][kHasDq ? kHeadDim : 4];
  float lse[kStages][kBlockM];
  float row_dot[kStages][kBlockM];
  uint64_t kv_full;
  uint64_t full[kStages];
  uint64_t empty[kStages];
  uint64_t dq_staged[kDqSlots > 0 ? kDqSlots : 1];  // as in BackwardStorage
  // As in BackwardStorage (unused here).
  uint64_t kv_empty, stage_free, out_staged, out_free, tile_ready[4];
  uint64_t dq_free[kHasDq ? kDqStages : 1];

  static constexpr size_t q_offset(int64_t slot) {
    return offsetof(ColumnSplitBackwardStorage, q_dout) + size_t(slot) * sizeof(q_dout[0]);
  }
  static constexpr size_t dout_offset(int64_t slot) { return q_offset(slot) + kQTileBytes; }
};

// Backward on wgmma for head dims above 128 (sm90/backward_column_split.cuh): there a warpgroup
// cannot own 64 keys' dK and dV (2 x 64 x 256 fp32 = 256 registers a thread at 256), so the two
// consumer warpgroups of a 64-key CTA split the work instead: warpgroup 0 computes S^T and P^T,
// warpgroup 1 dP^T and dS^T, both exchanged through shared memory; then each computes its half
// of the columns of dV, dK and dQ. Also at 128 on small grids, where its 64-key CTAs occupy twice
// the SMs of the key-split kernel's 128-key ones (column_split_pays()).
// Deterministic (head_dim 128 only): dQ added in key-block order (backward_steps.cuh), with a
// second dQ stage so that the consumers may run a block ahead of the turns.
template <int HeadDim, bool Deterministic = false>
struct ColumnSplitBackwardConfig : BackwardWarpgroups {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = 64;  // queries per block
  static constexpr int kBlockN = 64;  // keys per CTA
  static constexpr int kHalfCols = HeadDim / 2;  // dK, dV and dQ columns per warpgroup
  static constexpr int kStages = 2;
  // dQ by one bulk reduce per query block (backward.cuh's reduce_dq()) from a stage of
  // kBlockM x D floats: at 192 a stage of its own (48 KB, it fits next to two Q/dO slots); at
  // 256, where it does not, the query block's own Q/dO slot once both warpgroups are done
  // reading it (kDqInQuerySlots). The slot then waits for the reduce to read it before the
  // producer refills it, which costs less than adding dQ by fp32 atomics (measured at 192).
  static constexpr int kDqStages = Deterministic && HeadDim <= 128 ? 2 : HeadDim <= 192 ? 1 : 0;
  static constexpr bool kDqInQuerySlots = kDqStages == 0;
  static_assert(!Deterministic || !kDqInQuerySlots, "the turns free dQ stages of their own");
  static constexpr int kDqSlots = kDqInQuerySlots ? kStages : kDqStages;  // places a dQ is staged
  static constexpr int kDsBuffers = 2;            // BackwardSmem::ds(): P^T's and dS^T's
  static constexpr bool kDqInScoreBuffers = false;  // see BackwardConfig
  static constexpr bool kDqTransposed = false;      // see BackwardConfig
  using Storage =
      ColumnSplitBackwardStorage<kBlockM, kBlockN, HeadDim, kStages, kDqStages, kDqSlots>;
  static constexpr size_t kSmemBytes = kTileAlignment + sizeof(Storage);
  static_assert(kSmemBytes <= kMaxSmemBytes, "fits one CTA of sm_90");
  // Bytes of the tiles (the epilogue reuses them to stage dK and dV).
  static constexpr size_t kTileBytes = offsetof(Storage, lse);
  static_assert(kHalfCols % 32 == 0, "whole wgmma pieces (ColumnPieces)");
  static_assert(offsetof(Storage, v) % kTileAlignment == 0 &&
                    offsetof(Storage, q_dout) % kTileAlignment == 0 &&
                    offsetof(Storage, pt) % kTileAlignment == 0 &&
                    offsetof(Storage, ds) % kTileAlignment == 0 &&
                    Storage::kQTileBytes % kTileAlignment == 0 &&
                    sizeof(Storage::ds[0]) % kTileAlignment == 0,
                "every tile starts on a swizzle boundary");
  static_assert(sizeof(Storage::q_dout[0]) == size_t(kBlockM) * HeadDim * sizeof(float),
                "a slot's Q and dO hold a query block's dQ rows");
};

// One for each of kWgmmaBackwardHeadDims (head_dims.h): the key-split kernel up to 128, the
// column-split one above (at 128 on small grids too, ColumnSplitBackwardConfig<128>). Head_dim 64
// takes query blocks of 128: score products 128 columns wide and half the per-block waits,
// barriers and dQ reduces (H200, `fa` head_dim 64 backward: 5.9 % less time than blocks of 64,
// 13.8 % at S = 512; deterministic 7.0 %). The deterministic kernels take up to four dQ stages
// (three dS^T buffers at head_dim 64): a key block's turn to add its dQ may then wait that many
// blocks without holding the consumers up (H200, `fa` head_dim 64 with blocks of 64: 2.7 % less
// time, up to 5.8 %). The default kernels keep two: with four, that head_dim 64 backward took
// 0.4-1.0 % more.
template <int kHeadDim, bool kDeterministic = false>
struct BackwardTraits;
constexpr int max_dq_stages(bool deterministic) { return deterministic ? 4 : 2; }
template <bool kDeterministic>
struct BackwardTraits<64, kDeterministic>
    : BackwardConfig<64, 128, 64, max_dq_stages(kDeterministic)> {};
template <bool kDeterministic>
struct BackwardTraits<96, kDeterministic>
    : BackwardConfig<128, 64, 96, max_dq_stages(kDeterministic)> {};
template <bool kDeterministic>
struct BackwardTraits<128, kDeterministic>
    : BackwardConfig<128, 64, 128, max_dq_stages(kDeterministic)> {};
template <bool kDeterministic>
struct BackwardTraits<192, kDeterministic> : ColumnSplitBackwardConfig<192> {};
template <bool kDeterministic>
struct BackwardTraits<256, kDeterministic> : ColumnSplitBackwardConfig<256> {};

// The traits of one key-split backward kernel: those of its head dim, except that the
// deterministic variant kernels (softcap, ALiBi, windows, varlen batches; the fp32 sums) at
// head_dim 64 keep query blocks of 64 rows (H200, head_dim 64 variant backward: 3.7 % less time
// than on blocks of 128; the default variant kernels took 2.4 % more on blocks of 64).
template <int kHeadDim, bool kDeterministic, bool kVariants, bool kBlocksOf80 = false>
struct BackwardKernelTraits : BackwardTraits<kHeadDim, kDeterministic> {};
template <>
struct BackwardKernelTraits<64, true, true> : BackwardConfig<64, 64, 64, max_dq_stages(true)> {};
// kBlocksOf80: the default and deterministic dense kernels at head_dims 128 and 96 on query
// blocks of 80 rows (kDqTransposed): a fifth more work per block for the same chain of products,
// waits and barriers, and score products of 80 columns, whose operands take fewer shared-memory
// bytes per multiply-add. One dQ stage fits, deterministic or not.
template <bool kDeterministic>
struct BackwardKernelTraits<128, kDeterministic, false, true> : BackwardConfig<128, 80, 128> {};
template <bool kDeterministic>
struct BackwardKernelTraits<96, kDeterministic, false, true> : BackwardConfig<128, 80, 96> {};

}  // namespace cuflash::detail::sm90
