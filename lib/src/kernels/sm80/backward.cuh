// FlashAttention-2 backward on the tensor cores with mma.sync: fp16 / bf16 inputs, or fp32
// inputs as split TF32 (mma_ops.cuh); fp32 accumulation.
//
// Three kernels on the caller's stream:
//   1. row_dot:  D_i = rowsum(dO_i * O_i) (fp32) into the workspace; the fp32 dQ accumulator
//                is zeroed with a memset beforehand.
//   2. main:     one CTA per (key block, kv head, batch); K_j, V_j stay in shared memory while
//                the CTA walks every query head of its GQA group and every query block that
//                sees a key of the block (with QuerySplit > 1 the warps of a key group each take
//                a share of every query block and sum dK, dV at the end; block_order()
//                interleaves heads under a causal mask):
//                  S^T  = K_j Q_i^T                      (16 keys x kWarpQueries per warp)
//                  P^T  = exp2(S^T * scale*log2e - LSE_i * log2e), 0 where masked
//                         (kVariants: exp2(mod(S^T) - LSE_i * log2e), score_mod.cuh)
//                  dV_j += P^T dO_i
//                  dP^T = V_j dO_i^T
//                  dS^T = P^T * (dP^T - D_i)          (kVariants: times 1 - tanh^2)
//                  dK_j += dS^T Q_i                      (times scale at the end)
//                  dQ_i += dS K_j                        (fp32 atomics into the accumulator;
//                                                         deterministic mode: in a fixed
//                                                         order, DqSumOrder)
//                Working with the transposes keeps keys on the warps' rows, so P^T and dS^T are
//                A operands straight from registers; dS^T goes through shared memory once more
//                for dQ. dK and dV are summed over the group in registers: deterministic.
//   3. dq_convert: dQ = scale * accumulator, in the output dtype and strides.
// A head_dim below kHeadDim (head_dims.h) loads its missing columns of K, V, Q and dO as zeros,
// so that the same columns of dK, dV and dQ come out zero; they are not stored (the fp32 dQ
// accumulator has kHeadDim columns, workspace.h). With Traits::kColumnSplit > 1 (traits.cuh) a
// CTA computes one column part of dK, dV and dQ: grid x walks (key block, part), part fastest.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/backward_steps.cuh"
#include "kernels/common/copy.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm80/mma_ops.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/sequence.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm80/traits.cuh"

namespace cuflash::detail::sm80 {

// acc = A B^T over the head dimension: A is this warp's 16 rows of `keys` from row0 (K or V),
// B the first 8 * kTiles rows of `queries` (Q or dO); both (rows, kHeadDim) in shared memory.
// The two products of the backward pass that contract over head_dim: S^T and dP^T.
template <typename Element, int kHeadDim, int kTiles, int kStride>
__device__ __forceinline__ void key_rows_times_query_rows(float (&acc)[kTiles][4],
                                                          SmemTile<Element, kStride> keys,
                                                          int row0,
                                                          SmemTile<Element, kStride> queries,
                                                          int lane) {
  using Ops = MmaOps<Element>;
  static_assert(kTiles % 2 == 0, "B fragments are loaded for pairs of n8 tiles");
  zero(acc);
#pragma unroll
  for (int kk = 0; kk < kHeadDim / Ops::kK; ++kk) {
    typename Ops::A a;
    Ops::load_a(a, keys, row0, Ops::kK * kk, lane);
#pragma unroll
    for (int pair = 0; pair < kTiles / 2; ++pair) {
      typename Ops::BPair b;
      Ops::load_b_pair_nk(b, queries, 16 * pair, Ops::kK * kk, lane);
      Ops::mma_pair(acc[2 * pair], acc[2 * pair + 1], a, b);
    }
  }
}

// With QuerySplit > 1 the warps of a key group hold dK and dV summed over their share of the
// query blocks: parts 1.. hand theirs to part 0 through `merge` (shared memory, laid out
// [slot][value][lane]: conflict-free), which adds them up. Called by all warps after a
// __syncthreads; part 0 holds the result.
template <typename Traits, int kDimTiles>
__device__ __forceinline__ void sum_query_parts(float* merge, float (&dk)[kDimTiles][4],
                                                float (&dv)[kDimTiles][4], int key_group,
                                                int query_part, int lane) {
  constexpr int kValues = 2 * kDimTiles * 4;  // per lane
  auto slot = [&](int part) {
    return merge + ((part - 1) * Traits::kKeyGroups + key_group) * kValues * 32 + lane;
  };
  if (query_part != 0) {
    float* out = slot(query_part);
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[(4 * t + i) * 32] = dk[t][i];
        out[(4 * (kDimTiles + t) + i) * 32] = dv[t][i];
      }
    }
  }
  __syncthreads();
  if (query_part != 0) return;
#pragma unroll
  for (int part = 1; part < Traits::kQuerySplit; ++part) {
    const float* in = slot(part);
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        dk[t][i] += in[(4 * t + i) * 32];
        dv[t][i] += in[(4 * (kDimTiles + t) + i) * 32];
      }
    }
  }
}

// kVariants: softcap, ALiBi and left-bounded windows; kDeterministic: ordered dQ sums
// (params.dq_semaphores set), in kDenseOrder (first_key_first, or rotated where
// dq_turns_rotate() allows it); kSums: dK and dV added in fp32 to BackwardArgs::sums (compiled
// with kVariants only). Template flags rather than runtime ones, because the kernels sit at the
// register limit.
template <typename Element, typename Traits, bool kVariants, bool kDeterministic,
          bool kSums = false, DqSumOrder kDenseOrder = DqSumOrder::first_key_first>
__global__ void __launch_bounds__(Traits::kThreads)
    backward_kernel(const BackwardParams<Element> grid_params) {
  using Ops = MmaOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kStages = Traits::kStages;
  constexpr int kStride = Traits::kStride;
  constexpr int kKeySteps = kBlockN / Ops::kK;    // k steps over keys (dQ)
  constexpr int kWarpQueries = Traits::kWarpQueries;  // queries of a block per warp
  constexpr int kQueryTiles = kWarpQueries / 8;        // n8 tiles of S^T, dP^T per warp
  constexpr int kPartCols = Traits::kPartCols;  // columns of dK, dV, dQ this CTA computes
  constexpr int kDimTiles = kPartCols / 8;     // n8 tiles of dK, dV per warp
  constexpr int kDqTiles = Traits::kDqCols / 8;
  using Tile = SmemTile<Element, kStride>;
  using DsTile = SmemTile<Element, Traits::kDsStride>;

  static_assert(kDenseOrder == DqSumOrder::first_key_first ||
                    (kDenseOrder == DqSumOrder::rotated && kDeterministic && !kVariants &&
                     Traits::kColumnSplit == 1),
                "rotated turns wait for later CTAs: one CTA a key block (dq_turns_rotate())");
  constexpr DqSumOrder kSumOrder = kDeterministic ? kDenseOrder : DqSumOrder::unordered;
  BlockOrder order = block_order(grid_params.problem.causal ? int64_t(gridDim.y) : 1);
  const BackwardParams<Element> params = sequence_params(grid_params, order);
  const ProblemParams& p = params.problem;
  const int thread = threadIdx.x;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int part = static_cast<int>(order.block % Traits::kColumnSplit);  // 0 without a split
  order.block /= Traits::kColumnSplit;
  const int col0 = kPartCols * part;  // this CTA's first column of dK, dV and dQ
  const BackwardBlock block = backward_block<kBlockN>(p, params.bh_offset, order);
  if (block.k0 >= p.seq_k) return;  // past the end of a shorter sequence (varlen)
  const int64_t batch = block.batch;
  const int64_t kv_head = block.kv_head;
  const int64_t k0 = block.k0;
  const auto schedule =
      query_block_schedule<kBlockM, kBlockN, kVariants>(p, k0, kSumOrder, params.dq_groups.keys);

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* smem = reinterpret_cast<Element*>(shared_bytes);
  const Tile k_tile{smem};                     // (kBlockN, D); dK staging at the end
  const Tile v_tile{smem + kBlockN * kStride};  // (kBlockN, D); dV staging at the end
  Element* stages = smem + 2 * kBlockN * kStride;
  auto q_tile = [&](int stage) { return Tile{stages + stage * kBlockM * kStride}; };
  auto dout_tile = [&](int stage) {
    return Tile{stages + (kStages + stage) * kBlockM * kStride};
  };  // both (kBlockM, D)
  const DsTile ds_tile{stages + 2 * kStages * kBlockM * kStride};  // (kBlockN, kBlockM): dS^T
  float* float_stages = reinterpret_cast<float*>(smem + Traits::kSmemElements);
  auto lse_stage = [&](int stage) { return float_stages + stage * kBlockM; };  // (kBlockM)
  auto row_dot_stage = [&](int stage) { return float_stages + (kStages + stage) * kBlockM; };

  auto load_query_block = [&](int64_t it, int stage) {
    const int64_t head = schedule.head(p, kv_head, it);
    const int64_t q0 = schedule.q0(p, it);
    load_tile_async<kBlockM, kHeadDim, kThreads>(q_tile(stage),
                                                 params.q.slice(batch, head, p.first_row),
                                                 params.q.seq_stride, q0, p.seq_q, thread,
                                                 p.head_dim);
    load_tile_async<kBlockM, kHeadDim, kThreads>(dout_tile(stage),
                                                 params.dout.slice(batch, head, p.first_row),
                                                 params.dout.seq_stride, q0, p.seq_q, thread,
                                                 p.head_dim);
    if (thread < kBlockM) {
      const int64_t row = q0 + thread;
      if (row < p.seq_q) {
        const int64_t index = p.row_index(batch, head) + row;
        cp_async_4(lse_stage(stage) + thread, params.lse + index);
        cp_async_4(row_dot_stage(stage) + thread, params.row_dot + index);
      } else {  // rows past the end: P = 0 and dS = 0 for them
        lse_stage(stage)[thread] = kEmptyRowLse;
        row_dot_stage(stage)[thread] = 0.f;
      }
    }
  };

  load_tile_async<kBlockN, kHeadDim, kThreads>(k_tile,
                                               params.k.slice(batch, kv_head, p.first_key),
                                               params.k.seq_stride, k0, p.seq_k, thread,
                                               p.head_dim);
  load_tile_async<kBlockN, kHeadDim, kThreads>(v_tile,
                                               params.v.slice(batch, kv_head, p.first_key),
                                               params.v.seq_stride, k0, p.seq_k, thread,
                                               p.head_dim);
  if (schedule.count > 0) load_query_block(0, 0);
  cp_async_commit();

  const int key_group = warp % Traits::kKeyGroups;
  const int query_part = warp / Traits::kKeyGroups;  // which share of every query block
  const int warp_key0 = 16 * key_group;  // this warp's keys (rows of S^T, dK, dV) in the block
  const int warp_query0 = kWarpQueries * query_part;  // its queries within a query block
  int64_t fragment_key[2];          // keys of this thread's fragment rows group, group + 8
  fragment_key[0] = k0 + warp_key0 + lane / 4;
  fragment_key[1] = fragment_key[0] + 8;
  const int dq_row0 = 16 * (warp % Traits::kDqWarpsM);                // this warp's dQ tile
  const int dq_col0 = col0 + Traits::kDqCols * (warp / Traits::kDqWarpsM);
  float dk_acc[kDimTiles][4];  // dK (16, kPartCols from col0) of this warp, without the scale
  float dv_acc[kDimTiles][4];  // dV (16, kPartCols from col0) of this warp
  zero(dk_acc);
  zero(dv_acc);

  for (int64_t it = 0; it < schedule.count; ++it) {
    const int stage = static_cast<int>(it % kStages);
    cp_async_wait<0>();
    __syncthreads();  // this query block landed; every warp is done with the previous one
    if (it + 1 < schedule.count) load_query_block(it + 1, (stage + 1) % kStages);
    cp_async_commit();

    const int64_t head = schedule.head(p, kv_head, it);
    const int64_t q0 = schedule.q0(p, it);
    const Tile q_s{q_tile(stage).at(warp_query0, 0)};        // this warp's queries
    const Tile dout_s{dout_tile(stage).at(warp_query0, 0)};
    const Tile q_part{q_s.at(0, col0)};  // their columns of this CTA's part
    const Tile dout_part{dout_s.at(0, col0)};
    const float* lse_s = lse_stage(stage) + warp_query0;
    const float* row_dot_s = row_dot_stage(stage) + warp_query0;

    // S^T = K Q^T: (16 keys, kWarpQueries queries) per warp
    float st[kQueryTiles][4];
    key_rows_times_query_rows<Element, kHeadDim>(st, k_tile, warp_key0, q_s, lane);

    // P^T, with the columns the mask hides or past the end of the keys set to 0.
    const int64_t warp_q0 = q0 + warp_query0;
    const bool masked = needs_mask<kVariants>(p, warp_q0, kWarpQueries, k0, kBlockN);
    [[maybe_unused]] float softcap_slope[kVariants ? kQueryTiles : 1][4];
    [[maybe_unused]] const ScoreModFor<Element> mod =
        kVariants ? score_mod<Element>(p, batch, head) : ScoreModFor<Element>{};
    if constexpr (kVariants) {
      modified_probabilities_transposed(st, lse_s, mod, warp_q0 + p.offset - fragment_key[0],
                                        lane, [&](int t, int i, float slope) {
                                          softcap_slope[t][i] = slope;  // dP^T comes later
                                        });
      if (masked) {
        hide_columns(st, visible_columns<true, kWarpQueries>(p, true, fragment_key, warp_q0),
                     lane);
      }
    } else {
      probabilities_transposed(
          st, lse_s, p.scale_log2,
          visible_columns<false, kWarpQueries>(p, masked, fragment_key, warp_q0), lane);
    }

    // dV += P^T dO: (16 keys, kPartCols)
    add_product_of_accumulators<1>(dv_acc, st, dout_part, lane);

    // dP^T = V dO^T: (16 keys, kWarpQueries queries)
    float dpt[kQueryTiles][4];
    key_rows_times_query_rows<Element, kHeadDim>(dpt, v_tile, warp_key0, dout_s, lane);

    score_gradients_transposed(st, st, dpt, row_dot_s, lane);  // st now holds dS^T
    if constexpr (kVariants) {
      if (mod.kind() == ScoreModKind::softcap) multiply_elementwise(st, softcap_slope);
    }

    // dK += dS^T Q: (16 keys, kPartCols)
    add_product_of_accumulators<1>(dk_acc, st, q_part, lane);

    // dQ needs dS with queries on the rows: go through shared memory.
    const float unit[2] = {1.f, 1.f};
    store_accumulators(DsTile{ds_tile.at(0, warp_query0)}, st, warp_key0, unit, lane);
    __syncthreads();

    // Deterministic mode: thread 0 reads the turn's semaphore now, so that the read's round trip
    // runs with the dQ product below (a turn found passed then needs no wait).
    const int key_block = int(k0 / kBlockN);
    const int group = kDeterministic ? dq_group<kBlockN>(params, key_block) : 0;
    int* semaphore = kDeterministic ? dq_semaphore<kBlockM>(dq_group_semaphores(params, group), p,
                                                            batch, head, q0)
                                    : nullptr;
    const int seen = kDeterministic && thread == 0 ? load_relaxed(semaphore) : 0;

    // dQ(q0.., :) += dS K: warp tile (16 queries, kDqCols)
    float dq_acc[kDqTiles][4];
    zero(dq_acc);
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      typename Ops::A a;
      Ops::load_a_transposed(a, ds_tile, dq_row0, Ops::kK * kk, lane);
#pragma unroll
      for (int pair = 0; pair < kDqTiles / 2; ++pair) {
        typename Ops::BPair b;
        Ops::load_b_pair_kn(b, k_tile, Ops::kK * kk, dq_col0 + 16 * pair, lane);
        Ops::mma_pair(dq_acc[2 * pair], dq_acc[2 * pair + 1], a, b);
      }
    }
    const int turn =
        kSumOrder == DqSumOrder::rotated
            ? dq_turn_rotated(schedule, q0)
            : dq_turn_from_first<kBlockN>(p, q0, key_block, dq_group_begin(params, group));
    const bool store = kDeterministic && params.dq_groups.first_turn_stores && turn == 0;
    add_dq_in_turn(semaphore, turn, Traits::kColumnSplit, thread, seen, [&] {
      add_to_dq_accumulator<kHeadDim>(
          dq_group_accumulator(params, group) + p.row_index(batch, head) * kHeadDim, dq_acc,
          q0 + dq_row0, dq_col0, p.seq_q, lane, store);
    });
  }

  // Epilogue: stage dK (scaled) and dV in the K and V tiles, then write whole rows.
  cp_async_wait<0>();
  __syncthreads();  // every warp is done reading K, V and the Q / dO stages
  if constexpr (Traits::kQuerySplit > 1) {
    sum_query_parts<Traits>(reinterpret_cast<float*>(stages), dk_acc, dv_acc, key_group,
                            query_part, lane);
  }
  if constexpr (kSums) {  // BackwardArgs::sums: fp32, from the registers
    if (query_part == 0) {
      const int cols = p.head_dim - col0;
      add_accumulators_to_sum(params.dk_sum.slice(batch, kv_head) + col0,
                              params.dk_sum.seq_stride, k0 + warp_key0, p.seq_k, cols, dk_acc,
                              p.scale, lane);
      add_accumulators_to_sum(params.dv_sum.slice(batch, kv_head) + col0,
                              params.dv_sum.seq_stride, k0 + warp_key0, p.seq_k, cols, dv_acc,
                              1.f, lane);
    }
    return;
  }
  const Tile dk_stage{k_tile.at(0, col0)};  // (kBlockN, kPartCols)
  const Tile dv_stage{v_tile.at(0, col0)};
  if (query_part == 0) {
    const float scale[2] = {p.scale, p.scale};
    const float unit[2] = {1.f, 1.f};
    store_accumulators(dk_stage, dk_acc, warp_key0, scale, lane);
    store_accumulators(dv_stage, dv_acc, warp_key0, unit, lane);
  }
  __syncthreads();
  // Columns [col0, col0 + kPartCols) below head_dim (none when the part is all padding).
  const int stored_cols = p.head_dim - col0;
  store_tile<kBlockN, kPartCols, kThreads>(params.dk.slice(batch, kv_head, p.first_key) + col0,
                                           params.dk.seq_stride, k0, p.seq_k, dk_stage, thread,
                                           stored_cols);
  store_tile<kBlockN, kPartCols, kThreads>(params.dv.slice(batch, kv_head, p.first_key) + col0,
                                           params.dv.seq_stride, k0, p.seq_k, dv_stage, thread,
                                           stored_cols);
}

// Launches the prologue, backward_kernel with the tile shapes of Traits, and the dQ conversion
// (kVariants: the instantiation for softcap, ALiBi and left-bounded windows;
// uses_variant_kernels(args) must agree).
template <typename Element, typename Traits, bool kVariants>
void launch_backward(const BackwardArgs& args, cudaStream_t stream) {
  constexpr int kHeadDim = Traits::kHeadDim;
  const AttentionShape& shape = args.shape;
  BackwardParams<Element> params = backward_params<Element>(args);
  params.num_n_blocks = ceil_div(shape.seq_k, Traits::kBlockN);

  launch_backward_prologue<Element, kHeadDim>(params, stream);

  auto* kernel = params.dq_semaphores != nullptr
                     ? &backward_kernel<Element, Traits, kVariants, true>
                     : &backward_kernel<Element, Traits, kVariants, false>;
  // Rotated dQ turns (dq_turns_rotate()): compiled for fp32 alone, the inputs that run these
  // kernels on Hopper, where it was measured (H100, `seed` fp32 1k without a mask: 0.87-0.91x
  // the default's speed, 0.83-0.85x from the first key block up;
  // share/results/h100-2026-12-07-dq-rotated-groups/).
  if constexpr (std::is_same_v<Element, float> && !kVariants && Traits::kColumnSplit == 1) {
    const int multiprocessors = current_device_limits().multiprocessors;
    if (dq_turns_rotate<Traits::kBlockM, Traits::kBlockN>(args, multiprocessors)) {
      kernel = &backward_kernel<Element, Traits, false, true, false, DqSumOrder::rotated>;
    }
  }
  if constexpr (kVariants) {  // sums take the variant kernels (uses_variant_kernels())
    if (args.sums.enabled()) {
      kernel = params.dq_semaphores != nullptr
                   ? &backward_kernel<Element, Traits, true, true, true>
                   : &backward_kernel<Element, Traits, true, false, true>;
    }
  }
  const size_t smem_bytes = Traits::smem_bytes(sizeof(Element));
  allow_dynamic_smem(kernel, smem_bytes);
  for_each_grid_y_chunk(shape.batch * shape.heads_kv, [&](int64_t offset, unsigned count) {
    params.bh_offset = offset;
    const dim3 grid(static_cast<unsigned>(params.num_n_blocks * Traits::kColumnSplit), count);
    launch_kernel(kernel, grid, Traits::kThreads, smem_bytes, stream, params);
  });
  launch_backward_dq_convert<Element, kHeadDim>(params, stream);
}

}  // namespace cuflash::detail::sm80
