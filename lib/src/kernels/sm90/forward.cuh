// FlashAttention-2 forward on Hopper (sm_90a): wgmma for the products, TMA for the loads.
//
// Same algorithm and results contract as sm80/forward.cuh (online softmax in exp2, P kept in
// registers, no atomics: bitwise reproducible); what changes is how the work reaches the tensor
// cores. A warpgroup (4 warps) issues one m64nNk16 wgmma where mma.sync needs 4 * N / 8
// instructions, and wgmma reads Q, K and V straight from shared memory. A producer warp loads
// every tile with TMA, so the consumers spend no instructions on addresses and never wait for
// each other: each K and V slot has a "full" barrier (TMA bytes arrived) and an "empty" one
// (every consumer thread is done reading it).
//
// Consumer warpgroup, key block j (S_0 -> P_0 before the loop):
//   wait until K_j+1 and V_j are full
//   issue S_j+1 = Q K_j+1^T     (A = Q, B = K, both from swizzled shared tiles)
//   issue O += P_j V_j          (A = P_j from registers, B = V read N-major)
//   wait for S_j+1 only; release K_j+1; mask and exponentiate it into P_j+1 while P_j V_j
//   still runs on the tensor cores; wait for that; release V_j; rescale O to the new row max.
// The accumulator layout of each warp is mma.sync's, so mask.cuh and softmax.cuh apply as is.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <vector>

#include "kernels/common/copy.cuh"
#include "kernels/common/fast_divisor.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/score_mod.cuh"
#include "kernels/common/sequence.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/traits.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "workspace.h"

namespace cuflash::detail::sm90 {

// The block of a dense launch's tile t (TileWalk's numbering: num_m_blocks tiles per (batch,
// head), the heaviest block first), as forward_block() gives it, in 32-bit arithmetic by
// divisors fixed at launch. Every consumer thread and the producer work it out at each tile;
// forward_block()'s 64-bit divisions took 5-8 % of the time at head_dim 64 causal, S = 512
// (H100, `fa`), where tiles have one to four key blocks. Fewer than 2^31 tiles
// (launch_forward_on()).
struct DenseTileSplit {
  FastDivisor per_head;  // num_m_blocks
  FastDivisor heads;
  FastDivisor group;  // heads_per_kv

  DenseTileSplit() = default;
  __host__ DenseTileSplit(int64_t num_m_blocks, const ProblemParams& p)
      : per_head(uint32_t(num_m_blocks)),
        heads(uint32_t(p.heads)),
        group(uint32_t(p.heads_per_kv)) {}

  template <int kBlockM, int kBlockN, bool kLeftBound>
  __host__ __device__ __forceinline__ ForwardBlock block(const ProblemParams& p,
                                                         int64_t tile) const {
    const uint32_t bh = per_head.quotient(uint32_t(tile));
    const uint32_t order_block = uint32_t(tile) - bh * per_head.divisor;
    const uint32_t batch = heads.quotient(bh);
    const uint32_t head = bh - batch * heads.divisor;
    return forward_block_at<kBlockM, kBlockN, kLeftBound>(p, batch, head, group.quotient(head),
                                                          per_head.divisor - 1 - order_block);
  }
};

template <typename Element>
struct ForwardTmaParams {
  ForwardParams<Element> base;
  CUtensorMap q_map, k_map, v_map;  // boxes: 64 columns x kBlockM (Q) or kBlockN (K, V) rows
  int64_t tiles;                    // query blocks of every (batch, head), times the key splits
  PartialOutputs partials;          // the key_splits kernel's
  DenseTileSplit dense_tiles;       // the plain and window kernels'
  CUtensorMap out_map;  // O, boxes of 64 columns x 64 rows (the kernels that store O by TMA)
};

// Shared-space addresses of the members of a CTA's Traits::Storage, which starts at `tiles`.
template <typename Traits>
struct ForwardSmem {
  using Storage = typename Traits::Storage;
  using QTile = SwizzledTile<Traits::kBlockM, Traits::kHeadDim>;
  using KvTile = SwizzledTile<Traits::kBlockN, Traits::kHeadDim>;
  static_assert(sizeof(Storage::q[0]) == QTile::kBytes && sizeof(Storage::k[0]) == KvTile::kBytes);
  static_assert(kTileAlignment == kSwizzleAtomBytes);
  uint32_t tiles;  // kTileAlignment-aligned

  // Key blocks and Q loads are counted over the CTA's tiles, in 32 unsigned bits: powers of two,
  // so that the counts may wrap (SlotRing).
  static_assert((Traits::kStages & (Traits::kStages - 1)) == 0, "a power of two");
  static_assert((Traits::kQStages & (Traits::kQStages - 1)) == 0, "a power of two");
  using Blocks = SlotRing<Traits::kStages>;
  using QLoads = SlotRing<Traits::kQStages>;
  __device__ uint32_t at(size_t offset) const { return tiles + uint32_t(offset); }

  __device__ QTile q(uint32_t load) const {
    return {at(offsetof(Storage, q) + QLoads::slot(load) * sizeof(Storage::q[0]))};
  }
  __device__ KvTile k(uint32_t block) const {
    return {at(offsetof(Storage, k) + Blocks::slot(block) * sizeof(Storage::k[0]))};
  }
  __device__ KvTile v(uint32_t block) const {
    return {at(offsetof(Storage, v) + Blocks::slot(block) * sizeof(Storage::v[0]))};
  }
  __device__ uint32_t q_full(uint32_t load) const {
    return at(offsetof(Storage, q_full) + 8 * QLoads::slot(load));
  }
  __device__ uint32_t q_empty(uint32_t load) const {
    return at(offsetof(Storage, q_empty) + 8 * QLoads::slot(load));
  }
  __device__ uint32_t k_full(uint32_t block) const {
    return at(offsetof(Storage, k_full) + 8 * Blocks::slot(block));
  }
  __device__ uint32_t v_full(uint32_t block) const {
    return at(offsetof(Storage, v_full) + 8 * Blocks::slot(block));
  }
  __device__ uint32_t k_empty(uint32_t block) const {
    return at(offsetof(Storage, k_empty) + 8 * Blocks::slot(block));
  }
  __device__ uint32_t v_empty(uint32_t block) const {
    return at(offsetof(Storage, v_empty) + 8 * Blocks::slot(block));
  }
};

// The tiles of the grid: (query block, batch * heads) pairs, num_m_blocks per head, the
// heaviest block of each head first (schedule.cuh). CTA c of `ctas` runs tiles c, then, round by
// round, one of every `ctas` in alternate directions (2 ctas - 1 - c, 2 ctas + c, ...), so that
// a CTA that took a heavy tile of a causal head in one round tends to take a light one in the
// next. With one CTA per tile this is tile c alone.
struct TileWalk {
  int64_t tiles;
  int64_t num_m_blocks;
  int64_t ctas;

  __host__ __device__ int64_t tile(int64_t round, int64_t cta) const {
    return round * ctas + (round % 2 == 0 ? cta : ctas - 1 - cta);
  }
  __host__ __device__ BlockOrder order(int64_t tile) const {
    return {tile % num_m_blocks, tile / num_m_blocks};
  }
};

// The finishing times, in half key blocks of a tile, of the busiest CTA when persistent CTAs walk
// the tiles and when one CTA runs each tile, which the hardware hands out in tile order as SMs
// free up. Both count a tile's key blocks plus its own prologue and epilogue: half a block for a
// persistent CTA, whose next tile's loads overlap its epilogue, one block otherwise (measured:
// 8-16 % faster on tiles of 4 key blocks). Tiles of one cost always favour the persistent walk;
// under a causal mask the cost falls along each head, and where the number of CTAs and the
// blocks per head do not fit together the static shares drift apart (B=1, H=8, 16k causal,
// D=128: the largest share 1.78x the mean, 0.80 -> 1.40 ms), which the hardware's order avoids.
// For the kernels that walk (plain, and window: kLeftBound; the variant kernels never walk).
struct WalkMakespans {
  int64_t persistent;
  int64_t per_tile;
  bool persistent_is_faster() const { return persistent <= per_tile; }
  int64_t fastest() const { return std::min(persistent, per_tile); }
};

template <typename Traits, bool kLeftBound>
WalkMakespans estimate_walk_makespans(const ProblemParams& p, const TileWalk& walk) {
  // A tile's key blocks depend on its query block only (dense problems: every head alike).
  std::vector<int64_t> blocks(size_t(walk.num_m_blocks));
  for (int64_t block = 0; block < walk.num_m_blocks; ++block) {
    blocks[size_t(block)] = forward_block<Traits::kBlockM, Traits::kBlockN, kLeftBound>(
                                p, 0, walk.num_m_blocks, BlockOrder{block, 0})
                                .key_blocks;
  }
  auto cost = [&](int64_t tile) { return 2 * blocks[size_t(tile % walk.num_m_blocks)]; };
  WalkMakespans makespans{0, 0};
  for (int64_t cta = 0; cta < walk.ctas; ++cta) {
    int64_t share = 0;
    for (int64_t round = 0, tile = walk.tile(0, cta); tile < walk.tiles;
         tile = walk.tile(++round, cta)) {
      share += cost(tile) + 1;
    }
    makespans.persistent = std::max(makespans.persistent, share);
  }
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at;
  for (int64_t slot = 0; slot < walk.ctas; ++slot) free_at.push(0);
  for (int64_t tile = 0; tile < walk.tiles; ++tile) {
    const int64_t end = free_at.top() + cost(tile) + 2;
    free_at.pop();
    free_at.push(end);
    makespans.per_tile = std::max(makespans.per_tile, end);
  }
  return makespans;
}

// The walk of a dense launch on Traits' tiles: one CTA an SM at most.
template <typename Traits>
TileWalk forward_walk(const AttentionShape& shape, int64_t multiprocessors) {
  const int64_t m_blocks = ceil_div(shape.seq_q, Traits::kBlockM);
  const int64_t tiles = m_blocks * shape.batch * shape.heads;
  return {tiles, m_blocks, std::min(tiles, multiprocessors)};
}

// Remembered per shape: the estimates walk every tile (host time in proportion to the tiles),
// and training calls the same shapes again and again. A tile's key blocks follow from the rows,
// the keys and the band's ends alone. One table per caller: each lambda is a type of its own.
template <typename Estimate>
bool remembered(const std::array<int64_t, 6>& key, Estimate estimate) {
  static std::mutex mutex;
  static std::map<std::array<int64_t, 6>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(key);
  if (found != known.end()) return found->second;
  constexpr size_t kMaxRemembered = 4096;  // a bound for programs that sweep shapes
  if (known.size() >= kMaxRemembered) known.clear();
  return known[key] = estimate();
}

template <typename Traits, bool kLeftBound>
bool persistent_walk_is_faster(const ProblemParams& p, const TileWalk& walk) {
  if (walk.ctas >= walk.tiles) return true;  // one tile a CTA either way
  return remembered(
      {walk.tiles, walk.num_m_blocks, walk.ctas, p.seq_k, p.band_last, p.band_first},
      [&] { return estimate_walk_makespans<Traits, kLeftBound>(p, walk).persistent_is_faster(); });
}

// Whether the plain kernel on tall tiles (ForwardTallTraits) finishes first: a tall tile's key
// block takes kTallBlockCostPercent of a 128-row tile's for 1.5x the rows (H200, `fa` head_dim
// 64 without a mask, S >= 2k: 0.81-0.89 of the time of 128-row tiles; 131 rather than 128 since
// the 128-row tiles' work once a tile shrank, which moved `fa`'s causal grid of 2048 rows to them:
// 0.98-0.99 of its time on an H100), but the tiles are fewer and longer (a small grid's last
// round is fuller) and more of a causal tile's keys lie past its diagonal. The estimate weighs
// both walks' finishing times.
inline constexpr int64_t kTallBlockCostPercent = 131;

template <int kHeadDim>
bool tall_tiles_are_faster(const ProblemParams& p, const AttentionShape& shape,
                           int64_t multiprocessors) {
  using Wide = ForwardTraits<kHeadDim>;
  using Tall = ForwardTallTraits<kHeadDim>;
  return remembered(
      {shape.seq_q, shape.batch * shape.heads, multiprocessors, p.seq_k, p.band_last, p.band_first},
      [&] {
        const int64_t wide =
            estimate_walk_makespans<Wide, false>(p, forward_walk<Wide>(shape, multiprocessors))
                .fastest();
        const int64_t tall =
            estimate_walk_makespans<Tall, false>(p, forward_walk<Tall>(shape, multiprocessors))
                .fastest();
        return tall * kTallBlockCostPercent < wide * 100;
      });
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A tile of `rows` rows from (row0, head, batch) of a tensor map, one TMA box per 64 columns.
template <int kRows, int kCols>
__device__ __forceinline__ void load_tile_tma(SwizzledTile<kRows, kCols> tile,
                                              const CUtensorMap& map, uint32_t full_barrier,
                                              int64_t row0, int64_t head, int64_t batch) {
  mbarrier_arrive_expect_bytes(full_barrier, uint32_t(SwizzledTile<kRows, kCols>::kBytes));
#pragma unroll
  for (int column = 0; column < kCols; column += kTmaBoxColumns) {
    tma_load_box(tile.base + (column / kTmaBoxColumns) * tile.kColumnBlockBytes, map,
                 full_barrier, column, int(row0), int(head), int(batch));
  }
}

// The producer, for one tile: Q into its slot (once the consumers are done with the tile's that
// held it before), then K_j and V_j into their slots as soon as the consumers free them.
// `loaded` counts the key blocks loaded for earlier tiles (slots and barrier phases follow the
// running count), `q_loads` the Q tiles; the keys start at block first_key_block, the tile's
// sequence at `start`.
template <typename Traits, typename Element, bool kMayBeVarlen>
__device__ __forceinline__ void produce_tiles(const ForwardTmaParams<Element>& params,
                                              ForwardSmem<Traits> smem,
                                              SequenceStart<kMayBeVarlen> start,
                                              const ForwardBlock& tile, int64_t loaded,
                                              int64_t q_loads) {
  using Smem = ForwardSmem<Traits>;
  const int64_t batch = start.map_batch(tile.batch);
  const uint32_t q_load = uint32_t(q_loads);
  if (q_loads >= Traits::kQStages) {
    mbarrier_wait(smem.q_empty(q_load), Smem::QLoads::parity(q_load) ^ 1u);
  }
  load_tile_tma(smem.q(q_load), params.q_map, smem.q_full(q_load), start.first_row() + tile.q0,
                tile.head, batch);
  for (int64_t j = 0; j < tile.key_blocks; ++j) {
    const int64_t count = loaded + j;  // this CTA's key blocks so far
    const uint32_t block = uint32_t(count);
    const int64_t k0 = start.first_key() + (tile.first_key_block + j) * Traits::kBlockN;
    if (count >= Traits::kStages)
      mbarrier_wait(smem.k_empty(block), Smem::Blocks::parity(block) ^ 1u);
    load_tile_tma(smem.k(block), params.k_map, smem.k_full(block), k0, tile.kv_head, batch);
    if (count >= Traits::kStages)
      mbarrier_wait(smem.v_empty(block), Smem::Blocks::parity(block) ^ 1u);
    load_tile_tma(smem.v(block), params.v_map, smem.v_full(block), k0, tile.kv_head, batch);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The four forward kernels of a head_dim: `plain` (dense batches, causal or no mask, and a
// band bounded on the right only), `window` (the same with a band bounded on the left too: the
// default kernel's tile walk, so that the short key loops of a window overlap one tile's
// epilogue with the next one's loads), `variants` (softcap, ALiBi, varlen batches: one tile a
// CTA, their registers going to the score modifications), `key_splits` (plain's calls on grids
// too small for the GPU: each tile's key blocks split into PartialOutputs::splits runs, one
// tile a CTA, each writing its partial O and LSE for the merge; a kernel of its own so that
// plain keeps its code).
enum class ForwardKernel { plain, window, variants, key_splits };

// The kernels that store O by TMA from staged boxes: the plain and window kernels where Traits
// give O staging rows of their own (kPersistent). Not the variant kernels, which take varlen
// batches whose sequences a box would overrun, nor key_splits, which writes fp32 partials.
template <typename Traits>
__host__ __device__ constexpr bool stores_out_by_tma(ForwardKernel kind) {
  return Traits::kPersistent && (kind == ForwardKernel::plain || kind == ForwardKernel::window);
}

// Tile `split` of `splits` keeps its even share of the block's key blocks, as the split kernel
// divides them (split/forward.cuh); a share may be empty.
__host__ __device__ __forceinline__ void keep_key_split(ForwardBlock& block, int64_t split,
                                                        int64_t splits) {
  const KeyBlockShare share = key_block_share(block.key_blocks, split, splits);
  block.first_key_block += share.begin;
  block.key_blocks = share.end - share.begin;
}

// The partial row (PartialOutputs) of query 0 of a tile's (batch, head) in split `split`.
__device__ __forceinline__ int64_t first_partial_row(const ProblemParams& p, int64_t split,
                                                     const ForwardBlock& block) {
  return partial_row(p, split, (block.batch * p.heads + block.head) * p.seq_q);
}

// Writes a warp's rows of one key split's partial result: O normalized over the split's keys
// and the rows' LSE, fp32, at rows [split, batch, head, query] (head_dim values each).
// `first_row` is the partial row of query 0 of the tile's (batch, head) in this split.
template <int kOutTiles>
__device__ __forceinline__ void store_partial_rows(
    const PartialOutputs& partials, int64_t first_row, int64_t fragment_row, int64_t seq_q,
    const float (&o_acc)[kOutTiles][4], const float (&normalizer)[2], const float (&row_lse)[2],
    int head_dim, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t query = fragment_row + 8 * half;
    if (query >= seq_q) continue;
    const int64_t row = first_row + query;
    store_accumulator_row(partials.out + row * head_dim, o_acc, half, normalizer[half], head_dim,
                          lane);
    if (lane % 4 == 0) partials.lse[row] = row_lse[half];
  }
}

template <typename Element, typename Traits, ForwardKernel kKernel>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    forward_kernel(const __grid_constant__ ForwardTmaParams<Element> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kHeadDim = Traits::kHeadDim;
  using Smem = ForwardSmem<Traits>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kConsumers = Traits::kConsumerThreads;
  constexpr int kConsumerRegisters = Traits::kConsumerRegisters;
  constexpr int kProducerRegisters = Traits::kProducerRegisters;
  constexpr int kScoreTiles = kBlockN / 8;  // n8 tiles of S per warp
  constexpr int kOutTiles = kHeadDim / 8;   // n8 tiles of O per warp
  using Mma = Wgmma<Element, kBlockN>;      // S = Q K^T: 64 x kBlockN per warpgroup
  using MmaOut = Wgmma<Element, kHeadDim>;  // O += P V: 64 x D per warpgroup
  constexpr bool kVariants = kKernel == ForwardKernel::variants;
  constexpr bool kLeftBound = kKernel == ForwardKernel::window || kVariants;
  constexpr bool kKeySplits = kKernel == ForwardKernel::key_splits;

  const int thread = threadIdx.x;
  const int lane = thread % 32;
  const TileWalk walk{params.tiles, params.base.num_m_blocks, gridDim.x};
  const int64_t cta = blockIdx.x;
  // The variant kernels run one tile a CTA and take varlen batches: their problem is that of
  // their tile's sequence (sequence.cuh; the launch's own in a dense batch). The plain and
  // window kernels (dense batches only) read the launch's constants rather than hold a copy.
  const ProblemParams sequence =
      kVariants ? sequence_problem(params.base.problem,
                                   walk.order(walk.tile(0, cta)).head / params.base.problem.heads)
                : ProblemParams{};
  const ProblemParams& p = kVariants ? sequence : params.base.problem;
  const SequenceStart<kVariants> start{p};
  // Plain block order within a head: tiles of one head run together and share its K/V in L2.
  // A tile past the end of a shorter sequence of a varlen batch has no rows and no keys.
  // The key_splits kernel's tile t is split t % splits of query tile t / splits.
  auto tile_block = [&](int64_t tile) {
    if constexpr (!kVariants && !kKeySplits) {
      return params.dense_tiles.template block<kBlockM, kBlockN, kLeftBound>(p, tile);
    } else {
      const BlockOrder order = walk.order(kKeySplits ? tile / params.partials.splits : tile);
      const int64_t m_blocks = (p.seq_q + kBlockM - 1) / kBlockM;  // num_m_blocks when dense
      if (order.block >= m_blocks) {
        ForwardBlock none{};
        none.q0 = p.seq_q;
        return none;
      }
      if constexpr (kKeySplits) {
        ForwardBlock block = forward_block<kBlockM, kBlockN, kLeftBound>(p, 0, m_blocks, order);
        keep_key_split(block, tile % params.partials.splits, params.partials.splits);
        return block;
      } else {
        return forward_block<kBlockM, kBlockN, kLeftBound>(p, 0, m_blocks, order);
      }
    }
  };

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const uint32_t shared_base = shared_address(shared_bytes);
  const Smem smem{(shared_base + kSwizzleAtomBytes - 1) & ~uint32_t(kSwizzleAtomBytes - 1)};
  if (thread == kConsumers) {
    for (int slot = 0; slot < Traits::kQStages; ++slot) {
      mbarrier_init(smem.q_full(slot), 1);
      mbarrier_init(smem.q_empty(slot), kConsumers);
    }
    for (int slot = 0; slot < Traits::kStages; ++slot) {
      mbarrier_init(smem.k_full(slot), 1);
      mbarrier_init(smem.v_full(slot), 1);
      mbarrier_init(smem.k_empty(slot), kConsumers);
      mbarrier_init(smem.v_empty(slot), kConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (thread >= kConsumers) {  // the producer warpgroup: one thread issues every load
    warpgroup_release_registers<kProducerRegisters>();
    if (thread == kConsumers) {
      int64_t loaded = 0;
      int64_t q_loads = 0;
      for (int64_t round = 0, tile = walk.tile(0, cta); tile < walk.tiles;
           tile = walk.tile(++round, cta)) {
        const ForwardBlock block = tile_block(tile);
        if (block.key_blocks == 0) continue;
        produce_tiles<Traits>(params, smem, start, block, loaded, q_loads);
        loaded += block.key_blocks;
        ++q_loads;
      }
    }
    return;
  }

  warpgroup_claim_registers<kConsumerRegisters>();
  const int warp_group = thread / 128;
  const int warp_group_row0 = 64 * warp_group;  // this warpgroup's rows within the block
  const int warp_row0 = warp_group_row0 + 16 * ((thread / 32) % 4);
  [[maybe_unused]] const bool masks_end = p.seq_k % kBlockN != 0;  // (not the window kernel)
  using OutTile = SmemTile<Element, Traits::kOutStride>;
  static_assert(Traits::kOutStride == kHeadDim + kSmemPadElements<int(sizeof(Element))>);
  [[maybe_unused]] const OutTile out_tile{
      reinterpret_cast<Element*>(shared_bytes + (smem.tiles - shared_base) + Traits::kOutOffset)};
  // O by TMA (stores_out_by_tma()): each warpgroup stages its 64 rows in the boxes' swizzled
  // layout by stmatrix, and one of its threads stores them, a bulk request a 64-column box that
  // the map clips at the sequence's end and at head_dim, so that the warps go on to the next tile
  // rather than copy rows to global memory.
  constexpr bool kTmaStore = stores_out_by_tma<Traits>(kKernel);
  static_assert(!kTmaStore || Traits::kOutOffset % kTileAlignment == 0, "boxes start swizzled");
  using OutBoxes = SwizzledTile<kBlockM, kHeadDim>;
  [[maybe_unused]] const OutBoxes out_boxes{smem.tiles + uint32_t(Traits::kOutOffset)};
  const bool stores_boxes = kTmaStore && thread % 128 == 0;
  [[maybe_unused]] ForwardScoreModFor<Element> mod;
  uint32_t consumed = 0;  // key blocks of earlier tiles: slots and phases follow the running count
  int64_t q_loads = 0;

  // Turns (Traits::kAlternate), in a ring: named barrier kFirstTurnBarrier + w opens when
  // warpgroup w may issue; it needs w's own 128 threads and an arrival of the 128 of the
  // warpgroup before it (the last one's for warpgroup 0). Warpgroup 0 goes first, and the turns
  // run on across the CTA's tiles: warpgroup 0 issues a tile's first scores as soon as the last
  // warpgroup has issued the previous tile's last products, while that one still writes its
  // rows. The last warpgroup opens the first turn at the first tile with key blocks and
  // warpgroup 0 takes the last hand-over after the walk, so that no arrival is left pending when
  // the CTA ends. (Opened before the walk instead, the turn made ptxas spill 84-184 bytes in the
  // one-tile kernels of head_dim 256.)
  constexpr int kWarpGroups = Traits::kWarpGroups;
  constexpr int kFirstRowsBarrier = kFirstTurnBarrier + kWarpGroups;  // warpgroup w's rows: + w
  auto wait_for_turn = [&] {
    if constexpr (Traits::kAlternate) {
      named_barrier_sync(kFirstTurnBarrier + warp_group, 256);
    }
  };
  auto pass_turn = [&] {
    if constexpr (Traits::kAlternate) {
      // 1 - w for two: the modulo, kept in a register across the kernel, changed ptxas's
      // schedule of the two-warpgroup kernels (4-5 % more time at head_dim 64, S <= 1k).
      const int next = kWarpGroups == 2 ? 1 - warp_group : (warp_group + 1) % kWarpGroups;
      named_barrier_arrive(kFirstTurnBarrier + next, 256);
    }
  };

  for (int64_t round = 0, tile = walk.tile(0, cta); tile < walk.tiles;
       tile = walk.tile(++round, cta)) {
    const ForwardBlock block = tile_block(tile);
    // The output rows of the tile, computed where they are written rather than kept through
    // the key loop.
    auto out_rows = [&] {
      return params.base.out.slice(block.batch, block.head, start.first_row());
    };
    auto lse_rows = [&] { return params.base.lse + start.rows(block.batch, block.head); };
    const int64_t q0 = block.q0;
    if (block.key_blocks == 0) {
      if constexpr (kKeySplits) {  // the split saw no key: its partials weigh nothing
        if (thread < kBlockM && q0 + thread < p.seq_q) {
          float* lse =
              params.partials.lse + first_partial_row(p, tile % params.partials.splits, block);
          lse[q0 + thread] = kEmptyRowLse;
        }
        break;  // one tile a CTA (launch_forward)
      } else {
        store_empty_block<kBlockM, kHeadDim, kConsumers>(
            out_rows(), params.base.out.seq_stride, lse_rows(), q0, p.seq_q, thread, p.head_dim);
      }
      continue;
    }
    const int64_t num_key_blocks = block.key_blocks;
    const int64_t fragment_row = q0 + warp_row0 + lane / 4;  // query of fragment row `group`
    const uint32_t q_load = uint32_t(q_loads);               // this tile's Q: its slot and phase
    ++q_loads;
    // Running index of this tile's key block j: its slot and barrier phase.
    auto slot_of = [&](int64_t j) { return consumed + uint32_t(j); };

    // S_j = Q K_j^T into s (64 x kBlockN per warpgroup); the first k step overwrites s.
    auto issue_scores = [&](float (&s)[kScoreTiles][4], int64_t j) {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        Mma::template ss<0, 0>(s, k_major_descriptor(smem.q(q_load), warp_group_row0, 16 * kk),
                               k_major_descriptor(smem.k(slot_of(j)), 0, 16 * kk), kk > 0);
      }
      wgmma_commit();
    };
    // Modifies (kVariants) and masks S_j where needed and turns it into P_j (unnormalized
    // probabilities).
    OnlineSoftmax softmax;
    if constexpr (kVariants) mod = forward_score_mod<Element>(p, block.batch, block.head);
    // Modified scores are in the mod's units (scale_log2 where they stay raw).
    const float softmax_scale = kVariants ? mod.unit : p.scale_log2;
    // The window kernel works out once a tile which key blocks need no mask (32-bit compares in
    // the loop rather than the band's 64-bit bounds: the walk's registers).
    [[maybe_unused]] const UnmaskedBlocks unmasked =
        kKernel == ForwardKernel::window
            ? unmasked_blocks<kBlockM, kBlockN>(p, q0, block.first_key_block, num_key_blocks)
            : UnmaskedBlocks{};
    auto exponentiate = [&](float (&s)[kScoreTiles][4], int64_t j, float (&rescale)[2]) {
      const int64_t k0 = (block.first_key_block + j) * kBlockN;
      if constexpr (kVariants) {
        modify_scores(s, mod, p, k0, fragment_row, lane);
      }
      bool masked;
      if constexpr (kKernel == ForwardKernel::window) {
        masked = !unmasked.contains(int(j));
      } else {
        masked = (masks_end && k0 + kBlockN > p.seq_k) ||
                 crosses_band<kLeftBound>(p, q0, kBlockM, k0, kBlockN);
      }
      if (masked) mask_scores<kLeftBound>(s, p, k0, fragment_row, lane);
      softmax.exponentiate<kScoreTiles, Traits::kLazyMax>(s, softmax_scale, rescale);
    };
    uint32_t p_fragments[kBlockN / 16][4];  // P_j as A operands, k16 slices of keys
    auto pack_probabilities = [&](const float (&s)[kScoreTiles][4]) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        accumulators_to_a<Element>(p_fragments[kk], s[2 * kk], s[2 * kk + 1]);
      }
    };
    float o_acc[kOutTiles][4];  // O (16 rows of this warp, D), unnormalized
    zero(o_acc);
    auto issue_products = [&](int64_t j) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        MmaOut::template rs<1>(o_acc, p_fragments[kk],
                               n_major_descriptor(smem.v(slot_of(j)), 16 * kk), true);
      }
      wgmma_commit();
    };

    if constexpr (Traits::kAlternate) {
      if (warp_group == kWarpGroups - 1 && q_loads == 1) pass_turn();  // warpgroup 0's first
    }
    {  // S_0 -> P_0 (O is still 0: nothing to rescale)
      float s[kScoreTiles][4];
      float rescale[2];
      mbarrier_wait(smem.q_full(q_load), Smem::QLoads::parity(q_load));
      mbarrier_wait(smem.k_full(slot_of(0)), Smem::Blocks::parity(slot_of(0)));
      wait_for_turn();
      wgmma_fence();
      issue_scores(s, 0);
      pass_turn();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      mbarrier_arrive(smem.k_empty(slot_of(0)));
      exponentiate(s, 0, rescale);
      pack_probabilities(s);
    }
    // Every block but the last has a successor whose scores overlap its products. (No branch
    // between the fence and the wgmma instructions: the compiler would serialize them.)
    for (int64_t j = 0; j + 1 < num_key_blocks; ++j) {
      float s[kScoreTiles][4];
      float rescale[2];
      mbarrier_wait(smem.k_full(slot_of(j + 1)), Smem::Blocks::parity(slot_of(j + 1)));
      mbarrier_wait(smem.v_full(slot_of(j)), Smem::Blocks::parity(slot_of(j)));
      wait_for_turn();
      wgmma_fence();
      issue_scores(s, j + 1);
      issue_products(j);
      pass_turn();
      wgmma_wait<1>();  // S_j+1 is ready; P_j V_j may still run
      wgmma_fence_operands(s);
      mbarrier_arrive(smem.k_empty(slot_of(j + 1)));
      exponentiate(s, j + 1, rescale);
      wgmma_wait<0>();
      wgmma_fence_operands(o_acc);
      wgmma_fence_operands(p_fragments);
      mbarrier_arrive(smem.v_empty(slot_of(j)));
      // With the lazy max, a warp's rows mostly keep theirs: skip multiplying O by ones.
      if (!Traits::kLazyMax || __any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f)) {
        OnlineSoftmax::rescale_rows(o_acc, rescale);
      }
      pack_probabilities(s);
    }
    // Every product with Q has completed: a later tile's Q may land in its slot.
    mbarrier_arrive(smem.q_empty(q_load));
    const int64_t last = num_key_blocks - 1;
    mbarrier_wait(smem.v_full(slot_of(last)), Smem::Blocks::parity(slot_of(last)));
    wait_for_turn();
    wgmma_fence();
    issue_products(last);
    pass_turn();
    wgmma_wait<0>();
    wgmma_fence_operands(o_acc);
    wgmma_fence_operands(p_fragments);
    mbarrier_arrive(smem.v_empty(slot_of(last)));
    consumed += uint32_t(num_key_blocks);

    // Epilogue: normalize, stage O in padded rows, write whole rows with 16-byte stores. With
    // rows of its own to stage O in (kPersistent), each warpgroup writes its 64 rows alone, so
    // that the other one's products run meanwhile; staged over the tiles, O waits for every
    // warpgroup's last wgmma reads. The first barrier orders the previous reads of the staging
    // rows before the overwrite, the second the stores before the reads.
    // The key_splits kernel writes its fp32 partials straight from the accumulators.
    const auto sync_writers = [&] {
      if constexpr (Traits::kPersistent) {
        named_barrier_sync(kFirstRowsBarrier + warp_group, 128);
      } else {
        named_barrier_sync(kComputeBarrier, kConsumers);
      }
    };
    if constexpr (kKeySplits) {
      float normalizer[2];
      float row_lse[2];
      softmax.finish(normalizer, row_lse);
      store_partial_rows(params.partials,
                         first_partial_row(p, tile % params.partials.splits, block), fragment_row,
                         p.seq_q, o_acc, normalizer, row_lse, p.head_dim, lane);
      break;  // one tile a CTA (launch_forward): no walk state kept across the loop
    }
    if (stores_boxes) bulk_wait_read<0>();  // the previous tile's boxes have left the rows
    sync_writers();
    float normalizer[2];
    float row_lse[2];
    softmax.finish(normalizer, row_lse);
    if constexpr (kTmaStore) {
      stage_accumulator_rows<Element>(out_boxes, o_acc, warp_row0, 0, normalizer, lane);
      fence_view_async_shared();  // the stores -> visible to the TMA stores
    } else {
      store_accumulators(out_tile, o_acc, warp_row0, normalizer, lane);
    }
    if (lane % 4 == 0) {
      float* lse = lse_rows();
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = fragment_row + 8 * half;
        if (row < p.seq_q) lse[row] = row_lse[half];
      }
    }
    sync_writers();
    if constexpr (kTmaStore) {
      if (stores_boxes) {
#pragma unroll
        for (int column = 0; column < kHeadDim; column += kTmaBoxColumns) {
          tma_store_box(params.out_map,
                        out_boxes.base + warp_group_row0 * kSwizzleBytes +
                            column / kTmaBoxColumns * OutBoxes::kColumnBlockBytes,
                        column, int(q0 + warp_group_row0), int(block.head), int(block.batch));
        }
        bulk_commit_group();
      }
    } else if constexpr (Traits::kPersistent) {
      store_tile<64, kHeadDim, 128>(out_rows(), params.base.out.seq_stride, q0 + warp_group_row0,
                                    p.seq_q, OutTile{out_tile.at(warp_group_row0, 0)}, thread % 128,
                                    p.head_dim);
    } else {
      store_tile<kBlockM, kHeadDim, kConsumers>(out_rows(), params.base.out.seq_stride, q0,
                                                p.seq_q, out_tile, thread, p.head_dim);
    }
    // One tile per CTA (a head_dim without room for O's staging rows, or the variant kernels,
    // which need the walk's registers: softcap 30, B=1 H=16 16k causal, 516 -> 480 TFLOP/s):
    // saying so frees them.
    if constexpr (!Traits::kPersistent || kVariants) break;
  }
  if constexpr (Traits::kAlternate) {
    if (warp_group == 0 && q_loads > 0) wait_for_turn();  // the last warpgroup's hand-over
  }
  // The staging rows outlive the boxes' reads of them (the writes complete with the grid).
  if (stores_boxes) bulk_wait_read<0>();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The kernel of a call: window for a dense batch whose only variant is a band with a left end,
// variants for any other variant or a varlen batch, plain otherwise.
inline ForwardKernel forward_kernel_for(const ForwardArgs& args) {
  if (args.varlen.enabled()) return ForwardKernel::variants;
  if (!uses_variant_kernels(args)) return ForwardKernel::plain;
  ForwardArgs without_window = args;
  without_window.window.left = -1;
  return uses_variant_kernels(without_window) ? ForwardKernel::variants : ForwardKernel::window;
}

// Launches the TMA + wgmma forward; returns false (launching nothing) when a tensor cannot be
// described to TMA, so that the caller falls back to the mma.sync kernel. A varlen batch runs on
// the variant kernels (one tile a CTA, each its sequence's problem), its tensors mapped as one
// batch entry of all the tokens. With partials.splits > 1 (a dense call for the plain kernel:
// split::plan_forward()) the key_splits kernel writes the partials instead of O and LSE, and the
// caller merges them. kPlainOnly: Traits has the plain kernel alone (tall tiles), which the
// caller has chosen.
template <typename Element, typename Traits, bool kPlainOnly = false>
bool launch_forward_on(const ForwardArgs& args, cudaStream_t stream,
                       const PartialOutputs& partials) {
  constexpr int kHeadDim = Traits::kHeadDim;
  static_assert(Traits::kOutStride == kHeadDim + kSmemPadElements<int(sizeof(Element))>);
  const AttentionShape& shape = args.shape;
  const bool varlen = args.varlen.enabled();
  const int64_t map_batch = varlen ? 1 : shape.batch;
  const int64_t map_seq_q = varlen ? args.varlen.total_q : shape.seq_q;
  const int64_t map_seq_k = varlen ? args.varlen.total_k : shape.seq_k;
  ForwardTmaParams<Element> params{};
  if (!make_tile_tensor_map(params.q_map, args.q, args.dtype, map_batch, shape.heads, map_seq_q,
                            shape.head_dim, Traits::kBlockM) ||
      !make_tile_tensor_map(params.k_map, args.k, args.dtype, map_batch, shape.heads_kv,
                            map_seq_k, shape.head_dim, Traits::kBlockN) ||
      !make_tile_tensor_map(params.v_map, args.v, args.dtype, map_batch, shape.heads_kv,
                            map_seq_k, shape.head_dim, Traits::kBlockN)) {
    return false;
  }
  ForwardParams<Element>& base = params.base;
  base.problem = problem_params(args);
  base.out = global_tensor<Element>(args.out);
  base.lse = args.lse;
  base.num_m_blocks = ceil_div(shape.seq_q, Traits::kBlockM);
  base.bh_offset = 0;
  params.tiles = base.num_m_blocks * shape.batch * shape.heads * partials.splits;
  params.partials = partials;
  // One CTA per tile needs the tiles to fit a 1-D grid (2^31 - 1); beyond, the mma.sync kernels
  // (grids in chunks) run the call.
  if (params.tiles > std::numeric_limits<int32_t>::max()) return false;
  params.dense_tiles = DenseTileSplit(base.num_m_blocks, base.problem);
  const bool key_splits = partials.splits > 1;
  if (key_splits && (varlen || forward_kernel_for(args) != ForwardKernel::plain)) return false;
  const ForwardKernel kind = key_splits ? ForwardKernel::key_splits : forward_kernel_for(args);
  if (stores_out_by_tma<Traits>(kind) &&
      !make_tile_tensor_map(params.out_map, args.out, args.dtype, shape.batch, shape.heads,
                            shape.seq_q, shape.head_dim, 64)) {
    return false;
  }
  // The variant and key_splits kernels never walk; the others (dense batches, params.tiles
  // the walk's tiles) do where the estimate says it pays.
  const TileWalk walk = forward_walk<Traits>(shape, current_device_limits().multiprocessors);
  bool persistent = false;
  if (Traits::kPersistent && kind != ForwardKernel::variants && !key_splits) {
    persistent = kind == ForwardKernel::window
                     ? persistent_walk_is_faster<Traits, true>(base.problem, walk)
                     : persistent_walk_is_faster<Traits, false>(base.problem, walk);
  }
  const int64_t ctas = persistent ? walk.ctas : params.tiles;

  auto* kernel = &forward_kernel<Element, Traits, ForwardKernel::plain>;
  if constexpr (!kPlainOnly) {
    switch (kind) {
      case ForwardKernel::plain:
        break;
      case ForwardKernel::window:
        kernel = &forward_kernel<Element, Traits, ForwardKernel::window>;
        break;
      case ForwardKernel::variants:
        kernel = &forward_kernel<Element, Traits, ForwardKernel::variants>;
        break;
      case ForwardKernel::key_splits:
        kernel = &forward_kernel<Element, Traits, ForwardKernel::key_splits>;
        break;
    }
  }
  allow_dynamic_smem(kernel, Traits::kSmemBytes);
  launch_kernel(kernel, dim3(static_cast<unsigned>(ctas)), Traits::kThreads, Traits::kSmemBytes,
                stream, params);
  return true;
}

template <typename Element, int kHeadDim>
bool launch_forward(const ForwardArgs& args, cudaStream_t stream,
                    const PartialOutputs& partials = {}) {
  if constexpr (kHasTallForward<kHeadDim>) {
    if (partials.splits <= 1 && forward_kernel_for(args) == ForwardKernel::plain &&
        tall_tiles_are_faster<kHeadDim>(problem_params(args), args.shape,
                                        current_device_limits().multiprocessors)) {
      return launch_forward_on<Element, ForwardTallTraits<kHeadDim>, true>(args, stream, partials);
    }
  }
  return launch_forward_on<Element, ForwardTraits<kHeadDim>>(args, stream, partials);
}

}  // namespace cuflash::detail::sm90
