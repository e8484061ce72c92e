// FlashAttention-2 backward on Hopper (sm_90a) for head dims above 128, and at 128 on grids too
// small to fill the GPU (column_split_pays()): wgmma for the five products, TMA for the loads,
// the two consumer warpgroups splitting the work rather than the keys (ColumnSplitBackwardConfig
// in traits.cuh says why).
//
// Same contract as sm90/backward.cuh (row_dot and dq_convert kernels around it; dQ added to the
// fp32 accumulator as there, by one bulk reduce per query block from swizzled rows, staged in a
// stage of its own at 128 and 192 (two at 128 in deterministic mode) and in the block's Q/dO slot
// at 256). One CTA per (key block of 64, kv
// head, batch); the producer warpgroup loads K and V once, then Q, dO, LSE and D of every query
// block into kStages slots (produce_backward_tiles()). Per query block of 64:
//   warpgroup 0: S^T  = K Q^T                 wgmma, 64 keys x 64 queries, K = head_dim
//                P^T  = exp2(S^T * scale*log2e - LSE * log2e), masked -> shared memory
//   warpgroup 1: dP^T = V dO^T                wgmma, same shape
//                (meets warpgroup 0) dS^T = P^T * (dP^T - D) -> shared memory
//   both meet; warpgroup w, columns c = [w * D/2, (w + 1) * D/2):
//                dV[:, c] += P^T dO[:, c],  dK[:, c] += dS^T Q[:, c]   A from shared memory
//                dQ[:, c]  = dS K[:, c]       A = dS^T read M-major -> dQ stage
//                (at D = 192 each half is two wgmma pieces: ColumnPieces says why)
// Each warpgroup issues the same number of wgmma instructions: one score product (64 x 64 x D)
// and half of the three others (3 x 64 x D/2 x 64). P^T reaches warpgroup 1 in 16 bits, as dS^T
// reaches the products in both kernels.
// Variants, fp32 sums and varlen batches are not here, nor deterministic dQ above 128:
// launch_column_split_backward() returns false for them and the mma.sync kernel runs them
// (above 128; at 128 the key-split kernel). At 128 the kernel sums dQ deterministically too, in
// the order kSumOrder.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/backward_steps.cuh"
#include "kernels/common/copy.cuh"
#include "kernels/common/fragments.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/sm90/backward.cuh"
#include "kernels/sm90/column_pieces.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/traits.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace cuflash::detail::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// acc (+)= A B[:, this warpgroup's columns] over kSteps k-steps of 16: a_descriptor(kk) gives
// A's descriptor, B is an N-major tile; accumulate = false starts from zero.
template <typename Element, int kTransA, int kSteps, typename Pieces, typename ADescriptor,
          typename BTile>
__device__ __forceinline__ void piece_products(PieceAccumulators<Pieces>& acc,
                                               ADescriptor a_descriptor, BTile b_tile,
                                               int warp_group, bool accumulate) {
  const int wide_col = Pieces::wide_col(warp_group);
  const int narrow_col = Pieces::narrow_col(warp_group);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const uint64_t a = a_descriptor(kk);
    Wgmma<Element, Pieces::kWide>::template ss<kTransA, 1>(
        acc.wide, a, n_major_descriptor(b_tile, 16 * kk, wide_col), accumulate || kk > 0);
    if constexpr (Pieces::kNarrow > 0) {
      Wgmma<Element, Pieces::kNarrow>::template ss<kTransA, 1>(
          acc.narrow, a, n_major_descriptor(b_tile, 16 * kk, narrow_col), accumulate || kk > 0);
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Stores a warp's (16 keys from row0, 8 * kTiles queries) fp32 block as 16-bit values into a
// swizzled keys x queries tile, in the layout wgmma reads as a K-major A operand.
template <typename Element, int kTiles, typename Tile>
__device__ __forceinline__ void store_transposed_block(Tile tile, const float (&block)[kTiles][4],
                                                       int row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
    uint32_t packed[4];
    accumulators_to_a<Element>(packed, block[2 * kk], block[2 * kk + 1]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + lane / 4 + 8 * half;
      const int col = 16 * kk + 2 * (lane % 4);
      store_shared_u32(swizzled_address(tile, row, col), packed[half]);
      store_shared_u32(swizzled_address(tile, row, col + 8), packed[2 + half]);
    }
  }
}

// Reads back what store_transposed_block() stored, into the same fragment positions (fp32).
template <typename Element, int kTiles, typename Tile>
__device__ __forceinline__ void load_transposed_block(float (&block)[kTiles][4], Tile tile,
                                                      int row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + lane / 4 + 8 * half;
      const int col = 16 * kk + 2 * (lane % 4);
      const float2 left = ElementOps<Element>::unpack(
          load_shared_u32(swizzled_address(tile, row, col)));
      const float2 right = ElementOps<Element>::unpack(
          load_shared_u32(swizzled_address(tile, row, col + 8)));
      block[2 * kk][2 * half] = left.x;
      block[2 * kk][2 * half + 1] = left.y;
      block[2 * kk + 1][2 * half] = right.x;
      block[2 * kk + 1][2 * half + 1] = right.y;
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kSumOrder: unordered by default; deterministic, each query block's dQ summed from its first
// key block up under a causal mask, rotated without one (reduce_dq(),
// launch_column_split_backward()); the grid in plain order, a kv head's key blocks together (the
// key-split kernel may interleave heads under a causal mask, interleaved_heads()): on the grids
// column_split_pays() admits every CTA holds an SM from the start, which the rotated order needs
// (its key blocks wait for later CTAs of their key group).
template <typename Element, int kHeadDim, DqSumOrder kSumOrder = DqSumOrder::unordered>
__global__ void __launch_bounds__(
    ColumnSplitBackwardConfig<kHeadDim, kSumOrder != DqSumOrder::unordered>::kThreads, 1)
    column_split_backward_kernel(const __grid_constant__ BackwardTmaParams<Element> params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(kSumOrder != DqSumOrder::last_key_first, "the grid runs in plain order");
  constexpr bool kDeterministic = kSumOrder != DqSumOrder::unordered;
  using Traits = ColumnSplitBackwardConfig<kHeadDim, kDeterministic>;
  using Smem = BackwardSmem<Traits>;
  using Storage = typename Traits::Storage;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kConsumers = Traits::kConsumerThreads;
  constexpr int kQueryTiles = kBlockM / 8;           // n8 tiles of S^T, dP^T per warp
  // Deterministic: one thread's reduce chain a query block (the turn, the reduce, its completion,
  // the release) took about as long as the consumers' block on small grids, where nothing else
  // hides it (H100, `seed` 1k head_dim 128 without a mask, rotated: 0.79-0.81x the default's
  // speed); two threads, one per dQ stage, overlap two chains (reduce_dq(); 0.89-0.92x there,
  // causal 0.86-0.88 -> 0.92-0.95x; share/results/h100-2026-12-07-two-reducers/).
  constexpr int kDqReduceThreads = kDeterministic ? Traits::kDqSlots : 1;
  static_assert(!kDeterministic || Traits::kDqSlots == 2, "a reduce thread per dQ stage");
  using Pieces = ColumnPieces<Traits::kHalfCols>;  // dV, dK, dQ: 64 rows x D/2 a warpgroup
  using MmaScores = Wgmma<Element, kBlockM>;        // S^T, dP^T: 64 keys x 64 queries

  const BackwardParams<Element>& base = params.base;
  const ProblemParams& p = base.problem;
  const int thread = threadIdx.x;
  const int lane = thread % 32;
  const BackwardBlock block = backward_block<kBlockN>(p, base.bh_offset, block_order(int64_t{1}));
  const int64_t batch = block.batch;
  const int64_t kv_head = block.kv_head;
  const int64_t k0 = block.k0;
  const auto schedule =
      query_block_schedule<kBlockM, kBlockN, false>(p, k0, kSumOrder, base.dq_groups.keys);

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const uint32_t shared_base = shared_address(shared_bytes);
  const Smem smem{(shared_base + kSwizzleAtomBytes - 1) & ~uint32_t(kSwizzleAtomBytes - 1)};
  unsigned char* smem_tiles = shared_bytes + (smem.tiles - shared_base);
  static_assert(Traits::kDqSlots > 0, "dQ goes by the bulk reduce");
  if (thread == kConsumers) smem.template init_barriers<false>();
  __syncthreads();

  if (thread >= kConsumers) {  // the producer warpgroup; its first warp does the loading
    warpgroup_release_registers<Traits::kProducerRegisters>();
    if (thread < kConsumers + 32) {
      produce_backward_tiles<Traits, false>(params, smem, smem_tiles, SequenceStart<false>{p},
                                            schedule, k0, batch, kv_head, lane);
    } else if (int reducer; is_dq_reduce_thread<kConsumers>(thread, kDqReduceThreads, reducer)) {
      reduce_dq<Traits, kDeterministic>(base, smem, SequenceStart<false>{p}, schedule, batch,
                                        kv_head, int(k0 / kBlockN), uint32_t(reducer),
                                        uint32_t(kDqReduceThreads));
    }
    return;
  }
  warpgroup_claim_registers<Traits::kConsumerRegisters>();

  const int warp_group = thread / 128;
  const int warp_row0 = 16 * ((thread / 32) % 4);   // this warp's keys (S^T, dK, dV), queries (dQ)
  int64_t fragment_key[2];  // keys of this thread's fragment rows group, group + 8
  fragment_key[0] = k0 + warp_row0 + lane / 4;
  fragment_key[1] = fragment_key[0] + 8;
  const auto score_a = warp_group == 0 ? smem.k() : smem.v();

  PieceAccumulators<Pieces> dk_acc;  // dK (16 keys of this warp, D/2), without the scale
  PieceAccumulators<Pieces> dv_acc;
  zero_pieces(dk_acc);
  zero_pieces(dv_acc);
  mbarrier_wait(smem.kv_full(), 0);

  for (uint32_t it = 0; it < schedule.count; ++it) {
    const int64_t q0 = schedule.q0(p, it);
    const auto q_tile = smem.q(it);
    const auto dout_tile = smem.dout(it);
    const typename Smem::DsTile pt_tile{
        smem.at(offsetof(Storage, pt) + uint32_t(it % 2) * sizeof(Storage::pt[0]))};
    const auto ds_tile = smem.ds(it);
    mbarrier_wait(smem.full(it), Smem::Slots::parity(it));

    // S^T = K Q^T (warpgroup 0) or dP^T = V dO^T (warpgroup 1).
    float scores[kQueryTiles][4];
    const auto score_b = warp_group == 0 ? q_tile : dout_tile;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      MmaScores::template ss<0, 0>(scores, k_major_descriptor(score_a, 0, 16 * kk),
                                   k_major_descriptor(score_b, 0, 16 * kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(scores);

    if (warp_group == 0) {  // P^T; rows past Sq have LSE = +inf: P = 0
      const float* lse = reinterpret_cast<const float*>(smem_tiles + smem.lse_offset(it));
      const bool masked = needs_mask<false>(p, q0, kBlockM, k0, kBlockN);
      probabilities_transposed(scores, lse, p.scale_log2,
                               visible_columns<false, kBlockM>(p, masked, fragment_key, q0), lane);
      store_transposed_block<Element>(pt_tile, scores, warp_row0, lane);
      fence_view_async_shared();  // P^T stores -> visible to wgmma
    }
    named_barrier_sync(kComputeBarrier, kConsumers);  // P^T in place
    // dV += P^T dO needs P^T alone: issued now, both warpgroups' dV products run on the tensor
    // cores while warpgroup 1 computes dS^T (their accumulators are not touched until the wait).
    wgmma_fence();
    piece_products<Element, 0, kBlockM / 16>(
        dv_acc, [&](int kk) { return k_major_descriptor(pt_tile, 0, 16 * kk); }, dout_tile,
        warp_group, true);
    wgmma_commit();
    if (warp_group == 1) {  // dS^T = P^T * (dP^T - D), from P^T as warpgroup 0 rounded it
      const float* row_dot = reinterpret_cast<const float*>(smem_tiles + smem.row_dot_offset(it));
      float pt[kQueryTiles][4];
      load_transposed_block<Element>(pt, pt_tile, warp_row0, lane);
      score_gradients_transposed(scores, pt, scores, row_dot, lane);
      store_transposed_block<Element>(ds_tile, scores, warp_row0, lane);
      fence_view_async_shared();  // dS^T stores -> visible to wgmma
    }
    named_barrier_sync(kComputeBarrier, kConsumers);  // dS^T in place

    // The rest of this warpgroup's columns: dK += dS^T Q (A K-major from the keys x queries
    // tile, B N-major), dQ = dS K (A = dS^T read M-major, B = K N-major).
    PieceAccumulators<Pieces> dq_acc;
    wgmma_fence();
    piece_products<Element, 0, kBlockM / 16>(
        dk_acc, [&](int kk) { return k_major_descriptor(ds_tile, 0, 16 * kk); }, q_tile,
        warp_group, true);
    piece_products<Element, 1, kBlockN / 16>(
        dq_acc, [&](int kk) { return n_major_descriptor(ds_tile, 16 * kk, 0); }, smem.k(),
        warp_group, false);
    wgmma_commit();
    wgmma_wait<0>();
    fence_piece_operands(dv_acc);
    fence_piece_operands(dk_acc);
    fence_piece_operands(dq_acc);
    // Q, dO, LSE and D of this slot are no longer read (with the dQ stage in the slot: by
    // either warpgroup, before one stores its dQ part over them; reduce_dq() frees the slot).
    if constexpr (Traits::kDqInQuerySlots) {
      named_barrier_sync(kComputeBarrier, kConsumers);
    } else {
      mbarrier_arrive(smem.empty(it));
    }
    // Stage the part for reduce_dq() once the reduce of the stage's previous block has read it.
    if (!Traits::kDqInQuerySlots && it >= Traits::kDqStages) {
      mbarrier_wait(smem.dq_free(it), Smem::DqSlots::parity(it - Traits::kDqStages));
    }
    float* const stage = reinterpret_cast<float*>(smem_tiles + (smem.dq_stage(it) - smem.tiles));
    stage_dq<kHeadDim>(stage, dq_acc.wide, warp_row0, Pieces::wide_col(warp_group), 0, lane);
    if constexpr (Pieces::kNarrow > 0) {
      stage_dq<kHeadDim>(stage, dq_acc.narrow, warp_row0, Pieces::narrow_col(warp_group), 0,
                         lane);
    }
    fence_view_async_shared();  // the stores -> visible to the bulk reduce
    mbarrier_arrive(smem.dq_staged(it));
  }

  // Epilogue: stage dK (scaled) and dV in padded rows over the tiles (every consumer is done
  // reading them; the producer loads nothing more; with dQ staged in the Q/dO slots, the
  // reduces of the last blocks have read them), then write whole rows.
  if constexpr (Traits::kDqInQuerySlots) {
    const uint32_t first =
        uint32_t(schedule.count > Traits::kStages ? schedule.count - Traits::kStages : 0);
    for (uint32_t it = first; it < schedule.count; ++it) {
      mbarrier_wait(smem.empty(it), Smem::Slots::parity(it));
    }
  }
  named_barrier_sync(kComputeBarrier, kConsumers);
  constexpr int kOutStride = kHeadDim + kSmemPadElements<int(sizeof(Element))>;
  using OutTile = SmemTile<Element, kOutStride>;
  Element* const stage = reinterpret_cast<Element*>(smem_tiles);
  const OutTile dk_stage{stage};
  const OutTile dv_stage{stage + kBlockN * kOutStride};
  const float scale[2] = {p.scale, p.scale};
  const float unit[2] = {1.f, 1.f};
  store_pieces(dk_stage, dk_acc, warp_row0, scale, warp_group, lane);
  store_pieces(dv_stage, dv_acc, warp_row0, unit, warp_group, lane);
  named_barrier_sync(kComputeBarrier, kConsumers);
  store_tile<kBlockN, kHeadDim, kConsumers>(base.dk.slice(batch, kv_head), base.dk.seq_stride,
                                            k0, p.seq_k, dk_stage, thread, p.head_dim);
  store_tile<kBlockN, kHeadDim, kConsumers>(base.dv.slice(batch, kv_head), base.dv.seq_stride,
                                            k0, p.seq_k, dv_stage, thread, p.head_dim);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launches the prologue, the column-split backward (its dQ sums in kSumOrder) and the dQ
// conversion.
template <typename Element, int kHeadDim, DqSumOrder kSumOrder>
void launch_column_split_kernels(BackwardTmaParams<Element>& params, const BackwardArgs& args,
                                 cudaStream_t stream) {
  using Traits = ColumnSplitBackwardConfig<kHeadDim, kSumOrder != DqSumOrder::unordered>;
  static_assert(kEpilogueFitsTiles<Traits, Element>);
  params.base.num_n_blocks = ceil_div(args.shape.seq_k, Traits::kBlockN);
  launch_backward_prologue<Element, kHeadDim>(params.base, stream);
  auto* kernel = &column_split_backward_kernel<Element, kHeadDim, kSumOrder>;
  allow_dynamic_smem(kernel, Traits::kSmemBytes);
  for_each_grid_y_chunk(args.shape.batch * args.shape.heads_kv,
                        [&](int64_t offset, unsigned count) {
                          params.base.bh_offset = offset;
                          const dim3 grid(static_cast<unsigned>(params.base.num_n_blocks), count);
                          launch_kernel(kernel, grid, Traits::kThreads, Traits::kSmemBytes, stream,
                                        params);
                        });
  // The bulk reduce's accumulator rows are swizzled (dq_swizzled_column()).
  launch_backward_dq_convert<Element, kHeadDim, true>(params.base, stream);
}

// Runs the column-split backward; returns false (launching nothing) for what it does not do
// (variants, fp32 sums, varlen batches; deterministic dQ above head_dim 128, and without a mask
// where the sums cannot rotate) and when a tensor cannot be described to TMA, so that the caller
// falls back to another kernel.
template <typename Element, int kHeadDim>
bool launch_column_split_backward(const BackwardArgs& args, cudaStream_t stream) {
  using Traits = ColumnSplitBackwardConfig<kHeadDim>;  // the tiles: as the deterministic kernel's
  if (uses_variant_kernels(args) || args.varlen.enabled()) return false;  // true with sums
  // Deterministic dQ at 128: from the first key block up under a causal mask, rotated without
  // one. From the first key block up, every key block of a key group adds at every query block
  // right after the key block before it: at `seed` 1k without a mask (four groups of 256 keys) a
  // chain of four key blocks of 64, which two dQ stages do not hide (H100, deterministic /
  // default speed 0.73, where the key-split kernel's chains of two ran at 0.775; causal 0.87;
  // share/results/h100-2026-12-07-dq-rotated/). Rotated, the group's key blocks meet each
  // query block steps apart (DqSumOrder). Decided before the tensor maps are built.
  const bool deterministic = args.deterministic;  // params.base.dq_semaphores set
  const bool rotated = kHeadDim == 128 && deterministic &&
                       dq_turns_rotate<Traits::kBlockM, Traits::kBlockN>(
                           args, current_device_limits().multiprocessors);
  if (deterministic && (kHeadDim != 128 || (args.mask == Mask::none && !rotated))) return false;
  BackwardTmaParams<Element> params{};
  if (!make_backward_tensor_maps<Traits>(params, args)) return false;
  params.base = backward_params<Element>(args);
  if (!deterministic) {
    launch_column_split_kernels<Element, kHeadDim, DqSumOrder::unordered>(params, args, stream);
    return true;
  }
  if constexpr (kHeadDim == 128) {
    static_assert(ColumnSplitBackwardConfig<kHeadDim, true>::kBlockM == Traits::kBlockM &&
                      ColumnSplitBackwardConfig<kHeadDim, true>::kBlockN == Traits::kBlockN,
                  "the same tensor maps serve both kernels");
    if (rotated) {
      launch_column_split_kernels<Element, kHeadDim, DqSumOrder::rotated>(params, args, stream);
    } else {
      launch_column_split_kernels<Element, kHeadDim, DqSumOrder::first_key_first>(params, args,
                                                                                  stream);
    }
    return true;
  }
  return false;  // not reached: deterministic calls above 128 were turned down above
}

// Whether a head_dim 128 call goes to the column-split kernel (which still refuses what it does
// not run): where the key-split grid (128 keys a CTA) fills at most half the SMs, the 64-key
// CTAs of the column split occupy twice as many SMs in the same single wave (H100, `seed` B = 1,
// H = 8, S = 1k: 64 CTAs against 128, 0.82-0.88x the key-split time in fp16 and bf16, both
// masks). Only below the 80-row blocks' rows (kBlocksOf80FromRows), where it was measured.
inline bool column_split_pays(const AttentionShape& shape) {
  constexpr int64_t kKeySplitKeys = BackwardTraits<128>::kBlockN;
  const int64_t key_split_ctas =
      ceil_div(shape.seq_k, kKeySplitKeys) * shape.batch * shape.heads_kv;
  return shape.seq_q < kBlocksOf80FromRows &&
         2 * key_split_ctas <= current_device_limits().multiprocessors;
}

// The wgmma backward for kHeadDim (one of kWgmmaBackwardHeadDims): key-split up to 128,
// column-split above and at 128 on grids that column_split_pays(); false: the caller runs the
// mma.sync kernel.
template <typename Element, int kHeadDim>
bool launch_backward(const BackwardArgs& args, cudaStream_t stream) {
  if constexpr (kHeadDim > 128) {
    return launch_column_split_backward<Element, kHeadDim>(args, stream);
  } else {
    if constexpr (kHeadDim == 128) {
      if (column_split_pays(args.shape) &&
          launch_column_split_backward<Element, kHeadDim>(args, stream)) {
        return true;
      }
    }
    return launch_key_split_backward<Element, kHeadDim>(args, stream);
  }
}

}  // namespace cuflash::detail::sm90
