// FlashAttention-2 forward on the tensor cores (fp16 / bf16 inputs, fp32 accumulation).
//
// One CTA per (query block, head, batch); each warp owns 16 * kMTiles query rows. Per CTA:
//   Q (kBlockM, D) -> shared memory once (and into registers as A fragments when they fit)
//   for each key block j visible to the block (K_j, V_j (kBlockN, D) double-buffered):
//     S = Q K_j^T                       (fp32, 16 x kBlockN per m tile)
//     mask S on blocks that cross the causal diagonal or the end of the keys
//     m_new = max(m, rowmax(S)); P = exp2(S * scale * log2e - m_new)
//     l = l * exp2(m - m_new) + rowsum(P)
//     O = O * exp2(m - m_new) + P V_j   (P reused in registers as the A operand)
//   O /= l, LSE = (m + log2 l) * ln 2
// No atomics: the result is bitwise reproducible.
#pragma once

#include <cstdint>

#include "kernels/copy.cuh"
#include "kernels/launch_util.cuh"
#include "kernels/mask.cuh"
#include "kernels/mma.cuh"
#include "kernels/params.cuh"
#include "kernels/sm90/forward_sm90.cuh"
#include "kernels/softmax.cuh"
#include "kernels/traits.cuh"
#include "launch.h"

namespace cuflash::detail {

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(ForwardTraits<kHeadDim>::kThreads)
    forward_kernel(const ForwardParams<Element> params) {
  using Traits = ForwardTraits<kHeadDim>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kStages = Traits::kStages;
  constexpr int kStride = Traits::kStride;
  constexpr int kMTiles = Traits::kMTiles;   // m16 tiles (16 query rows each) per warp
  constexpr int kDimSteps = kHeadDim / 16;   // k16 steps of Q K^T
  constexpr int kKeySteps = kBlockN / 16;    // k16 steps of P V
  constexpr int kScoreTiles = kBlockN / 8;   // n8 tiles of S per m tile
  constexpr int kOutTiles = kHeadDim / 8;    // n8 tiles of O per m tile
  using Tile = SmemTile<Element, kStride>;

  const ProblemParams& p = params.problem;
  const int thread = threadIdx.x;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int64_t bh = params.bh_offset + blockIdx.y;  // batch * heads + head
  const int64_t batch = bh / p.heads;
  const int64_t head = bh % p.heads;
  const int64_t kv_head = head / p.heads_per_kv;
  // Heaviest query blocks first: under a causal mask the last rows see the most keys.
  const int64_t q0 = (params.num_m_blocks - 1 - blockIdx.x) * kBlockM;

  const Element* q = params.q.slice(batch, head);      // [Sq, D]
  const Element* k = params.k.slice(batch, kv_head);   // [Sk, D]
  const Element* v = params.v.slice(batch, kv_head);   // [Sk, D]
  Element* out = params.out.slice(batch, head);        // [Sq, D]
  float* lse = params.lse + bh * p.seq_q;              // [Sq]

  // Keys [0, key_end) are visible to at least one row of this block.
  const int64_t key_end =
      p.causal ? min64(p.seq_k, q0 + kBlockM + p.causal_offset) : p.seq_k;
  if (key_end <= 0) {  // every row of the block sees no key: O = 0, LSE = +inf
    store_zero_rows<kBlockM, kHeadDim, kThreads>(out, params.out.seq_stride, q0, p.seq_q, thread);
    if (thread < kBlockM && q0 + thread < p.seq_q) lse[q0 + thread] = kEmptyRowLse;
    return;
  }
  const int64_t num_key_blocks = (key_end + kBlockN - 1) / kBlockN;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* smem = reinterpret_cast<Element*>(shared_bytes);
  const Tile q_tile{smem};  // (kBlockM, D); holds the O tile in the epilogue
  auto k_tile = [&](int stage) { return Tile{smem + (kBlockM + stage * kBlockN) * kStride}; };
  auto v_tile = [&](int stage) {
    return Tile{smem + (kBlockM + (kStages + stage) * kBlockN) * kStride};
  };  // both (kBlockN, D)
  auto load_key_block = [&](int64_t key_block, int stage) {
    const int64_t k0 = key_block * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads>(k_tile(stage), k, params.k.seq_stride, k0,
                                                 p.seq_k, thread);
    load_tile_async<kBlockN, kHeadDim, kThreads>(v_tile(stage), v, params.v.seq_stride, k0,
                                                 p.seq_k, thread);
  };

  load_tile_async<kBlockM, kHeadDim, kThreads>(q_tile, q, params.q.seq_stride, q0, p.seq_q,
                                               thread);
  load_key_block(0, 0);
  cp_async_commit();

  const int warp_row0 = Traits::kWarpRows * warp;  // this warp's rows within the block
  const int64_t fragment_row = q0 + warp_row0 + lane / 4;  // query of row `group`, m tile 0
  // Q (16 * kMTiles, D) of this warp as A fragments: kept in registers when they fit,
  // otherwise read from the Q tile again at every k step.
  constexpr int kHeldMTiles = Traits::kQInRegisters ? kMTiles : 1;
  constexpr int kHeldSteps = Traits::kQInRegisters ? kDimSteps : 1;
  uint32_t q_fragments[kHeldMTiles][kHeldSteps][4];
  float o_acc[kMTiles][kOutTiles][4];  // O (16, D) per m tile, unnormalized
  OnlineSoftmax softmax[kMTiles];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) zero(o_acc[mi]);

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
            load_a(q_fragments[mi][kk], q_tile, warp_row0 + 16 * mi, 16 * kk, lane);
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
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        if constexpr (Traits::kQInRegisters) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mi][i] = q_fragments[mi][kk][i];
        } else {
          load_a(a[mi], q_tile, warp_row0 + 16 * mi, 16 * kk, lane);
        }
      }
#pragma unroll
      for (int pair = 0; pair < kScoreTiles / 2; ++pair) {
        uint32_t b[4];
        load_b_pair_nk(b, k_tile(stage), 16 * pair, 16 * kk, lane);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16x8x16<Element>(s[mi][2 * pair], a[mi], b[0], b[1]);
          mma_16x8x16<Element>(s[mi][2 * pair + 1], a[mi], b[2], b[3]);
        }
      }
    }

    const int64_t k0 = key_block * kBlockN;
    const bool crosses_end = k0 + kBlockN > p.seq_k;
    const bool crosses_diagonal = p.causal && k0 + kBlockN - 1 > q0 + p.causal_offset;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      if (crosses_end || crosses_diagonal) mask_scores(s[mi], p, k0, fragment_row + 16 * mi, lane);
      softmax[mi].update(s[mi], o_acc[mi], p.scale_log2);  // s now holds P
    }

    // O += P V: (16, D) per m tile
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        accumulators_to_a<Element>(a[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
      }
#pragma unroll
      for (int pair = 0; pair < kOutTiles / 2; ++pair) {
        uint32_t b[4];
        load_b_pair_kn(b, v_tile(stage), 16 * kk, 16 * pair, lane);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_16x8x16<Element>(o_acc[mi][2 * pair], a[mi], b[0], b[1]);
          mma_16x8x16<Element>(o_acc[mi][2 * pair + 1], a[mi], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: normalize, stage O in the Q tile (each warp overwrites only the rows it read;
  // __syncwarp orders its lanes' ldmatrix reads before the writes), then write whole rows
  // with 16-byte stores.
  cp_async_wait<0>();
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
  __syncthreads();
  store_tile<kBlockM, kHeadDim, kThreads>(out, params.out.seq_stride, q0, p.seq_q, q_tile, thread);
}

template <typename Element, int kHeadDim>
void launch_forward_tc(const ForwardArgs& args, cudaStream_t stream) {
  if constexpr (kHasForwardSm90<kHeadDim>) {
    if (use_sm90_kernels() && launch_forward_sm90<Element, kHeadDim>(args, stream)) return;
  }
  using Traits = ForwardTraits<kHeadDim>;
  ForwardParams<Element> params{};
  params.problem = problem_params(args.shape, args.mask, args.scale);
  params.q = global_tensor<const Element>(args.q);
  params.k = global_tensor<const Element>(args.k);
  params.v = global_tensor<const Element>(args.v);
  params.out = global_tensor<Element>(args.out);
  params.lse = args.lse;
  params.num_m_blocks = ceil_div(args.shape.seq_q, Traits::kBlockM);

  auto* kernel = &forward_kernel<Element, kHeadDim>;
  const size_t smem_bytes = Traits::smem_bytes(sizeof(Element));
  allow_dynamic_smem(kernel, smem_bytes);
  for_each_grid_y_chunk(args.shape.batch * args.shape.heads, [&](int64_t offset, unsigned count) {
    params.bh_offset = offset;
    const dim3 grid(static_cast<unsigned>(params.num_m_blocks), count);
    launch_kernel(kernel, grid, Traits::kThreads, smem_bytes, stream, params);
  });
}

}  // namespace cuflash::detail
