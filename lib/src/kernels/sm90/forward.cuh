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

#include <cstddef>
#include <cstdint>

#include "kernels/common/copy.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/score_mod.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm90/traits.cuh"
#include "workspace.h"

namespace cuflash::detail::sm90 {

template <typename Element>
struct ForwardTmaParams {
  ForwardParams<Element> base;
  CUtensorMap q_map, k_map, v_map;  // boxes: 64 columns x kBlockM (Q) or kBlockN (K, V) rows
};

// Shared-space addresses of the members of a CTA's Traits::Storage, which starts at `tiles`.
template <typename Traits>
struct ForwardSmem {
  using Storage = typename Traits::Storage;
  using QTile = SwizzledTile<Traits::kBlockM, Traits::kHeadDim>;
  using KvTile = SwizzledTile<Traits::kBlockN, Traits::kHeadDim>;
  static_assert(sizeof(Storage::q) == QTile::kBytes && sizeof(Storage::k[0]) == KvTile::kBytes);
  static_assert(kTileAlignment == kSwizzleAtomBytes);
  uint32_t tiles;  // kTileAlignment-aligned

  static __device__ uint32_t slot(int64_t block) { return uint32_t(block % Traits::kStages); }
  __device__ uint32_t at(size_t offset) const { return tiles + uint32_t(offset); }

  __device__ QTile q() const { return {at(offsetof(Storage, q))}; }
  __device__ KvTile k(int64_t block) const {
    return {at(offsetof(Storage, k) + slot(block) * sizeof(Storage::k[0]))};
  }
  __device__ KvTile v(int64_t block) const {
    return {at(offsetof(Storage, v) + slot(block) * sizeof(Storage::v[0]))};
  }
  __device__ uint32_t q_full() const { return at(offsetof(Storage, q_full)); }
  __device__ uint32_t k_full(int64_t block) const {
    return at(offsetof(Storage, k_full) + 8 * slot(block));
  }
  __device__ uint32_t v_full(int64_t block) const {
    return at(offsetof(Storage, v_full) + 8 * slot(block));
  }
  __device__ uint32_t k_empty(int64_t block) const {
    return at(offsetof(Storage, k_empty) + 8 * slot(block));
  }
  __device__ uint32_t v_empty(int64_t block) const {
    return at(offsetof(Storage, v_empty) + 8 * slot(block));
  }
  // Block j is the (j / kStages)-th use of its slot: the parity of the barrier phase to wait for.
  static __device__ uint32_t parity(int64_t block) {
    return uint32_t(block / Traits::kStages) & 1u;
  }
};

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

// The producer: Q once, then K_j and V_j into their slots as soon as the consumers free them.
// `block` counts the key blocks visited (slots and barrier phases follow it); the keys start at
// block first_key_block.
template <typename Traits, typename Element>
__device__ __forceinline__ void produce_tiles(const ForwardTmaParams<Element>& params,
                                              ForwardSmem<Traits> smem, int64_t q0,
                                              int64_t first_key_block, int64_t num_key_blocks,
                                              int64_t batch, int64_t head, int64_t kv_head) {
  using Smem = ForwardSmem<Traits>;
  load_tile_tma(smem.q(), params.q_map, smem.q_full(), q0, head, batch);
  for (int64_t block = 0; block < num_key_blocks; ++block) {
    const int64_t k0 = (first_key_block + block) * Traits::kBlockN;
    if (block >= Traits::kStages) mbarrier_wait(smem.k_empty(block), Smem::parity(block) ^ 1u);
    load_tile_tma(smem.k(block), params.k_map, smem.k_full(block), k0, kv_head, batch);
    if (block >= Traits::kStages) mbarrier_wait(smem.v_empty(block), Smem::parity(block) ^ 1u);
    load_tile_tma(smem.v(block), params.v_map, smem.v_full(block), k0, kv_head, batch);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename Element, int kHeadDim, bool kVariants>
__global__ void __launch_bounds__(ForwardTraits<kHeadDim>::kThreads, 1)
    forward_kernel(const __grid_constant__ ForwardTmaParams<Element> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Traits = ForwardTraits<kHeadDim>;
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

  const ProblemParams& p = params.base.problem;
  const int thread = threadIdx.x;
  const int lane = thread % 32;
  // Plain block order: CTAs of one head run together and share its K/V in L2.
  const ForwardBlock block = forward_block<kBlockM, kBlockN, kVariants>(
      p, params.base.bh_offset, params.base.num_m_blocks, block_order(false));
  const int64_t q0 = block.q0;
  const int64_t batch = block.batch;
  const int64_t head = block.head;
  const int64_t kv_head = block.kv_head;
  Element* out = params.base.out.slice(batch, head);
  float* lse = params.base.lse + block.bh * p.seq_q;
  if (block.key_blocks == 0) {
    store_empty_block<kBlockM, kHeadDim, Traits::kThreads>(out, params.base.out.seq_stride, lse,
                                                           q0, p.seq_q, thread, p.head_dim);
    return;
  }
  const int64_t num_key_blocks = block.key_blocks;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const uint32_t shared_base = shared_address(shared_bytes);
  const Smem smem{(shared_base + kSwizzleAtomBytes - 1) & ~uint32_t(kSwizzleAtomBytes - 1)};
  if (thread == kConsumers) {
    mbarrier_init(smem.q_full(), 1);
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
      produce_tiles<Traits>(params, smem, q0, block.first_key_block, num_key_blocks, batch, head,
                            kv_head);
    }
    return;
  }

  warpgroup_claim_registers<kConsumerRegisters>();
  const int warp_group = thread / 128;
  const int warp_group_row0 = 64 * warp_group;  // this warpgroup's rows within the block
  const int warp_row0 = warp_group_row0 + 16 * ((thread / 32) % 4);
  const int64_t fragment_row = q0 + warp_row0 + lane / 4;  // query of fragment row `group`
  const bool masks_end = p.seq_k % kBlockN != 0;

  // S_j = Q K_j^T into s (64 x kBlockN per warpgroup); the first k step overwrites s.
  auto issue_scores = [&](float (&s)[kScoreTiles][4], int64_t block) {
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      Mma::template ss<0, 0>(s, k_major_descriptor(smem.q(), warp_group_row0, 16 * kk),
                          k_major_descriptor(smem.k(block), 0, 16 * kk), kk > 0);
    }
    wgmma_commit();
  };
  // Modifies (kVariants) and masks S_j where needed and turns it into P_j (unnormalized
  // probabilities); `it` counts the key blocks visited.
  OnlineSoftmax softmax;
  [[maybe_unused]] ScoreModFor<Element> mod;
  if constexpr (kVariants) mod = score_mod<Element>(p, batch, head);
  // Modified scores are in log2 units already.
  const float softmax_scale = kVariants ? modified_scale(mod, p) : p.scale_log2;
  auto exponentiate = [&](float (&s)[kScoreTiles][4], int64_t it, float (&rescale)[2]) {
    const int64_t k0 = (block.first_key_block + it) * kBlockN;
    const bool crosses_end = masks_end && k0 + kBlockN > p.seq_k;
    if constexpr (kVariants) {
      if (mod.kind() != ScoreModKind::none) modify_scores(s, mod, p, k0, fragment_row, lane);
    }
    if (crosses_end || crosses_band<kVariants>(p, q0, kBlockM, k0, kBlockN)) {
      mask_scores<kVariants>(s, p, k0, fragment_row, lane);
    }
    softmax.exponentiate(s, softmax_scale, rescale);
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
  auto issue_products = [&](int64_t block) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      MmaOut::template rs<1>(o_acc, p_fragments[kk], n_major_descriptor(smem.v(block), 16 * kk),
                             true);
    }
    wgmma_commit();
  };

  // Turns (Traits::kAlternate): named barrier 2 + w opens when warpgroup w may issue; it needs
  // w's own 128 threads and an arrival of the other warpgroup's 128. Warpgroup 0 goes first.
  // Each warpgroup issues num_key_blocks + 1 times; warpgroup 1 skips its last hand-over, so
  // that no arrival is left pending.
  auto wait_for_turn = [&] {
    if constexpr (Traits::kAlternate) named_barrier_sync(kFirstTurnBarrier + warp_group, kConsumers);
  };
  auto pass_turn = [&](bool last) {
    if constexpr (Traits::kAlternate) {
      if (!(last && warp_group == 1)) named_barrier_arrive(kFirstTurnBarrier + (1 - warp_group), kConsumers);
    }
  };
  if constexpr (Traits::kAlternate) {
    if (warp_group == 1) named_barrier_arrive(kFirstTurnBarrier, kConsumers);
  }

  {  // S_0 -> P_0 (O is still 0: nothing to rescale)
    float s[kScoreTiles][4];
    float rescale[2];
    mbarrier_wait(smem.q_full(), 0);
    mbarrier_wait(smem.k_full(0), 0);
    wait_for_turn();
    wgmma_fence();
    issue_scores(s, 0);
    pass_turn(false);
    wgmma_wait<0>();
    wgmma_fence_operands(s);
    mbarrier_arrive(smem.k_empty(0));
    exponentiate(s, 0, rescale);
    pack_probabilities(s);
  }
  // Every block but the last has a successor whose scores overlap its products. (No branch
  // between the fence and the wgmma instructions: the compiler would serialize them.)
  for (int64_t block = 0; block + 1 < num_key_blocks; ++block) {
    float s[kScoreTiles][4];
    float rescale[2];
    mbarrier_wait(smem.k_full(block + 1), Smem::parity(block + 1));
    mbarrier_wait(smem.v_full(block), Smem::parity(block));
    wait_for_turn();
    wgmma_fence();
    issue_scores(s, block + 1);
    issue_products(block);
    pass_turn(false);
    wgmma_wait<1>();  // S_j+1 is ready; P_j V_j may still run
    wgmma_fence_operands(s);
    mbarrier_arrive(smem.k_empty(block + 1));
    exponentiate(s, block + 1, rescale);
    wgmma_wait<0>();
    wgmma_fence_operands(o_acc);
    wgmma_fence_operands(p_fragments);
    mbarrier_arrive(smem.v_empty(block));
    OnlineSoftmax::rescale_rows(o_acc, rescale);
    pack_probabilities(s);
  }
  mbarrier_wait(smem.v_full(num_key_blocks - 1), Smem::parity(num_key_blocks - 1));
  wait_for_turn();
  wgmma_fence();
  issue_products(num_key_blocks - 1);
  pass_turn(true);
  wgmma_wait<0>();
  wgmma_fence_operands(o_acc);
  wgmma_fence_operands(p_fragments);

  // Epilogue: normalize, stage O in shared memory (padded rows, over the Q tile and beyond),
  // write whole rows with 16-byte stores. The consumer barrier orders every warpgroup's last
  // wgmma reads before the overwrite (the producer warp has left).
  named_barrier_sync(kComputeBarrier, kConsumers);
  using OutTile = SmemTile<Element, kHeadDim + kSmemPadElements<int(sizeof(Element))>>;
  const OutTile out_tile{reinterpret_cast<Element*>(shared_bytes + (smem.tiles - shared_base))};
  float normalizer[2];
  float row_lse[2];
  softmax.finish(normalizer, row_lse);
  store_accumulators(out_tile, o_acc, warp_row0, normalizer, lane);
  if (lane % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = fragment_row + 8 * half;
      if (row < p.seq_q) lse[row] = row_lse[half];
    }
  }
  named_barrier_sync(kComputeBarrier, kConsumers);
  store_tile<kBlockM, kHeadDim, kConsumers>(out, params.base.out.seq_stride, q0, p.seq_q,
                                            out_tile, thread, p.head_dim);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launches the TMA + wgmma forward; returns false (launching nothing) when a tensor cannot be
// described to TMA, so that the caller falls back to the mma.sync kernel.
template <typename Element, int kHeadDim>
bool launch_forward(const ForwardArgs& args, cudaStream_t stream) {
  using Traits = ForwardTraits<kHeadDim>;
  constexpr int kOutStride = kHeadDim + kSmemPadElements<int(sizeof(Element))>;
  static_assert(size_t(Traits::kBlockM) * kOutStride * sizeof(Element) <= Traits::kTileBytes,
                "the epilogue stages O in the tiles' shared memory");
  const AttentionShape& shape = args.shape;
  ForwardTmaParams<Element> params{};
  if (!make_tile_tensor_map(params.q_map, args.q, args.dtype, shape.batch, shape.heads,
                            shape.seq_q, shape.head_dim, Traits::kBlockM) ||
      !make_tile_tensor_map(params.k_map, args.k, args.dtype, shape.batch, shape.heads_kv,
                            shape.seq_k, shape.head_dim, Traits::kBlockN) ||
      !make_tile_tensor_map(params.v_map, args.v, args.dtype, shape.batch, shape.heads_kv,
                            shape.seq_k, shape.head_dim, Traits::kBlockN)) {
    return false;
  }
  ForwardParams<Element>& base = params.base;
  base.problem = problem_params(args);
  base.out = global_tensor<Element>(args.out);
  base.lse = args.lse;
  base.num_m_blocks = ceil_div(shape.seq_q, Traits::kBlockM);

  auto* kernel = uses_variant_kernels(args) ? &forward_kernel<Element, kHeadDim, true>
                                       : &forward_kernel<Element, kHeadDim, false>;
  allow_dynamic_smem(kernel, Traits::kSmemBytes);
  for_each_grid_y_chunk(shape.batch * shape.heads, [&](int64_t offset, unsigned count) {
    base.bh_offset = offset;
    const dim3 grid(static_cast<unsigned>(base.num_m_blocks), count);
    launch_kernel(kernel, grid, Traits::kThreads, Traits::kSmemBytes, stream, params);
  });
  return true;
}

}  // namespace cuflash::detail::sm90
