// FlashAttention-2 forward on the tensor cores with mma.sync: fp16 / bf16 inputs, or fp32 inputs
// as split TF32 (mma_ops.cuh); fp32 accumulation.
//
// One CTA per (query block, head, batch); each warp owns 16 * kMTiles query rows (with
// KeySplit > 1, the warps of a row group each take a share of every key block and merge their
// softmax states at the end; block_order() interleaves heads under a causal mask). Per CTA:
//   Q (kBlockM, D) -> shared memory once (and into registers as A fragments when they fit)
//   for each key block j visible to the block (K_j, V_j (kBlockN, D) double-buffered):
//     S = Q K_j^T                       (fp32, 16 x kBlockN per m tile)
//     kVariants: softcap and ALiBi on S, into log2 units (score_mod.cuh)
//     mask S on blocks that cross the band (causal mask, window) or the end of the keys
//     m_new = max(m, rowmax(S)); P = exp2(S * scale * log2e - m_new)
//     l = l * exp2(m - m_new) + rowsum(P)
//     O = O * exp2(m - m_new) + P V_j   (P reused in registers as the A operand)
//   O /= l, LSE = (m + log2 l) * ln 2
// A head_dim below kHeadDim (head_dims.h) loads its missing columns of Q, K and V as zeros:
// they add nothing to S, and the zero columns of O are not stored.
// No atomics: the result is bitwise reproducible.
#pragma once

#include <cstdint>

#include "kernels/common/copy.cuh"
#include "kernels/common/launch_util.cuh"
#include "kernels/common/mask.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm80/mma_ops.cuh"
#include "kernels/common/params.cuh"
#include "kernels/common/schedule.cuh"
#include "kernels/common/score_mod.cuh"
#include "kernels/common/sequence.cuh"
#include "kernels/common/softmax.cuh"
#include "kernels/sm80/traits.cuh"

namespace cuflash::detail::sm80 {

// With KeySplit > 1 the warps of a row group have each seen a share of the keys: parts 1.. hand
// their running max, sum and unnormalized O to part 0 through `merge` (shared memory, laid out
// [slot][value][lane] so that every access is conflict-free), and part 0 rescales everything to
// the common max. Called by all warps after a __syncthreads; part 0 holds the result.
template <typename Traits, int kMTiles, int kOutTiles>
__device__ __forceinline__ void merge_key_parts(float* merge, OnlineSoftmax (&softmax)[kMTiles],
                                                float (&o_acc)[kMTiles][kOutTiles][4],
                                                int row_group, int key_part, int lane) {
  constexpr int kValues = kMTiles * (kOutTiles * 4 + 4);  // per lane
  auto slot = [&](int part) {
    return merge + ((part - 1) * Traits::kRowGroups + row_group) * kValues * 32 + lane;
  };
  if (key_part != 0) {
    float* out = slot(key_part);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      float* values = out + mi * (kOutTiles * 4 + 4) * 32;
#pragma unroll
      for (int t = 0; t < kOutTiles; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) values[(4 * t + i) * 32] = o_acc[mi][t][i];
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        values[(4 * kOutTiles + half) * 32] = softmax[mi].row_max[half];
        values[(4 * kOutTiles + 2 + half) * 32] = softmax[mi].row_sum[half];
      }
    }
  }
  __syncthreads();
  if (key_part != 0) return;
#pragma unroll
  for (int part = 1; part < Traits::kKeySplit; ++part) {
    const float* in = slot(part);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      const float* values = in + mi * (kOutTiles * 4 + 4) * 32;
      float own_factor[2];
      float other_factor[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float other_max = values[(4 * kOutTiles + half) * 32];
        const float other_sum = values[(4 * kOutTiles + 2 + half) * 32];
        float& own_max = softmax[mi].row_max[half];
        const float new_max = fmaxf(own_max, other_max);
        // Both -inf (no visible key in either share): keep factors finite (0).
        const float reference = new_max == kMaskedScore ? 0.f : new_max;
        own_factor[half] = fast_exp2(own_max - reference);
        other_factor[half] = fast_exp2(other_max - reference);
        own_max = new_max;
        softmax[mi].row_sum[half] =
            softmax[mi].row_sum[half] * own_factor[half] + other_sum * other_factor[half];
      }
#pragma unroll
      for (int t = 0; t < kOutTiles; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          o_acc[mi][t][i] = o_acc[mi][t][i] * own_factor[i / 2] +
                            values[(4 * t + i) * 32] * other_factor[i / 2];
        }
      }
    }
  }
}

template <typename Element, typename Traits, bool kVariants>
__global__ void __launch_bounds__(Traits::kThreads)
    forward_kernel(const ForwardParams<Element> grid_params) {
  using Ops = MmaOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kStages = Traits::kStages;
  constexpr int kStride = Traits::kStride;
  constexpr int kMTiles = Traits::kMTiles;   // m16 tiles (16 query rows each) per warp
  constexpr int kWarpKeys = Traits::kWarpKeys;   // keys of a block per warp
  constexpr int kDimSteps = kHeadDim / Ops::kK;  // k steps of Q K^T
  constexpr int kScoreTiles = kWarpKeys / 8;     // n8 tiles of S per m tile
  constexpr int kOutTiles = kHeadDim / 8;    // n8 tiles of O per m tile
  using Tile = SmemTile<Element, kStride>;

  const BlockOrder order = block_order(grid_params.problem.causal ? int64_t(gridDim.y) : 1);
  const ForwardParams<Element> params = sequence_params(grid_params, order);
  const ProblemParams& p = params.problem;
  const int64_t num_m_blocks = (p.seq_q + kBlockM - 1) / kBlockM;  // of the CTA's sequence
  if (order.block >= num_m_blocks) return;  // past the end of a shorter sequence (varlen)
  const int thread = threadIdx.x;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const ForwardBlock block =
      forward_block<kBlockM, kBlockN, kVariants>(p, params.bh_offset, num_m_blocks, order);
  const int64_t q0 = block.q0;
  const Element* q = params.q.slice(block.batch, block.head, p.first_row);     // [Sq, D]
  const Element* k = params.k.slice(block.batch, block.kv_head, p.first_key);  // [Sk, D]
  const Element* v = params.v.slice(block.batch, block.kv_head, p.first_key);  // [Sk, D]
  Element* out = params.out.slice(block.batch, block.head, p.first_row);        // [Sq, D]
  float* lse = params.lse + p.row_index(block.batch, block.head);  // [Sq]
  if (block.key_blocks == 0) {
    store_empty_block<kBlockM, kHeadDim, kThreads>(out, params.out.seq_stride, lse, q0, p.seq_q,
                                                   thread, p.head_dim);
    return;
  }
  const int64_t num_key_blocks = block.key_blocks;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* smem = reinterpret_cast<Element*>(shared_bytes);
  const Tile q_tile{smem};  // (kBlockM, D); holds the O tile in the epilogue
  auto k_tile = [&](int stage) { return Tile{smem + (kBlockM + stage * kBlockN) * kStride}; };
  auto v_tile = [&](int stage) {
    return Tile{smem + (kBlockM + (kStages + stage) * kBlockN) * kStride};
  };  // both (kBlockN, D)
  // The it-th key block visited, keys from key_start(it).
  auto key_start = [&](int64_t it) { return (block.first_key_block + it) * kBlockN; };
  auto load_key_block = [&](int64_t it, int stage) {
    const int64_t k0 = key_start(it);
    load_tile_async<kBlockN, kHeadDim, kThreads>(k_tile(stage), k, params.k.seq_stride, k0,
                                                 p.seq_k, thread, p.head_dim);
    load_tile_async<kBlockN, kHeadDim, kThreads>(v_tile(stage), v, params.v.seq_stride, k0,
                                                 p.seq_k, thread, p.head_dim);
  };

  load_tile_async<kBlockM, kHeadDim, kThreads>(q_tile, q, params.q.seq_stride, q0, p.seq_q,
                                               thread, p.head_dim);
  load_key_block(0, 0);
  cp_async_commit();

  const int row_group = warp % Traits::kRowGroups;
  const int key_part = warp / Traits::kRowGroups;       // which share of every key block
  const int warp_row0 = Traits::kWarpRows * row_group;  // this warp's rows within the block
  const int warp_key0 = kWarpKeys * key_part;           // its keys within a key block
  const int64_t fragment_row = q0 + warp_row0 + lane / 4;  // query of row `group`, m tile 0
  // Q (16 * kMTiles, D) of this warp as A fragments: kept in registers when they fit,
  // otherwise read from the Q tile again at every k step.
  constexpr int kHeldMTiles = Traits::kQInRegisters ? kMTiles : 1;
  constexpr int kHeldSteps = Traits::kQInRegisters ? kDimSteps : 1;
  typename Ops::A q_fragments[kHeldMTiles][kHeldSteps];
  float o_acc[kMTiles][kOutTiles][4];  // O (16, D) per m tile, unnormalized
  OnlineSoftmax softmax[kMTiles];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) zero(o_acc[mi]);
  const ForwardScoreModFor<Element> mod =
      kVariants ? forward_score_mod<Element>(p, block.batch, block.head)
                : ForwardScoreModFor<Element>{};
  // Modified scores are in the mod's units (scale_log2 where they stay raw).
  const float softmax_scale = kVariants ? mod.unit : p.scale_log2;
  const bool modifies = kVariants && mod.kind() != ForwardScoreModKind::none;

  for (int64_t key_block = 0; key_block < num_key_blocks; ++key_block) {
    const int stage = static_cast<int>(key_block % kStages);
    cp_async_wait<0>();
    __syncthreads();  // this block's K/V landed; every warp is done with the other stage
    if constexpr (Traits::kQInRegisters) {
      if (key_block == 0) {
#pragma unroll
        for (int mi = 0; mi < kHeldMTiles; ++mi) {
#pragma unroll
          for (int kk = 0; kk < kHeldSteps; ++kk) {
            Ops::load_a(q_fragments[mi][kk], q_tile, warp_row0 + 16 * mi, Ops::kK * kk, lane);
          }
        }
      }
    }
    if (key_block + 1 < num_key_blocks) load_key_block(key_block + 1, (stage + 1) % kStages);
    cp_async_commit();

    // S = Q K^T: (16, kBlockN) per m tile
    float s[kMTiles][kScoreTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) zero(s[mi]);
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
      typename Ops::A a[kMTiles];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        if constexpr (Traits::kQInRegisters) {
          a[mi] = q_fragments[mi][kk];
        } else {
          Ops::load_a(a[mi], q_tile, warp_row0 + 16 * mi, Ops::kK * kk, lane);
        }
      }
#pragma unroll
      for (int pair = 0; pair < kScoreTiles / 2; ++pair) {
        typename Ops::BPair b;
        Ops::load_b_pair_nk(b, k_tile(stage), warp_key0 + 16 * pair, Ops::kK * kk, lane);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          Ops::mma_pair(s[mi][2 * pair], s[mi][2 * pair + 1], a[mi], b);
        }
      }
    }

    const int64_t k0 = key_start(key_block) + warp_key0;
    const bool masked = needs_mask<kVariants>(p, q0, kBlockM, k0, kWarpKeys);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      if (modifies) modify_scores(s[mi], mod, p, k0, fragment_row + 16 * mi, lane);
      if (masked) mask_scores<kVariants>(s[mi], p, k0, fragment_row + 16 * mi, lane);
      softmax[mi].update(s[mi], o_acc[mi], softmax_scale);  // s now holds P
    }

    // O += P V: (16, D) per m tile
    const Tile v_part{v_tile(stage).at(warp_key0, 0)};
    add_product_of_accumulators<Traits::kPvStagePairs>(o_acc, s, v_part, lane);
  }

  cp_async_wait<0>();
  if constexpr (Traits::kKeySplit > 1) {
    __syncthreads();  // every warp is done with Q and the K/V stages
    float* merge = reinterpret_cast<float*>(smem + kBlockM * kStride);  // over the K/V stages
    merge_key_parts<Traits>(merge, softmax, o_acc, row_group, key_part, lane);
    if (key_part != 0) return;  // no barrier follows that it would have to join
  }

  // Epilogue: normalize, stage O in the Q tile (each warp overwrites only the rows it read;
  // __syncwarp orders its lanes' reads of Q before the writes), then write whole rows
  // with 16-byte stores.
  __syncwarp();
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
    float normalizer[2];
    float row_lse[2];
    softmax[mi].finish(normalizer, row_lse);
    store_accumulators(q_tile, o_acc[mi], warp_row0 + 16 * mi, normalizer, lane);
    if (lane % 4 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = fragment_row + 16 * mi + 8 * half;
        if (row < p.seq_q) lse[row] = row_lse[half];
      }
    }
  }
  named_barrier_sync(kComputeBarrier, Traits::kRowGroups * 32);  // the warps of key part 0 (all without a split)
  store_tile<kBlockM, kHeadDim, Traits::kRowGroups * 32>(out, params.out.seq_stride, q0, p.seq_q,
                                                         q_tile, thread, p.head_dim);
}

// Launches forward_kernel with the tile shapes of Traits (kVariants: the instantiation for
// softcap, ALiBi and left-bounded windows; uses_variant_kernels(args) must agree).
template <typename Element, typename Traits, bool kVariants>
void launch_forward(const ForwardArgs& args, cudaStream_t stream) {
  ForwardParams<Element> params{};
  params.problem = problem_params(args);
  params.q = global_tensor<const Element>(args.q);
  params.k = global_tensor<const Element>(args.k);
  params.v = global_tensor<const Element>(args.v);
  params.out = global_tensor<Element>(args.out);
  params.lse = args.lse;
  params.num_m_blocks = ceil_div(args.shape.seq_q, Traits::kBlockM);

  auto* kernel = &forward_kernel<Element, Traits, kVariants>;
  const size_t smem_bytes = Traits::smem_bytes(sizeof(Element));
  allow_dynamic_smem(kernel, smem_bytes);
  for_each_grid_y_chunk(args.shape.batch * args.shape.heads, [&](int64_t offset, unsigned count) {
    params.bh_offset = offset;
    const dim3 grid(static_cast<unsigned>(params.num_m_blocks), count);
    launch_kernel(kernel, grid, Traits::kThreads, smem_bytes, stream, params);
  });
}

}  // namespace cuflash::detail::sm80
