// FlashAttention-2 backward on Hopper (sm_90a) up to head_dim 128: wgmma for the five products,
// TMA for the loads (above 128, and at 128 on small grids: backward_column_split.cuh).
//
// Same algorithm and contract as sm80/backward.cuh (row_dot and dq_convert kernels around it, dQ
// added to an fp32 accumulator, here by TMA bulk reduces, dK and dV summed in registers over the
// GQA group). One CTA per (key
// block of 128, kv head, batch): consumer warpgroup w owns keys 64w..64w+63; the producer
// warpgroup loads K, V once and then Q, dO (TMA) and LSE, D (plain copies) of every query block
// into kStages slots. Per consumer warpgroup and query block:
//   S^T  = K_w Q^T,  dP^T = V_w dO^T           wgmma, operands from swizzled shared tiles
//   P^T  = exp2(S^T * scale*log2e - LSE * log2e), masked: while dP^T is multiplied
//   dV  += P^T dO                               wgmma, A = P^T from registers, runs while
//   dS^T = P^T * (dP^T - D); dS^T -> shared memory  ... this is computed
//   both warpgroups meet (dS^T in place)
//   dQ part = dS K                              wgmma, A = dS read M-major from shared memory
//   dK  += dS^T Q                               wgmma, A = dS^T from registers, runs while
//   dQ part -> shared memory                    ... this is staged
// Query blocks are 64 rows (the warpgroups split dQ's columns) or, at head_dim 64, 128 rows
// (they split its rows; dV then waits for dS^T, and each warpgroup stages its dQ rows in the
// dS^T buffer's column block that only its own dQ product read: BackwardConfig), or, on the
// dense kernels at head_dims 128 and 96 from 2048 query rows, 80 rows (dV waits for dS^T; dS is
// stored transposed, query-major, and each warpgroup computes dQ^T = K^T dS^T for its D / 2
// columns: kDqTransposed; dK is issued with dV, and both are done before dQ^T: kDkWithDv;
// a block's dQ^T is staged in the next iteration, behind the next block's S^T: kDqStagedLate).
// The dQ stage holds fp32 rows, swizzled as the accumulator's; a thread of the producer
// warpgroup adds it to the accumulator with one bulk reduce (reduce_dq()): a TMA request in
// place of a vector atomic per pair of floats from every consumer thread, and in deterministic
// mode the same thread keeps the dQ turns, so that the consumers never wait for them.
// The default dense kernels on query blocks of 64 or 128 rows have a walking twin (kWalk) for
// short sequences (backward_walk_pays()): a CTA an SM walks key blocks (KeyBlockWalk); the
// producer loads the next block's first Q and dO while the last products run and its K and V
// once they are done; the consumers stage dK and dV in the dS^T buffers and
// dQ stages, which that thread stores by TMA while the next block's first products run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common/backward_steps.cuh"
#include "kernels/common/copy.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/sequence.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm90/column_pieces.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/traits.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "workspace.h"

namespace cuflash::detail::sm90 {

// The tiles of a persistent backward launch: (key block, batch * kv head) pairs, a kv head's
// key blocks one after the other (BackwardBlock: the order of the CTAs of one tile each). CTA c
// takes tile c first, then, whenever its producer has issued a tile's loads, the next tile no CTA
// has taken (BackwardParams::tile_counter): tiles are taken in order, so that a head's key blocks
// run together (they share its Q, dO and dQ accumulator in L2) and under a causal mask the
// heaviest come first, and a CTA that finishes early takes more, as the hardware hands out CTAs
// of one tile. Two static orders, both of CTA c taking tiles c, 2G - 1 - c, 2G + c, ..., lost
// (H200, `fa` and `seed` backward against one CTA a tile): in this order, whose causal shares
// drift apart on few long heads (B = 1, H = 8, causal 4k-16k: 1.14-1.82x the time), and every
// head's first key block first, which spreads the CTAs running together over as many heads
// (causal S = 512-2k: 1.19-1.35x).
struct KeyBlockWalk {
  uint32_t tiles;       // key_blocks * batch * heads_kv (< 2^31: 128 keys of a tensor in memory)
  uint32_t key_blocks;  // of a kv head
#if defined(__CUDACC__)
  // The tile's key block (backward_block()), in 32-bit arithmetic: a 64-bit division is a call
  // whose registers the producer warpgroup's few cannot hold without spilling. heads_kv:
  // ProblemParams' (batch * heads_kv < 2^31).
  template <int kBlockN>
  __device__ BackwardBlock block(uint32_t tile, int64_t heads_kv) const {
    const uint32_t bh_kv = tile / key_blocks;
    return {int64_t(bh_kv / uint32_t(heads_kv)), int64_t(bh_kv % uint32_t(heads_kv)),
            int64_t(tile % key_blocks) * kBlockN};
  }
#endif
};

#if defined(__CUDACC__)
// A key block of a persistent CTA's walk and the query blocks it meets (query_block_schedule(),
// unordered, dense), in the 32 bits that its values fit in (batch * heads and a head's query
// blocks < 2^31), so that the walk takes fewer of the producer warpgroup's 24 registers (in
// 64 bits it spilled three times as many bytes).
template <int kBlockM, int kBlockN>
struct WalkedKeyBlock {
  uint32_t batch;
  uint32_t kv_head;
  uint32_t k0;
  uint32_t first_m_block;
  uint32_t blocks_per_head;
  uint32_t count;  // query blocks: blocks_per_head of each head of the kv head's group

  __device__ WalkedKeyBlock(const KeyBlockWalk& walk, uint32_t tile, const ProblemParams& p) {
    const BackwardBlock block = walk.template block<kBlockN>(tile, p.heads_kv);
    const auto schedule =
        query_block_schedule<kBlockM, kBlockN, false>(p, block.k0, DqSumOrder::unordered);
    batch = uint32_t(block.batch);
    kv_head = uint32_t(block.kv_head);
    k0 = uint32_t(block.k0);
    first_m_block = uint32_t(schedule.first_m_block);
    blocks_per_head = uint32_t(schedule.blocks_per_head);
    count = uint32_t(schedule.count);
  }
  // Query block i's head and first row (QueryBlockSchedule::head(), q0()).
  __device__ uint32_t head(const ProblemParams& p, uint32_t i) const {
    return kv_head * uint32_t(p.heads_per_kv) + i / blocks_per_head;
  }
  __device__ uint32_t q0(uint32_t i) const {
    return (first_m_block + i % blocks_per_head) * uint32_t(kBlockM);
  }
};
#endif

template <typename Element>
struct BackwardTmaParams {
  BackwardParams<Element> base;
  CUtensorMap q_map, dout_map;  // boxes: 64 columns x kBlockM rows
  CUtensorMap k_map, v_map;     // boxes: 64 columns x kBlockN rows
  CUtensorMap dk_map, dv_map;   // the same boxes as K and V: the persistent kernels' stores
  KeyBlockWalk walk;            // the persistent kernels' tiles (one launch: bh_offset 0)
};

// Shared-space addresses of the members of a backward CTA's Traits::Storage, which starts at
// `tiles`.
template <typename Traits>
struct BackwardSmem {
  using Storage = typename Traits::Storage;
  using KvTile = SwizzledTile<Traits::kBlockN, Traits::kHeadDim>;
  using QTile = SwizzledTile<Traits::kBlockM, Traits::kHeadDim>;
  // dS^T, keys x queries; or dS, queries x keys, where the dQ^T product takes it (kDqTransposed)
  using DsTile =
      std::conditional_t<Traits::kDqTransposed, SwizzledTile<Traits::kBlockM, Traits::kBlockN>,
                         SwizzledTile<Traits::kBlockN, Traits::kBlockM>>;
  static_assert(sizeof(Storage::k) == KvTile::kBytes && Storage::kQTileBytes == QTile::kBytes &&
                sizeof(Storage::ds[0]) == DsTile::kBytes);
  static_assert(kTileAlignment == kSwizzleAtomBytes);
  uint32_t tiles;  // kTileAlignment-aligned

  // Query block `it` of the CTA's schedule (32 unsigned bits: slots and phases without 64-bit
  // division) goes to Q/dO slot Slots::slot(it) and to dQ stage DqSlots::slot(it).
  using Slots = SlotRing<Traits::kStages>;
  using DqSlots = SlotRing<Traits::kDqSlots>;
  __device__ uint32_t at(size_t offset) const { return tiles + uint32_t(offset); }

  __device__ KvTile k() const { return {at(offsetof(Storage, k))}; }
  __device__ KvTile v() const { return {at(offsetof(Storage, v))}; }
  __device__ QTile q(uint32_t it) const { return {at(Storage::q_offset(Slots::slot(it)))}; }
  __device__ QTile dout(uint32_t it) const { return {at(Storage::dout_offset(Slots::slot(it)))}; }
  __device__ DsTile ds(uint32_t it) const {
    return {at(offsetof(Storage, ds) +
               uint32_t(it % Traits::kDsBuffers) * sizeof(Storage::ds[0]))};
  }
  // LSE and D of the query block, kBlockM floats each (offsets in bytes from `tiles`).
  __device__ uint32_t lse_offset(uint32_t it) const {
    return uint32_t(offsetof(Storage, lse) + Slots::slot(it) * sizeof(Storage::lse[0]));
  }
  __device__ uint32_t row_dot_offset(uint32_t it) const {
    return uint32_t(offsetof(Storage, row_dot) + Slots::slot(it) * sizeof(Storage::row_dot[0]));
  }
  __device__ uint32_t kv_full() const { return at(offsetof(Storage, kv_full)); }
  __device__ uint32_t kv_empty() const { return at(offsetof(Storage, kv_empty)); }
  __device__ uint32_t stage_free() const { return at(offsetof(Storage, stage_free)); }
  __device__ uint32_t out_staged() const { return at(offsetof(Storage, out_staged)); }
  __device__ uint32_t out_free() const { return at(offsetof(Storage, out_free)); }
  // Key block `round`'s entry of the walk_tiles ring, written (a phase of its own barrier).
  __device__ uint32_t tile_ready(uint32_t round) const {
    return at(offsetof(Storage, tile_ready) + 8 * (round % 4));
  }
  // The ring entry of a persistent CTA's key block `round` (walk_tiles).
  __device__ uint32_t walk_tile_offset(uint32_t round) const {
    return uint32_t(offsetof(Storage, walk_tiles) + (round % 4) * sizeof(uint32_t));
  }
  // A persistent CTA's dK and dV (16-bit, in the K tile's layout, the boxes of dk_map and dv_map)
  // over the dS^T buffers and the dQ stages after them, which no product reads between key blocks.
  __device__ KvTile dk_out() const { return {at(offsetof(Storage, ds))}; }
  __device__ KvTile dv_out() const { return {at(offsetof(Storage, ds) + KvTile::kBytes)}; }
  __device__ uint32_t full(uint32_t it) const {
    return at(offsetof(Storage, full) + 8 * Slots::slot(it));
  }
  __device__ uint32_t empty(uint32_t it) const {
    return at(offsetof(Storage, empty) + 8 * Slots::slot(it));
  }
  // Query block `it`'s dQ stage and its barriers, which complete once per use of the stage. With
  // kDqInQuerySlots the stage is the block's Q/dO slot, and the slot's empty barrier does
  // dq_free's work.
  __device__ uint32_t dq_stage(uint32_t it) const {
    if constexpr (Traits::kDqInQuerySlots) return q(it).base;
    if constexpr (Traits::kDqInScoreBuffers) return ds(it).base;
    return at(offsetof(Storage, dq) + DqSlots::slot(it) * sizeof(Storage::dq[0]));
  }
  __device__ uint32_t dq_staged(uint32_t it) const {
    return at(offsetof(Storage, dq_staged) + 8 * DqSlots::slot(it));
  }
  __device__ uint32_t dq_free(uint32_t it) const {
    return at(offsetof(Storage, dq_free) + 8 * DqSlots::slot(it));
  }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Initializes the CTA's mbarriers; one thread, before the CTA barrier that publishes them.
  // Those of a walk (kv_empty to tile_ready) only in a walking kernel: the others' code stays
  // that of the kernels before the walk, whose schedule ptxas might otherwise change.
  template <bool kWalk>
  __device__ void init_barriers() const {
    constexpr int kConsumers = Traits::kConsumerThreads;
    mbarrier_init(kv_full(), 1);
    for (int slot = 0; slot < Traits::kStages; ++slot) {
      mbarrier_init(full(slot), 1 + 32);  // the TMA bytes' arrival + one per producer lane
      // With the dQ stage in the slot, the reducing thread frees it once the reduce has read it.
      mbarrier_init(empty(slot), Traits::kDqInQuerySlots ? 1 : kConsumers);
    }
    for (int stage = 0; stage < Traits::kDqSlots; ++stage) {
      mbarrier_init(dq_staged(stage), kConsumers);
    }
    // (none with kDqInQuerySlots: the slot's empty barrier serves)
    constexpr int kDqFree = Traits::kDqInQuerySlots ? 0 : Traits::kDqSlots;
    for (int stage = 0; stage < kDqFree; ++stage) mbarrier_init(dq_free(stage), 1);
    if constexpr (kWalk) {
      mbarrier_init(kv_empty(), kConsumers);
      mbarrier_init(stage_free(), 1);
      mbarrier_init(out_staged(), kConsumers);
      mbarrier_init(out_free(), 1);
      for (int entry = 0; entry < 4; ++entry) mbarrier_init(tile_ready(entry), 1);
    }
    mbarrier_init_fence();
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
};

// Whether the epilogue can stage dK and dV (kBlockN padded rows of Element each) over the
// tiles' shared memory, which both backward kernels do.
template <typename Traits, typename Element>
inline constexpr bool kEpilogueFitsTiles =
    2 * size_t(Traits::kBlockN) * (Traits::kHeadDim + kSmemPadElements<int(sizeof(Element))>) *
        sizeof(Element) <=
    Traits::kTileBytes;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One warp of the producer warpgroup: K and V once, then per query block Q and dO by TMA (lane
// 0) and LSE and D by plain copies (all lanes; rows past the end get LSE = +inf, D = 0, so that
// their P and dS are 0). Each lane arrives on the slot's full barrier after its copies. `start`:
// the CTA's sequence (in a varlen batch, rows past its end are the next sequence's: P = 0 hides
// them as it hides rows past the tensor's end).
template <typename Traits, typename Element, bool kMayBeVarlen>
__device__ __forceinline__ void load_key_value(const BackwardTmaParams<Element>& params,
                                               BackwardSmem<Traits> smem,
                                               SequenceStart<kMayBeVarlen> start, int64_t k0,
                                               int64_t batch, int64_t kv_head) {
  using Smem = BackwardSmem<Traits>;
  const int64_t map_batch = start.map_batch(batch);
  mbarrier_arrive_expect_bytes(smem.kv_full(), uint32_t(2 * Smem::KvTile::kBytes));
  for (int column = 0; column < Traits::kHeadDim; column += kTmaBoxColumns) {
    const uint32_t block = (column / kTmaBoxColumns) * Smem::KvTile::kColumnBlockBytes;
    tma_load_box(smem.k().base + block, params.k_map, smem.kv_full(), column,
                 int(start.first_key() + k0), int(kv_head), int(map_batch));
    tma_load_box(smem.v().base + block, params.v_map, smem.kv_full(), column,
                 int(start.first_key() + k0), int(kv_head), int(map_batch));
  }
}

// Waits until the slot of query block `it` (running count) is free for its Q and dO.
template <typename Traits>
__device__ __forceinline__ void wait_for_query_slot(BackwardSmem<Traits> smem, uint32_t it) {
  using Slots = typename BackwardSmem<Traits>::Slots;
  if (it >= Traits::kStages) mbarrier_wait(smem.empty(it), Slots::parity(it) ^ 1u);
}

// Rows [q0, q0 + kBlockM) of query head `head` into the slot of the CTA's query block `it` (its
// running count: past the blocks of a persistent CTA's earlier key blocks); the caller has waited
// for the slot (wait_for_query_slot(); before working out `head` and `q0`, as the kernels did
// before they walked, whose code ptxas schedules differently otherwise).
// kRowsAsync (the walking kernels' loads): LSE and D by cp.async, whose arrival on the slot's
// barrier comes when they land: the lane neither waits for them nor holds them in registers (at
// the producer warpgroup's 24 registers, loaded values spilled next to the walk's state). Rows
// past the end then read 0, not +inf: their Q and dO are TMA's zeros, so that S = 0 and P = 1
// meet dO = 0 in dV, and dS = P (dP - D) = 0 (dense batches only, where nothing follows a
// sequence's last row in its box).
template <typename Traits, bool kRowsAsync = false, typename Element, bool kMayBeVarlen>
__device__ __forceinline__ void load_query_block(const BackwardTmaParams<Element>& params,
                                                 BackwardSmem<Traits> smem,
                                                 unsigned char* smem_tiles,
                                                 SequenceStart<kMayBeVarlen> start, int64_t batch,
                                                 int64_t head, int64_t q0, uint32_t it, int lane) {
  using Smem = BackwardSmem<Traits>;
  const ProblemParams& p = start.p;
  const int64_t map_batch = start.map_batch(batch);
  if (lane == 0) {
    mbarrier_arrive_expect_bytes(smem.full(it), uint32_t(2 * Smem::QTile::kBytes));
    for (int column = 0; column < Traits::kHeadDim; column += kTmaBoxColumns) {
      const uint32_t block = (column / kTmaBoxColumns) * Smem::QTile::kColumnBlockBytes;
      tma_load_box(smem.q(it).base + block, params.q_map, smem.full(it), column,
                   int(start.first_row() + q0), int(head), int(map_batch));
      tma_load_box(smem.dout(it).base + block, params.dout_map, smem.full(it), column,
                   int(start.first_row() + q0), int(head), int(map_batch));
    }
  }
  float* lse = reinterpret_cast<float*>(smem_tiles + smem.lse_offset(it));
  float* row_dot = reinterpret_cast<float*>(smem_tiles + smem.row_dot_offset(it));
  const int64_t row_base = start.rows(batch, head);
  if constexpr (kRowsAsync) {
    static_assert(!kMayBeVarlen, "rows past a sequence's end are zeros in dense batches only");
    const float* lse_rows = params.base.lse + row_base + q0;  // q0 < seq_q: a row to read
    const float* dot_rows = params.base.row_dot + row_base + q0;
#pragma unroll 1  // (the copies wait for nothing; unrolled, their addresses spilled)
    for (int r = lane; r < Traits::kBlockM; r += 32) {
      const bool valid = q0 + r < p.seq_q;
      cp_async_4(lse + r, valid ? lse_rows + r : lse_rows, valid);
      cp_async_4(row_dot + r, valid ? dot_rows + r : dot_rows, valid);
    }
    mbarrier_arrive_after_copies(smem.full(it));
  } else {
    for (int r = lane; r < Traits::kBlockM; r += 32) {
      const bool valid = q0 + r < p.seq_q;
      lse[r] = valid ? params.base.lse[row_base + q0 + r] : kEmptyRowLse;
      row_dot[r] = valid ? params.base.row_dot[row_base + q0 + r] : 0.f;
    }
    mbarrier_arrive(smem.full(it));
  }
}

// The loads of a CTA that runs one key block: K and V, then its query blocks in turn.
// kRowsAsync: LSE and D by cp.async (load_query_block()), where rows past the end may read 0.
template <typename Traits, bool kRowsAsync, typename Element, bool kMayBeVarlen>
__device__ __forceinline__ void produce_backward_tiles(
    const BackwardTmaParams<Element>& params, BackwardSmem<Traits> smem, unsigned char* smem_tiles,
    SequenceStart<kMayBeVarlen> start, const QueryBlockSchedule<Traits::kBlockM>& schedule,
    int64_t k0, int64_t batch, int64_t kv_head, int lane) {
  if (lane == 0) load_key_value<Traits>(params, smem, start, k0, batch, kv_head);
  for (uint32_t it = 0; it < schedule.count; ++it) {
    wait_for_query_slot(smem, it);
    load_query_block<Traits, kRowsAsync>(params, smem, smem_tiles, start, batch,
                                         schedule.head(start.p, kv_head, it),
                                         schedule.q0(start.p, it), it, lane);
  }
}

// Adds (or with `store`, writes) the dQ rows staged for the CTA's query block `it` to `target`
// in the accumulator, once every consumer has staged its part: one bulk request, in a bulk group
// of its own.
template <typename Traits>
__device__ __forceinline__ void reduce_dq_stage(float* target, BackwardSmem<Traits> smem,
                                                uint32_t it, int rows, bool store) {
  constexpr uint32_t kRowBytes = Traits::kHeadDim * sizeof(float);
  mbarrier_wait(smem.dq_staged(it), BackwardSmem<Traits>::DqSlots::parity(it));
  if (store) {
    bulk_store_f32(target, smem.dq_stage(it), rows * kRowBytes);
  } else {
    bulk_reduce_add_f32(target, smem.dq_stage(it), rows * kRowBytes);  // rows are contiguous
  }
  bulk_commit_group();
}

// After the bulk reduce of query block `it` (the `index`-th of its key block) was issued: frees
// the dQ stages the reduces have read. With two stages, the previous block's (the reduce just
// issued may still be reading its own); with one, this block's, once read.
template <typename Traits>
__device__ __forceinline__ void free_read_dq_stages(BackwardSmem<Traits> smem, uint32_t it,
                                                    uint32_t index) {
  if constexpr (Traits::kDqSlots == 2) {
    if (index > 0) {
      bulk_wait_read<1>();  // all but this block's reduce have read their stages
      mbarrier_arrive(smem.dq_free(it - 1));
    }
  } else {
    bulk_wait_read<0>();
    mbarrier_arrive(smem.dq_free(it));
  }
}

// Whether `thread` is one of the `threads` dQ reduce threads (lane 0 of the producer
// warpgroup's warps after the loading one: a spinning thread keeps its warp), and which.
template <int kConsumers>
__device__ __forceinline__ bool is_dq_reduce_thread(int thread, int threads, int& reducer) {
  reducer = (thread - kConsumers) / 32 - 1;
  return thread % 32 == 0 && reducer >= 0 && reducer < threads;
}

// One thread of the producer warpgroup: per query block, once the consumers have staged their
// dQ parts (dq_staged), adds the block's rows inside the sequence to the fp32 accumulator with
// one bulk reduce (they are contiguous there, in the same swizzled order), and frees the stage
// (dq_free) once the reduce has read it: with two stages (the default kernels on 64- and 128-row
// blocks), checked after issuing the next block's, so that two reduces may be in flight.
// Deterministic mode (backward_steps.cuh): first it waits for key block `key_block`'s turn
// (dq_turn_from_first() or dq_turn_from_last(); spinning on the semaphore, ahead of the
// consumers, who never wait for it), frees the stage once its reduce has read it and passes
// the turn on once the reduce has completed; its stages (up to four; three dS^T buffers at
// head_dim 64) let the consumers run that many blocks ahead of the turns. With `threads` > 1
// (a kernel's choice: kDqReduceThreads) that many threads share the query blocks, each taking
// every threads-th from `first`, so that one's wait for its reduce to complete and its release
// run while the next waits for its turn and issues its own (each thread's bulk groups are its
// own; its stage barriers stay in order: before it waits on stage `it`'s, that stage's use
// before, it - kDqSlots, was staged, with threads <= kDqSlots).
template <typename Traits, bool kDeterministic, typename Element, bool kMayBeVarlen>
__device__ __forceinline__ void reduce_dq(const BackwardParams<Element>& base,
                                          BackwardSmem<Traits> smem,
                                          SequenceStart<kMayBeVarlen> start,
                                          const QueryBlockSchedule<Traits::kBlockM>& schedule,
                                          int64_t batch, int64_t kv_head, int key_block,
                                          uint32_t first = 0, uint32_t threads = 1) {
  using Smem = BackwardSmem<Traits>;
  constexpr uint32_t kRowBytes = Traits::kHeadDim * sizeof(float);
  const ProblemParams& p = start.p;
  const int group = kDeterministic ? dq_group<Traits::kBlockN>(base, key_block) : 0;
  float* const accumulator = dq_group_accumulator(base, group);
  int* const semaphores = kDeterministic ? dq_group_semaphores(base, group) : nullptr;
  const int64_t group_begin = dq_group_begin(base, group);
  const int64_t group_end = dq_group_end(base, group);
  for (uint32_t it = first; it < schedule.count; it += threads) {
    const int64_t head = schedule.head(p, kv_head, it);
    const int64_t q0 = schedule.q0(p, it);
    int* semaphore = nullptr;
    bool store = false;  // a first turn that stores (DqGroups::first_turn_stores)
    if constexpr (kDeterministic) {
      semaphore = dq_semaphore<Traits::kBlockM>(semaphores, p, batch, head, q0);
      const int turn =
          schedule.sum_order == DqSumOrder::last_key_first
              ? dq_turn_from_last<Traits::kBlockM, Traits::kBlockN>(p, q0, key_block, group_end)
          : schedule.sum_order == DqSumOrder::rotated
              ? dq_turn_rotated(schedule, q0)
              : dq_turn_from_first<Traits::kBlockN>(p, q0, key_block, group_begin);
      store = base.dq_groups.first_turn_stores && turn == 0;
      wait_for_dq_turn(semaphore, turn);
    }
    const int rows = int(min64(Traits::kBlockM, p.seq_q - q0));
    float* target = accumulator + (start.rows(batch, head) + q0) * Traits::kHeadDim;
    mbarrier_wait(smem.dq_staged(it), Smem::DqSlots::parity(it));
    if (store) {
      bulk_store_f32(target, smem.dq_stage(it), rows * kRowBytes);
    } else {
      bulk_reduce_add_f32(target, smem.dq_stage(it), rows * kRowBytes);  // rows are contiguous
    }
    bulk_commit_group();
    if constexpr (kDeterministic) {
      // (The consumers of a kernel with one stage wait for it to be free: not for the adds.)
      bulk_wait_read<0>();
      mbarrier_arrive(smem.dq_free(it));
      bulk_wait_complete();
      pass_dq_turn(semaphore);
    } else if constexpr (Traits::kDqInQuerySlots) {
      bulk_wait_read<0>();  // then the slot may take a later block's Q and dO
      mbarrier_arrive(smem.empty(it));
    } else {
      free_read_dq_stages(smem, it, it);
    }
  }
  // The shared memory must outlive the reads; the adds themselves complete with the grid,
  // before the dQ conversion that follows in the stream.
  bulk_wait_read<0>();
}

// The producer warpgroup of a persistent CTA (dense batches), per key block of its walk. Its
// first warp takes the tile (KeyBlockWalk) and hands it to the others through the walk_tiles
// ring, which the barrier of the tile's K and V publishes (with no tile left, that barrier alone,
// which ends the walk everywhere), and loads: the first query block's Q and dO as soon as its
// slot is free (the previous key block's last products may still run), K and V once the
// consumers are done with the previous ones (kv_empty), then the other query blocks. Its thread
// 32 reduces: the query blocks' dQ (as reduce_dq() without deterministic mode, through
// reduce_dq_stage(), which reduce_dq() keeps inline for the code it had before the walk), then,
// once the reduces have read every dQ stage
// (stage_free: the consumers may stage dK and dV over them) and the consumers have staged dK and
// dV (out_staged), it stores them by TMA, whose boxes skip the rows past the keys' end; once the
// stores have read them, the consumers may stage dS^T and dQ there again (out_free). Slots,
// stages and phases follow the running count of query blocks `it` and of key blocks `round`.
// Both roles walk in one loop: as two, each role's own, they spilled the warpgroup's 24 registers.
template <typename Traits, typename Element>
__device__ __forceinline__ void produce_walk(const BackwardTmaParams<Element>& params,
                                             BackwardSmem<Traits> smem, unsigned char* smem_tiles,
                                             int thread) {
  using Smem = BackwardSmem<Traits>;
  using KeyBlock = WalkedKeyBlock<Traits::kBlockM, Traits::kBlockN>;
  static_assert(!Traits::kDqInQuerySlots && Traits::kDqSlots <= 2);
  const bool loads = thread < 32;
  if (!loads && thread != 32) return;
  const int lane = thread % 32;
  const ProblemParams& p = params.base.problem;
  const SequenceStart<false> start{p};
  uint32_t* const walk_tiles = reinterpret_cast<uint32_t*>(smem_tiles + smem.walk_tile_offset(0));
  uint32_t it = 0;
  uint32_t tile = blockIdx.x;
  for (uint32_t round = 0;; ++round) {
    if (loads) {
      if (round > 0) {  // the next tile no CTA has taken
        uint32_t taken = 0;
        if (lane == 0) taken = atomicAdd(reinterpret_cast<unsigned*>(params.base.tile_counter), 1u);
        tile = gridDim.x + __shfl_sync(0xffffffffu, taken, 0);
      }
      // Four entries: when key block n's is written (after the K/V load of n - 1, which waited
      // for the consumers to end n - 2, who had waited for the reducing thread to end n - 3), the
      // reducing thread has read every entry up to n - 3's, and n - 4's place is free.
      if (lane == 0) {
        walk_tiles[round % 4] = tile;
        mbarrier_arrive(smem.tile_ready(round));
      }
      if (tile >= params.walk.tiles) {
        if (round > 0) mbarrier_wait(smem.kv_empty(), (round - 1) & 1u);
        if (lane == 0) mbarrier_arrive(smem.kv_full());  // no K and V: the walk's end
        return;
      }
    } else {
      // Not kv_full (nor one barrier for every entry): its phases may run two ahead of this
      // thread (the consumers through a key block without query blocks, say), and a wait on the
      // parity of the next phase would then wait for work that waits for this thread. An entry's
      // barrier completes again only for key block round + 4, after this thread's round + 1.
      mbarrier_wait(smem.tile_ready(round), (round / 4) & 1u);
      tile = walk_tiles[round % 4];
      if (tile >= params.walk.tiles) return;
    }
    const KeyBlock block(params.walk, tile, p);
    if (loads) {
      // The key block is worked out again for each query block from an opaque copy of the tile:
      // kept across the loop, its fields spilled.
      for (uint32_t i = 0; i == 0 || i < block.count; ++i) {
        const KeyBlock again(params.walk, opaque(tile), p);
        if (i < again.count) {
          wait_for_query_slot(smem, it + i);
          load_query_block<Traits, true>(params, smem, smem_tiles, start, again.batch,
                                         again.head(p, i), again.q0(i), it + i, lane);
        }
        if (i == 0) {
          if (round > 0) mbarrier_wait(smem.kv_empty(), (round - 1) & 1u);
          if (lane == 0) {
            load_key_value<Traits>(params, smem, start, again.k0, again.batch, again.kv_head);
          }
        }
      }
      it += block.count;
      continue;
    }
    for (uint32_t i = 0; i < block.count; ++i, ++it) {
      const KeyBlock again(params.walk, opaque(tile), p);
      const uint32_t q0 = again.q0(i);
      // the block's first row in the accumulator's [batch, heads, seq_q] rows (< 2^32)
      const uint32_t row =
          (again.batch * uint32_t(p.heads) + again.head(p, i)) * uint32_t(p.seq_q) + q0;
      const int rows = int(min64(Traits::kBlockM, p.seq_q - q0));
      reduce_dq_stage(params.base.dq_accum + int64_t(row) * Traits::kHeadDim, smem, it, rows,
                      false);
      free_read_dq_stages(smem, it, i);
    }
    bulk_wait_read<0>();
    if (Traits::kDqSlots == 2 && block.count > 0) mbarrier_arrive(smem.dq_free(it - 1));
    mbarrier_arrive(smem.stage_free());

    mbarrier_wait(smem.out_staged(), round & 1u);
    for (int column = 0; column < Traits::kHeadDim; column += kTmaBoxColumns) {
      const uint32_t offset = (column / kTmaBoxColumns) * Smem::KvTile::kColumnBlockBytes;
      tma_store_box(params.dk_map, smem.dk_out().base + offset, column, int(block.k0),
                    int(block.kv_head), int(block.batch));
      tma_store_box(params.dv_map, smem.dv_out().base + offset, column, int(block.k0),
                    int(block.kv_head), int(block.batch));
    }
    bulk_commit_group();
    bulk_wait_read<0>();
    mbarrier_arrive(smem.out_free());
  }
  // The stores complete with the grid; the shared memory outlives their reads (waited for).
}

// stage_accumulator_rows() of both pieces of the key-split kernel's columns.
template <typename Element, typename Pieces, int kRows, int kCols>
__device__ __forceinline__ void stage_pieces(SwizzledTile<kRows, kCols> tile,
                                             const PieceAccumulators<Pieces>& acc, int row0,
                                             float factor, int lane) {
  const float row_factor[2] = {factor, factor};
  stage_accumulator_rows<Element>(tile, acc.wide, row0, 0, row_factor, lane);
  if constexpr (Pieces::kNarrow > 0) {
    stage_accumulator_rows<Element>(tile, acc.narrow, row0, Pieces::kWide, row_factor, lane);
  }
}

// Stores a warp's (16 rows from row0, 8 * kTiles columns from col0) fp32 dQ fragment into the
// stage's rows of kHeadDim floats, swizzled as the accumulator's (row0 is a multiple of 8). The
// accumulator swizzles by the row's place in its [seq_q] rows, [total_q] in a varlen batch:
// `first_row`, the sequence's first token (0 in a dense batch), shifts it.
template <int kHeadDim, int kTiles>
__device__ __forceinline__ void stage_dq(float* stage, const float (&dq)[kTiles][4], int row0,
                                         int col0, int64_t first_row, int lane) {
  // Both of the thread's rows have query % 8 == lane / 4: one swizzle for all its stores. Read
  // through an opaque move, so that the compiler computes the swizzled columns here rather than
  // keeping them in registers across the whole loop over query blocks.
  const int swizzle = int(opaque(uint32_t((lane / 4 + int(first_row & 7)) & 7)));
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float* row = stage + (row0 + lane / 4 + 8 * half) * kHeadDim + 2 * (lane % 4);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      *reinterpret_cast<float2*>(row + dq_swizzled_column(swizzle, col0 + 8 * t)) =
          make_float2(dq[t][2 * half], dq[t][2 * half + 1]);
    }
  }
}

// stage_dq() for a warp's dQ^T fragment: 16 columns of dQ from col0 (a multiple of 16; the
// fragment's rows) for queries 0 .. 8 * kTiles - 1 (its columns). A thread holds no two adjacent
// columns of one query, so it stores single floats; the swizzle keeps them free of bank
// conflicts (dq_swizzled_column()). The thread's queries have two residues mod 8, one per parity.
// Dense batches only (the kernel on query blocks of 80 takes no varlen batch): a block's first
// query is its place in the accumulator's rows of its sequence, a multiple of 8.
template <int kHeadDim, int kTiles>
__device__ __forceinline__ void stage_dq_transposed(float* stage, const float (&dqt)[kTiles][4],
                                                    int col0, int lane) {
  // The residue of the thread's even queries; opaque as in stage_dq().
  const int residue = int(opaque(uint32_t(2 * (lane % 4))));
  float* const rows = stage + 2 * (lane % 4) * kHeadDim + lane / 4;
#pragma unroll
  for (int parity = 0; parity < 2; ++parity) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // columns col0 + lane / 4 (+ 8)
      const int column = dq_swizzled_column(residue + parity, col0 + 8 * half);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        rows[(8 * t + parity) * kHeadDim + column] = dqt[t][2 * half + parity];
      }
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kVariants: softcap, ALiBi and left-bounded windows; kDeterministic: ordered dQ sums
// (base.dq_semaphores set); kSums: dK and dV added in fp32 to BackwardArgs::sums (compiled with
// kVariants only); kVarlen: a varlen batch without variants on the default kernel (the variant
// kernels take varlen batches too); kDenseOrder: the order of the deterministic dense kernel's
// dQ sums, from each query block's first key block up (DqSumOrder::first_key_first), from its
// last down (last_key_first, dq_sums_from_last_key()) or rotated (dq_turns_rotate()); the other
// kernels keep the default. Template flags rather than runtime ones,
// because the kernels sit at the register limit (the sums' epilogue as a runtime branch: 3-4 %
// slower at head_dim 128; the variant kernel running a varlen batch: 19 % slower than this one,
// measured before its softcap slopes left the registers; the dQ sums' order as a runtime
// choice: the deterministic kernel 2-4 % slower from the first key block up at 1k causal rows,
// up to 16 % at 1k without a mask; H100, share/results/h100-2026-12-06-det-last-key/).
template <typename Element, int kHeadDim, bool kVariants, bool kDeterministic, bool kSums = false,
          bool kVarlen = false, bool kBlocksOf80 = false, bool kWalk = false,
          DqSumOrder kDenseOrder = DqSumOrder::first_key_first>
__global__ void __launch_bounds__(
    BackwardKernelTraits<kHeadDim, kDeterministic, kVariants, kBlocksOf80>::kThreads, 1)
    backward_kernel(const __grid_constant__ BackwardTmaParams<Element> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Traits = BackwardKernelTraits<kHeadDim, kDeterministic, kVariants, kBlocksOf80>;
  static_assert(!kBlocksOf80 || !(kVariants || kSums || kVarlen),
                "query blocks of 80 on the default and deterministic dense kernels only");
  static_assert(!kWalk || !(kVariants || kDeterministic || kSums || kVarlen || kBlocksOf80),
                "the walk: the default dense kernels on query blocks of 64 or 128 only");
  static_assert(
      kDenseOrder == DqSumOrder::first_key_first || (kDeterministic && !(kVariants || kBlocksOf80)),
      "other sum orders: the deterministic dense kernel only");
  static_assert(kDenseOrder != DqSumOrder::unordered, "a deterministic order");
  // kWalk: a CTA an SM walks key blocks (KeyBlockWalk; backward_walk_pays()); else one a CTA.
  using Smem = BackwardSmem<Traits>;
  static_assert(!kWalk || 2 * Smem::KvTile::kBytes <= offsetof(typename Traits::Storage, lse) -
                                                          offsetof(typename Traits::Storage, ds),
                "dK and dV staged over the dS^T buffers and dQ stages (BackwardSmem::dk_out())");
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kConsumers = Traits::kConsumerThreads;
  constexpr int kQueryTiles = kBlockM / 8;  // n8 tiles of S^T, dP^T per warp
  // The products' columns: the call's head dims up to kDim (96: the tiles hold 128 columns, the
  // last 32 TMA's zeros, which the products skip), dK and dV as ColumnPieces.
  constexpr int kDim = Traits::kComputeDim;
  using Pieces = ColumnPieces<kDim>;
  constexpr int kConsumerRegisters = Traits::kConsumerRegisters;
  constexpr int kProducerRegisters = Traits::kProducerRegisters;
  using MmaScores = Wgmma<Element, kBlockM>;         // S^T, dP^T: 64 keys x kBlockM
  constexpr bool kDqTransposed = Traits::kDqTransposed;
  // On 80-row blocks dK is issued with dV, before the dS exchange, and both are done before
  // the dQ^T product: dK's product then overlaps the dS stores and the barrier rather than the dQ
  // staging, the slot is freed before dQ^T, and P^T's and dS^T's fragments die before dQ^T's 40
  // accumulators live (H200, `fa` head_dim 128 backward from 2k rows: 0.94-0.97 of the time of
  // dK after dQ^T; on the 64-row kernels the same order took 1-2 % more, and 2 % more
  // deterministic).
  constexpr bool kDkWithDv = kDqTransposed;
  // There, too, a block's dQ^T is staged in the next iteration, once the next block's S^T is
  // issued, so that the tensor cores multiply S^T meanwhile (the staging ran with no product in
  // flight); dP^T is issued after the staging: dQ^T's 40 registers live beside S^T's alone, where
  // P^T's and dS^T's fragments are dead. (S^T issued ahead of the staging in the same iteration
  // would stay in flight across the loop's back edge, which made ptxas serialize every wgmma,
  // C7514.)
  constexpr bool kDqStagedLate = kDqTransposed && !kVariants;
  // dQ: 64 queries x kDqCols; or dQ^T: kDqCols (64) columns x kBlockM queries
  using MmaDq = Wgmma<Element, kDqTransposed ? kBlockM : Traits::kDqCols>;
  constexpr int kDqTiles = kDqTransposed ? kBlockM / 8 : Traits::kDqCols / 8;
  // Deterministic, where the kernel has two or more dQ slots: two reduce threads on alternate
  // query blocks, as the column-split kernel (reduce_dq()), so that one's wait for its reduce to
  // complete and its release overlap the other's turn and issue. The 80-row kernels keep one
  // (one dQ slot).
  constexpr int kDqReduceThreads = kDeterministic && Traits::kDqSlots >= 2 ? 2 : 1;

  const BackwardParams<Element>& base = params.base;
  const int thread = threadIdx.x;
  const int lane = thread % 32;
  constexpr DqSumOrder kSumOrder = kDeterministic ? kDenseOrder : DqSumOrder::unordered;
  // (32-bit arithmetic: only dense calls interleave, interleaved_heads(), whose grid has fewer
  // CTAs than K has 2 KiB blocks: below 2^32 for any K in memory)
  const BlockOrder order = backward_block_order<uint32_t>(base.heads_together, kSumOrder);
  // The varlen kernel and the variant kernels without sums take varlen batches (the API refuses
  // sums with them): their problem is their sequence's (sequence.cuh; the launch's own in a
  // dense batch). The others read the launch's constants rather than hold a copy in registers.
  static_assert(!kVarlen || !(kVariants || kDeterministic || kSums), "the default kernel's twin");
  constexpr bool kMayBeVarlen = kVarlen || (kVariants && !kSums);
  const ProblemParams sequence =
      kMayBeVarlen
          ? sequence_problem(base.problem, (base.bh_offset + order.head) / base.problem.heads_kv)
          : ProblemParams{};
  const ProblemParams& p = kMayBeVarlen ? sequence : base.problem;
  const SequenceStart<kMayBeVarlen> start{p};
  // (a walking CTA's key blocks: from the walk_tiles ring, below)
  BackwardBlock block = kWalk ? BackwardBlock{} : backward_block<kBlockN>(p, base.bh_offset, order);
  if (block.k0 >= p.seq_k) return;  // past the end of a shorter sequence's keys (varlen)
  // (computed here for the CTAs of one key block, where the kernels did before they walked: the
  // same registers as then)
  const auto first_schedule = query_block_schedule<kBlockM, kBlockN, kVariants>(
      p, block.k0, kSumOrder, base.dq_groups.keys);

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const uint32_t shared_base = shared_address(shared_bytes);
  const Smem smem{(shared_base + kSwizzleAtomBytes - 1) & ~uint32_t(kSwizzleAtomBytes - 1)};
  unsigned char* smem_tiles = shared_bytes + (smem.tiles - shared_base);
  if (thread == kConsumers) smem.template init_barriers<kWalk>();
  __syncthreads();

  if (thread >= kConsumers) {  // the producer warpgroup; its first warp does the loading
    warpgroup_release_registers<kProducerRegisters>();
    if constexpr (kWalk) {
      produce_walk<Traits>(params, smem, smem_tiles, thread - kConsumers);
    } else {
      const auto& schedule = first_schedule;
      if (thread < kConsumers + 32) {
        // (The variant kernels keep the synchronous loads: a score modification may make
        // P = exp(S' - 0) infinite on a row past the end, and inf * 0 = NaN in dV.)
        constexpr bool kRowsAsync = !kMayBeVarlen && !kVariants;
        produce_backward_tiles<Traits, kRowsAsync>(params, smem, smem_tiles, start, schedule,
                                                   block.k0, block.batch, block.kv_head, lane);
      } else if (int reducer; is_dq_reduce_thread<kConsumers>(thread, kDqReduceThreads, reducer)) {
        reduce_dq<Traits, kDeterministic>(base, smem, start, schedule, block.batch, block.kv_head,
                                          int(block.k0 / kBlockN), uint32_t(reducer),
                                          uint32_t(kDqReduceThreads));
      }
    }
    return;
  }
  warpgroup_claim_registers<kConsumerRegisters>();

  const int warp_group = thread / 128;
  const int group_key0 = 64 * warp_group;                   // this warpgroup's keys
  const int warp_key0 = group_key0 + 16 * ((thread / 32) % 4);  // this warp's keys
  // This warpgroup's part of the (kBlockM, D) dQ tile.
  const int dq_row0 = Traits::kDqSplitRows ? 64 * warp_group : 0;
  const int dq_col0 = Traits::kDqSplitRows ? 0 : Traits::kDqCols * warp_group;

  // The CTA's key blocks: one, or its walk's (kWalk), whose slots, stages and phases
  // follow the running count of query blocks `it` and of key blocks `round`.
  PieceAccumulators<Pieces> dk_acc;  // dK (16 keys of this warp, kDim), without the scale
  PieceAccumulators<Pieces> dv_acc;
  uint32_t it = 0;
  // The dQ part of the block of the running count `block_it` (dQ: 64 queries x kDqCols; dQ^T:
  // kDqCols x kBlockM queries) into its stage for reduce_dq(), once the reduce of the stage's
  // previous block has read it. (Where the stages are the dS^T buffers, kDqInScoreBuffers, the
  // wait for that comes before the dS^T stores instead: the column block of this warpgroup's
  // queries, which its dQ product alone read and has finished reading.)
  const auto stage_dq_block = [&](uint32_t block_it, const float(&dq)[kDqTiles][4]) {
    if (!Traits::kDqInScoreBuffers && block_it >= Traits::kDqStages) {
      mbarrier_wait(smem.dq_free(block_it), Smem::DqSlots::parity(block_it - Traits::kDqStages));
    }
    float* dq_stage = reinterpret_cast<float*>(smem_tiles + (smem.dq_stage(block_it) - smem.tiles));
    if constexpr (kDqTransposed) {
      stage_dq_transposed<Traits::kHeadDim>(dq_stage, dq, dq_col0 + 16 * ((thread / 32) % 4), lane);
    } else {
      stage_dq<Traits::kHeadDim>(dq_stage, dq, dq_row0 + 16 * ((thread / 32) % 4), dq_col0,
                                 start.first_row(), lane);
    }
    fence_view_async_shared();  // the stores -> visible to the bulk reduces
    mbarrier_arrive(smem.dq_staged(block_it));
  };
  // kDqStagedLate: the dQ^T of the block before, staged in this iteration; a copy of its
  // accumulators (copy_accumulators() says why)
  float dq_late[kDqTiles][4];
  for (uint32_t round = 0;; ++round) {
    if constexpr (kWalk) {  // the tile the producer took (produce_walk()), or the end
      mbarrier_wait(smem.kv_full(), round & 1u);
      const uint32_t tile =
          *reinterpret_cast<const uint32_t*>(smem_tiles + smem.walk_tile_offset(round));
      if (tile >= params.walk.tiles) return;
      block = params.walk.template block<kBlockN>(tile, p.heads_kv);
    }
    const int64_t batch = block.batch;
    const int64_t kv_head = block.kv_head;
    const int64_t k0 = block.k0;
    const auto schedule = kWalk
                              ? query_block_schedule<kBlockM, kBlockN, kVariants>(p, k0, kSumOrder)
                              : first_schedule;
    int64_t fragment_key[2];  // keys of this thread's fragment rows group, group + 8
    fragment_key[0] = k0 + warp_key0 + lane / 4;
    fragment_key[1] = fragment_key[0] + 8;
    zero_pieces(dk_acc);
    zero_pieces(dv_acc);
    if constexpr (!kWalk) mbarrier_wait(smem.kv_full(), 0);
    // dK and dV of the previous key block read from the dS^T buffers and dQ stages by TMA
    if (kWalk && round > 0) mbarrier_wait(smem.out_free(), (round - 1) & 1u);

    for (uint32_t i = 0; i < schedule.count; ++i, ++it) {
      const int64_t head = schedule.head(p, kv_head, i);
      const int64_t q0 = schedule.q0(p, i);
      const auto q_tile = smem.q(it);
      const auto dout_tile = smem.dout(it);
      mbarrier_wait(smem.full(it), Smem::Slots::parity(it));

      // S^T = K_w Q^T and dP^T = V_w dO^T (64 keys x kBlockM queries per warpgroup), committed
      // apart: the default kernels compute P^T from S^T while dP^T is still being multiplied.
      float st[kQueryTiles][4];
      float dpt[kQueryTiles][4];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk) {
        MmaScores::template ss<0, 0>(st, k_major_descriptor(smem.k(), group_key0, 16 * kk),
                                     k_major_descriptor(q_tile, 0, 16 * kk), kk > 0);
      }
      if constexpr (!kVariants) wgmma_commit();
      if constexpr (kDqStagedLate) {  // the block before's dQ^T, while S^T is multiplied
        if (i > 0) stage_dq_block(it - 1, dq_late);
        // (The staging's registers are no product's: this fence only keeps the staging before
        // dP^T's issue, as in the build that was measured.)
        wgmma_fence();
      }
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk) {
        MmaScores::template ss<0, 0>(dpt, k_major_descriptor(smem.v(), group_key0, 16 * kk),
                                     k_major_descriptor(dout_tile, 0, 16 * kk), kk > 0);
      }
      wgmma_commit();

      // P^T; query column c of key row r is visible as visible_columns() says. Rows past Sq
      // have LSE = +inf: P = 0. The variant kernels wait for both products: the softcap's
      // slopes fold into dP^T as P^T is computed.
      if constexpr (kVariants) {
        wgmma_wait<0>();
        wgmma_fence_operands(st);
        wgmma_fence_operands(dpt);
      }
      const bool masked = needs_mask<kVariants>(p, q0, kBlockM, k0, kBlockN);
      const auto visible = visible_columns<false, kBlockM>(p, masked, fragment_key, q0);
      const float* lse = reinterpret_cast<const float*>(smem_tiles + smem.lse_offset(it));
      const float* row_dot = reinterpret_cast<const float*>(smem_tiles + smem.row_dot_offset(it));
      // dS^T = P^T * (dP^T - D) into dpt; P^T and dS^T then go into A operands and S^T and
      // dP^T die (register pressure). With a softcap, dS^T also takes the slope of the cap,
      // folded into dP^T as each P is computed: an array of slopes would cost 4 * kQueryTiles
      // more live registers (spills).
      if constexpr (kVariants) {
        const ScoreModFor<Element> mod = score_mod<Element>(p, batch, head);
        modified_probabilities_transposed(
            st, lse, mod, q0 + p.offset - fragment_key[0], lane, [&](int t, int i, float slope) {
              dpt[t][i] = (dpt[t][i] - row_dot[8 * t + 2 * (lane % 4) + i % 2]) * slope;
            });
        if (masked)
          hide_columns(st, visible_columns<true, kBlockM>(p, true, fragment_key, q0), lane);
        if (mod.kind() == ScoreModKind::softcap) {
          multiply_elementwise(dpt, st);
        } else {
          score_gradients_transposed(dpt, st, dpt, row_dot, lane);
        }
      }
      // dV += P^T dO (dO read N-major), issued as soon as P^T is packed: the default kernels
      // multiply it while dS^T is computed; the variant kernels have dS^T with P^T.
      uint32_t p_fragments[kBlockM / 16][4];
      uint32_t ds_fragments[kBlockM / 16][4];
      const auto pack_ds = [&] {
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          accumulators_to_a<Element>(ds_fragments[kk], dpt[2 * kk], dpt[2 * kk + 1]);
        }
      };
      const auto issue_dv = [&] {
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          accumulators_to_a<Element>(p_fragments[kk], st[2 * kk], st[2 * kk + 1]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          piece_products_rs<Element>(dv_acc, p_fragments[kk], dout_tile, 16 * kk, 0);
        }
        wgmma_commit();
      };
      if constexpr (kVariants) {
        issue_dv();
        pack_ds();
      } else if constexpr (kBlockM != 64) {
        // 128-query blocks (head_dim 64), 80 (head_dim 128): P^T's fragments next to S^T and dP^T
        // do not fit the registers, so dV is issued after dS^T (P^T still computed while dP^T is
        // multiplied), and dS^T is packed first: with dP^T's registers free before P^T's
        // fragments take theirs, ptxas keeps the products asynchronous (packed after dV was
        // issued, it serialized every wgmma of the kernel, C7512: 11.8 % more time on H200).
        wgmma_wait<1>();  // S^T
        wgmma_fence_operands(st);
        probabilities_transposed(st, lse, p.scale_log2, visible, lane);
        wgmma_wait<0>();  // dP^T
        wgmma_fence_operands(dpt);
        score_gradients_transposed(dpt, st, dpt, row_dot, lane);
        pack_ds();
        issue_dv();
      } else {
        wgmma_wait<1>();  // S^T
        wgmma_fence_operands(st);
        probabilities_transposed(st, lse, p.scale_log2, visible, lane);
        issue_dv();
        wgmma_wait<1>();  // dP^T
        wgmma_fence_operands(dpt);
        score_gradients_transposed(dpt, st, dpt, row_dot, lane);
        pack_ds();
      }
      if constexpr (kDkWithDv) {
        wgmma_fence();  // ds_fragments were written after the last products were issued
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          piece_products_rs<Element>(dk_acc, ds_fragments[kk], q_tile, 16 * kk, 0);
        }
        wgmma_commit();
      }
      const auto ds_tile = smem.ds(it);
      if (Traits::kDqInScoreBuffers && it >= Traits::kDqSlots) {  // the buffer staged a dQ
        mbarrier_wait(smem.dq_free(it), Smem::DqSlots::parity(it - Traits::kDqSlots));
      }
      if constexpr (kDqTransposed) {
        // dS, query-major: the fragments' four 8 x 8 blocks of each 16 queries, transposed. Lane
        // 8 i + j addresses row j of block i: query 16 kk + 8 (i / 2) + j, keys from 8 (i % 2).
        const uint32_t ds_rows =
            swizzled_address(ds_tile, 8 * (lane / 16) + lane % 8, warp_key0 + 8 * ((lane / 8) % 2));
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          stmatrix_x4_transposed(ds_rows + 16 * kk * kSwizzleBytes, ds_fragments[kk]);
        }
      } else {
        // Where the thread's dS^T elements go. At 128-query blocks the per-column addresses the
        // compiler keeps across the loop spill, so each is computed in two instructions
        // (FragmentAddresses); at 64 they fit, and the plain computation spills less.
        const FragmentAddresses ds_addresses(ds_tile, warp_key0, lane);
        const auto ds_address = [&](int half, int col) {
          if constexpr (kBlockM == 128) return ds_addresses.at(half, col);
          return swizzled_address(ds_tile, warp_key0 + lane / 4 + 8 * half, col + 2 * (lane % 4));
        };
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {  // dS^T also goes to shared memory for dQ
            store_shared_u32(ds_address(half, 16 * kk), ds_fragments[kk][half]);
            store_shared_u32(ds_address(half, 16 * kk + 8), ds_fragments[kk][2 + half]);
          }
        }
      }

      // dQ (64 queries from dq_row0, kDqCols from dq_col0) = dS K over all 128 keys once both
      // warpgroups' dS^T are in place (dS read M-major from the dS^T tile, K N-major), or its
      // transpose (kDqTransposed); dK += dS^T Q last (Q read N-major), so that dQ is staged while
      // dK is multiplied, except where it went out with dV (kDkWithDv).
      float dq_acc[kDqTiles][4];
      fence_view_async_shared();                        // dS^T (or dS) stores -> visible to wgmma
      named_barrier_sync(kComputeBarrier, kConsumers);  // both warpgroups' parts are in place
      if constexpr (kDkWithDv) {
        // dV and dK done: the slot's Q, dO, LSE and D are no longer read.
        wgmma_wait<0>();
        fence_piece_operands(dv_acc);
        fence_piece_operands(dk_acc);
        wgmma_fence_operands(p_fragments);
        wgmma_fence_operands(ds_fragments);
        mbarrier_arrive(smem.empty(it));
      }
      wgmma_fence();  // registers written since the last products were issued (ds_fragments)
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        if constexpr (kDqTransposed) {  // dQ^T = K^T dS^T: K read M-major, dS K-major
          MmaDq::template ss<1, 0>(dq_acc, n_major_descriptor(smem.k(), 16 * kk, dq_col0),
                                   k_major_descriptor(ds_tile, 0, 16 * kk), kk > 0);
        } else {
          MmaDq::template ss<1, 1>(dq_acc, n_major_descriptor(ds_tile, 16 * kk, dq_row0),
                                   n_major_descriptor(smem.k(), 16 * kk, dq_col0), kk > 0);
        }
      }
      wgmma_commit();
      if constexpr (kDkWithDv) {
        wgmma_wait<0>();
        wgmma_fence_operands(dq_acc);
      } else {
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk) {
          piece_products_rs<Element>(dk_acc, ds_fragments[kk], q_tile, 16 * kk, 0);
        }
        wgmma_commit();
        wgmma_wait<1>();  // dV and dQ
        fence_piece_operands(dv_acc);
        wgmma_fence_operands(p_fragments);
        wgmma_fence_operands(dq_acc);
      }

      if constexpr (kDqStagedLate) {
        copy_accumulators(dq_acc, dq_late);
      } else {
        stage_dq_block(it, dq_acc);
      }
      if constexpr (!kDkWithDv) {
        wgmma_wait<0>();  // dK
        fence_piece_operands(dk_acc);
        wgmma_fence_operands(ds_fragments);
        mbarrier_arrive(smem.empty(it));  // Q, dO, LSE and D of this slot are no longer read
      }
    }
    if (kDqStagedLate && schedule.count > 0) stage_dq_block(it - 1, dq_late);  // the last
    if constexpr (!kWalk) break;

    // dK (scaled) and dV staged for produce_walk()'s stores, once every consumer's products are
    // done (stage_free: the reduces have read the dQ of every query block, which each warpgroup
    // staged after its last product read the dS^T buffer).
    mbarrier_arrive(smem.kv_empty());  // this thread's products are done: the next K and V may come
    mbarrier_wait(smem.stage_free(), round & 1u);
    stage_pieces<Element>(smem.dk_out(), dk_acc, warp_key0, p.scale, lane);
    stage_pieces<Element>(smem.dv_out(), dv_acc, warp_key0, 1.f, lane);
    fence_view_async_shared();  // the stores -> visible to the TMA stores
    mbarrier_arrive(smem.out_staged());
  }

  const int64_t batch = block.batch;
  const int64_t kv_head = block.kv_head;
  const int64_t k0 = block.k0;
  if constexpr (kSums) {  // BackwardArgs::sums: fp32, from the registers
    add_pieces_to_sum(base.dk_sum.slice(batch, kv_head), base.dk_sum.seq_stride, k0 + warp_key0,
                      p.seq_k, p.head_dim, dk_acc, p.scale, lane);
    add_pieces_to_sum(base.dv_sum.slice(batch, kv_head), base.dv_sum.seq_stride, k0 + warp_key0,
                      p.seq_k, p.head_dim, dv_acc, 1.f, lane);
    return;
  }

  // Epilogue: stage dK (scaled) and dV in padded rows over the tiles (every consumer is done
  // reading them; the producer loads nothing more, and its dQ reduces read only the dQ stages
  // after them, Traits::kTileBytes), then write whole rows.
  named_barrier_sync(kComputeBarrier, kConsumers);
  constexpr int kTileDim = Traits::kHeadDim;
  constexpr int kOutStride = kTileDim + kSmemPadElements<int(sizeof(Element))>;
  using OutTile = SmemTile<Element, kOutStride>;
  const OutTile dk_stage{reinterpret_cast<Element*>(smem_tiles)};
  const OutTile dv_stage{reinterpret_cast<Element*>(smem_tiles) + kBlockN * kOutStride};
  const float scale[2] = {p.scale, p.scale};
  const float unit[2] = {1.f, 1.f};
  store_pieces(dk_stage, dk_acc, warp_key0, scale, 0, lane);
  store_pieces(dv_stage, dv_acc, warp_key0, unit, 0, lane);
  named_barrier_sync(kComputeBarrier, kConsumers);
  store_tile<kBlockN, kTileDim, kConsumers>(base.dk.slice(batch, kv_head, start.first_key()),
                                            base.dk.seq_stride, k0, p.seq_k, dk_stage, thread,
                                            p.head_dim);
  store_tile<kBlockN, kTileDim, kConsumers>(base.dv.slice(batch, kv_head, start.first_key()),
                                            base.dv.seq_stride, k0, p.seq_k, dv_stage, thread,
                                            p.head_dim);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The TMA descriptors of Q, dO (boxes of Traits::kBlockM rows) and K, V (kBlockN rows); false
// when a tensor cannot be described to TMA. A varlen batch's tensors as one batch entry of all
// their tokens (SequenceStart::map_batch()).
template <typename Traits, typename Element>
bool make_backward_tensor_maps(BackwardTmaParams<Element>& params, const BackwardArgs& args) {
  const AttentionShape& shape = args.shape;
  const bool varlen = args.varlen.enabled();
  const int64_t batch = varlen ? 1 : shape.batch;
  const int64_t seq_q = varlen ? args.varlen.total_q : shape.seq_q;
  const int64_t seq_k = varlen ? args.varlen.total_k : shape.seq_k;
  const auto map = [&](CUtensorMap& m, const TensorRef& t, int64_t heads, int64_t seq, int rows) {
    return make_tile_tensor_map(m, t, args.dtype, batch, heads, seq, shape.head_dim, rows);
  };
  return map(params.q_map, args.q, shape.heads, seq_q, Traits::kBlockM) &&
         map(params.dout_map, args.dout, shape.heads, seq_q, Traits::kBlockM) &&
         map(params.k_map, args.k, shape.heads_kv, seq_k, Traits::kBlockN) &&
         map(params.v_map, args.v, shape.heads_kv, seq_k, Traits::kBlockN);
}

// dK and dV's maps, which only the walking kernels store through (dense batches; with sums,
// which never walk, dK and dV may be null).
template <typename Traits, typename Element>
bool make_walk_output_maps(BackwardTmaParams<Element>& params, const BackwardArgs& args) {
  const AttentionShape& shape = args.shape;
  const auto map = [&](CUtensorMap& m, const TensorRef& t) {
    return make_tile_tensor_map(m, t, args.dtype, shape.batch, shape.heads_kv, shape.seq_k,
                                shape.head_dim, Traits::kBlockN);
  };
  return map(params.dk_map, args.dk) && map(params.dv_map, args.dv);
}

// The dense kernels on query blocks of 80 (BackwardKernelTraits' kBlocksOf80), default and
// deterministic (the same tiles), exist at head_dims 128 and 96 (128-column tiles, products of
// 96); elsewhere BlocksOf80Traits is a placeholder that is never launched.
template <int kHeadDim>
inline constexpr bool kHasBlocksOf80 = kHeadDim == 128 || kHeadDim == 96;
template <int kHeadDim>
using BlocksOf80Traits = BackwardKernelTraits<kHeadDim, false, false, kHasBlocksOf80<kHeadDim>>;

// Whether a dense call takes a kernel on query blocks of 80 rows: from 2048 query rows
// (H200, `fa` head_dim 128 backward, both masks, time against blocks of 64: 0.99 at 2k rows,
// 0.97 at 4k, 0.96 at 8k and 16k, and 0.94-0.97 of that once dK went out with dV; with that,
// 1-2 % more at 1k and 5-9 % more at 512, where a CTA's fixed costs weigh more and 7 blocks of
// 80 rows pad 512 to 560; share/results/h200-2026-12-04-query-blocks-80/). Head_dim 96 at 4k and
// 16k rows: 0.991 / 0.975 of blocks of 64 (share/results/h200-2026-12-04-prologue-groups-d96/).
// The deterministic kernel on 80-row blocks has the default's one dQ stage rather than the
// 64-row kernel's two, yet hides its turns' waits (H100, with the turns then from the last key
// block down; deterministic backward against the 64-row kernel: `seed` head_dim 128 from 4k
// rows 0.94 of the time, `fa` head_dim 128 from 2k 0.96-0.97, head_dim 96 at 4k and 16k 0.97;
// share/results/h100-2026-12-05-det-blocks-80/). The kernels serve dense calls alone: no
// variants (nor sums, which take the variant kernels), no varlen batch.
inline constexpr int64_t kBlocksOf80FromRows = 2048;
template <int kHeadDim>
bool blocks_of_80_pay(const BackwardArgs& args) {
  return kHasBlocksOf80<kHeadDim> && !uses_variant_kernels(args) && !args.varlen.enabled() &&
         args.shape.seq_q >= kBlocksOf80FromRows;
}

// How many kv heads (grid rows) a dense call without variants under a causal mask interleaves
// (block_order()): every head's first key block, then every head's second, ... (the
// deterministic kernels too, whose turns go from a query block's first key block up,
// DqSumOrder::first_key_first) rather than a head's key blocks together. Key blocks differ in
// cost there, and on grids of a few waves the plain order leaves SMs idle at its end; but spread
// over the interleaved heads, the running CTAs read all their Q, dO and fp32 dQ at once, which
// pays only while those fit in L2. Every head is interleaved where the whole call's
// B x H x Sq x D x (2 x element + 4) bytes stay within kInterleavedHeadsUpToBytes (H100, 50 MiB
// of L2, causal backward, all heads interleaved / plain time: B = 1, H = 8 at 16 MiB 0.67,
// 32 MiB 0.74-0.81, 64 MiB 0.91-1.01, 128 MiB 1.07; 256 MiB 1.04-1.74;
// share/results/h100-2026-12-05-bwd-head-order/). Past that, deterministic calls of at least
// kGroupedHeadsFromRows query rows interleave groups of as many kv heads as stay within it, one
// group after another: there a key block's turns wait for the key blocks before it, and a head's
// key blocks started together wait in a chain that interleaving shortens (H100, grouped / plain
// time: `fa` causal bf16, 256 MiB, 2k-16k rows 0.80-0.89, head_dim 128 at 16k 0.99; `seed`
// head_dim 128 at 16k, groups of 4 of 8 heads, 0.92-0.98), but 512 and 1k rows lost 1.05-1.18
// and the default mode up to 1.11 (`fa` 0.99-1.11; head_dim 128 at 2k, 4k and 16k 1.05-1.11;
// share/results/h100-2026-12-06-bwd-head-groups/): they keep the plain order. The walking kernel
// (backward_walk_pays()) takes its tiles from a counter in an order of its own and ignores this.
inline constexpr int64_t kInterleavedHeadsUpToBytes = int64_t{64} << 20;
inline constexpr int64_t kGroupedHeadsFromRows = 2048;
inline int64_t interleaved_heads(const BackwardArgs& args) {
  const AttentionShape& s = args.shape;
  if (args.mask == Mask::none || uses_variant_kernels(args) || args.varlen.enabled()) return 1;
  const int64_t rows = s.batch * s.heads_kv;
  const int64_t bytes_per_row =
      s.heads / s.heads_kv * s.seq_q * s.head_dim * (2 * int64_t(dtype_size(args.dtype)) + 4);
  const int64_t fitting = std::clamp<int64_t>(kInterleavedHeadsUpToBytes / bytes_per_row, 1, rows);
  if (fitting == rows) return rows;
  return args.deterministic && s.seq_q >= kGroupedHeadsFromRows ? fitting : 1;
}

// Whether a deterministic call sums dQ from each query block's last key block down
// (DqSumOrder::last_key_first) rather than from its first up: dense calls without variants under
// a causal mask below kGroupedHeadsFromRows query rows whose grid runs in plain order
// (interleaved_heads()) with `ctas` (key blocks) for two rounds of the GPU's `multiprocessors` or
// more. There a key block meets few query blocks, a head's key blocks start together, and from
// the first key block up key block n would wait n hand-overs before its first product while its
// CTA holds an SM, which adds up to about the head's work (H100, `fa` under a causal mask at
// 512-1k rows, deterministic / default speed 0.71-0.87 from the first key block up, 0.85-0.94
// from the last down; share/results/h100-2026-12-06-det-last-key/). Where the CTAs fit in one
// round or two (`seed`, B = 1, H = 8, 1k rows: 64 CTAs), the heaviest key blocks set the time:
// from the first key block up they never wait, from the last down they wait on every query block
// (0.92-0.94 against 0.90-0.91 there). dQ's bits follow the order, so a kv head computed in a
// call of another size may add in the other order (within the usual tolerance).
inline bool dq_sums_from_last_key(const BackwardArgs& args, int64_t ctas, int multiprocessors) {
  return args.deterministic && args.mask != Mask::none && !uses_variant_kernels(args) &&
         !args.varlen.enabled() && args.shape.seq_q < kGroupedHeadsFromRows &&
         interleaved_heads(args) == 1 && ctas >= 2 * int64_t(multiprocessors);
}

// Whether a default dense call on query blocks of 64 or 128 rows runs the walking kernel: CTAs
// that walk several key blocks overlap one's dK/dV stores and the next one's first loads, which
// pays where a key block meets few query blocks; elsewhere the walking kernel's consumer loop,
// scheduled differently by ptxas, costs 1-2 % (H200, `fa` backward, walk against one key block a
// CTA: 0.935 of the time at 512-1k query rows, 1.015 at 4k-16k; `seed`, B = 1, H = 8, 1k rows:
// 64 key-block tiles, fewer than the SMs, 1.01-1.05; share/results/h200-2026-12-05-backward-walk/).
inline constexpr int64_t kWalkUpToRows = 1024;
inline bool backward_walk_pays(const AttentionShape& shape, int64_t tiles) {
  return shape.seq_q <= kWalkUpToRows &&
         tiles >= 2 * int64_t(current_device_limits().multiprocessors);
}

// Launches the prologue, the key-split TMA + wgmma backward and the dQ conversion; returns false
// (launching nothing) when a tensor cannot be described to TMA, so that the caller falls back
// to the mma.sync kernel. sm90::launch_backward() (backward_column_split.cuh) picks it. A varlen
// batch runs each CTA on its sequence: on the default kernel's varlen twin, or with variants or
// deterministic dQ on the variant kernels.
template <typename Element, int kHeadDim>
bool launch_key_split_backward(const BackwardArgs& args, cudaStream_t stream) {
  using Traits = BackwardTraits<kHeadDim>;  // the tiles: as the deterministic kernels'
  using DeterministicTraits = BackwardTraits<kHeadDim, true>;  // more dQ stages where they fit
  // The deterministic variant kernels and the kernels on query blocks of 80 have query tiles of
  // their own (BackwardKernelTraits); every other kernel launched here has Traits' (or
  // DeterministicTraits', the same tiles).
  using DeterministicVariantTraits = BackwardKernelTraits<kHeadDim, true, true>;
  using Of80Traits = BlocksOf80Traits<kHeadDim>;
  static_assert(kEpilogueFitsTiles<Traits, Element> &&
                kEpilogueFitsTiles<DeterministicTraits, Element> &&
                kEpilogueFitsTiles<DeterministicVariantTraits, Element> &&
                kEpilogueFitsTiles<Of80Traits, Element>);
  static_assert(DeterministicTraits::kBlockM == Traits::kBlockM,
                "the same maps serve every kernel but those with query tiles of their own");
  static_assert(DeterministicTraits::kBlockN == Traits::kBlockN &&
                    DeterministicVariantTraits::kBlockN == Traits::kBlockN &&
                    Of80Traits::kBlockN == Traits::kBlockN &&
                    DeterministicTraits::kThreads == Traits::kThreads &&
                    DeterministicVariantTraits::kThreads == Traits::kThreads &&
                    Of80Traits::kThreads == Traits::kThreads &&
                    DeterministicVariantTraits::kHeadDim == Traits::kHeadDim &&
                    Of80Traits::kHeadDim == Traits::kHeadDim,
                "the grid, the prologue and the dQ conversion below serve every kernel");
  constexpr int kTileDim = Traits::kHeadDim;  // 128 for the 96 kernel (column_pieces.cuh)
  const AttentionShape& shape = args.shape;

  // uses_variant_kernels() is true with sums; a varlen batch (never with sums) needs a kernel
  // that narrows each CTA to its sequence
  const bool varlen = args.varlen.enabled();
  const bool deterministic = args.deterministic;
  const bool variants = uses_variant_kernels(args) || (varlen && deterministic);
  const bool deterministic_variants = variants && deterministic;
  const bool blocks_of_80 = blocks_of_80_pay<kHeadDim>(args);
  BackwardTmaParams<Element> params{};
  const bool mapped = deterministic_variants
                          ? make_backward_tensor_maps<DeterministicVariantTraits>(params, args)
                      : blocks_of_80 ? make_backward_tensor_maps<Of80Traits>(params, args)
                                     : make_backward_tensor_maps<Traits>(params, args);
  if (!mapped) return false;
  // The walk counts tiles, keys (TMA's signed coordinates) and the accumulator's rows
  // (batch x heads x seq_q) in 32 bits.
  const int64_t tiles = ceil_div(shape.seq_k, Traits::kBlockN) * shape.batch * shape.heads_kv;
  const bool walk = !variants && !varlen && !deterministic && !blocks_of_80 &&
                    backward_walk_pays(shape, tiles) && tiles <= INT32_MAX &&
                    shape.seq_k <= INT32_MAX &&
                    shape.batch * shape.heads * shape.seq_q <= int64_t(UINT32_MAX) &&
                    make_walk_output_maps<Traits>(params, args);
  params.base = backward_params<Element>(args);
  params.base.num_n_blocks = ceil_div(shape.seq_k, Traits::kBlockN);
  params.base.heads_together = uint32_t(interleaved_heads(args));
  launch_backward_prologue<Element, kTileDim>(params.base, stream);
  const int multiprocessors = current_device_limits().multiprocessors;
  const bool last_key_first = dq_sums_from_last_key(args, tiles, multiprocessors);
  const bool rotated =
      !blocks_of_80 && dq_turns_rotate<Traits::kBlockM, Traits::kBlockN>(args, multiprocessors);
  constexpr auto kLastKeyFirst = DqSumOrder::last_key_first;
  auto* kernel =
      variants ? (deterministic ? &backward_kernel<Element, kHeadDim, true, true>
                                : &backward_kernel<Element, kHeadDim, true, false>)
      : varlen ? &backward_kernel<Element, kHeadDim, false, false, false, true>
      : last_key_first
          ? &backward_kernel<Element, kHeadDim, false, true, false, false, false, false,
                             kLastKeyFirst>
      : deterministic ? &backward_kernel<Element, kHeadDim, false, true>
      : walk          ? &backward_kernel<Element, kHeadDim, false, false, false, false, false, true>
                      : &backward_kernel<Element, kHeadDim, false, false>;
  if constexpr (Traits::kBlockM == Traits::kBlockN) {  // dq_turns_rotate()
    if (rotated) {
      kernel = &backward_kernel<Element, kHeadDim, false, true, false, false, false, false,
                                DqSumOrder::rotated>;
    }
  }
  if (args.sums.enabled()) {
    kernel = deterministic ? &backward_kernel<Element, kHeadDim, true, true, true>
                           : &backward_kernel<Element, kHeadDim, true, false, true>;
  }
  size_t smem_bytes = deterministic_variants ? DeterministicVariantTraits::kSmemBytes
                      : deterministic        ? DeterministicTraits::kSmemBytes
                                             : Traits::kSmemBytes;
  if constexpr (kHasBlocksOf80<kHeadDim>) {
    static_assert(BackwardKernelTraits<kHeadDim, true, false, true>::kSmemBytes ==
                  Of80Traits::kSmemBytes);
    if (blocks_of_80) {
      kernel = deterministic
                   ? &backward_kernel<Element, kHeadDim, false, true, false, false, true>
                   : &backward_kernel<Element, kHeadDim, false, false, false, false, true>;
      smem_bytes = Of80Traits::kSmemBytes;
    }
  }
  allow_dynamic_smem(kernel, smem_bytes);
  // The walking kernel: one CTA an SM (KeyBlockWalk), in one launch.
  if (walk) {
    params.base.bh_offset = 0;
    params.walk = {uint32_t(tiles), uint32_t(params.base.num_n_blocks)};
    const int64_t ctas = std::min<int64_t>(tiles, current_device_limits().multiprocessors);
    launch_kernel(kernel, dim3(static_cast<unsigned>(ctas)), Traits::kThreads, smem_bytes, stream,
                  params);
  } else {
    for_each_grid_y_chunk(shape.batch * shape.heads_kv, [&](int64_t offset, unsigned count) {
      params.base.bh_offset = offset;
      const dim3 grid(static_cast<unsigned>(params.base.num_n_blocks), count);
      launch_kernel(kernel, grid, Traits::kThreads, smem_bytes, stream, params);
    });
  }
  launch_backward_dq_convert<Element, kTileDim, true>(params.base, stream);
  return true;
}

}  // namespace cuflash::detail::sm90
