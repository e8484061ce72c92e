// The operand policy of the mma.sync kernels: how a k step of a product is loaded from shared
// memory and multiplied, per element type. The kernels are written once against this interface:
//   kK                            k of one step (16 for fp16/bf16, 8 for fp32)
//   A, BPair                      operand fragments: A is 16 x kK; BPair is kK x 16 (two n8 tiles)
//   load_a(a, tile, m0, k0)       A from a row-major [m][k] tile          (e.g. Q, K, V rows)
//   load_a_transposed(...)        A from a tile stored as [k][m]           (dS^T for dS K)
//   load_b_pair_nk(b, tile, n0, k0)   B = tile^T, tile stored as [n][k]    (K for Q K^T)
//   load_b_pair_kn(b, tile, k0, n0)   B = tile,   tile stored as [k][n]    (V for P V)
//   accumulators_to_a(a, acc, kk) A = columns kK*kk.. of a 16-row fp32 accumulator block (P, dS)
//   mma_pair(c0, c1, a, b)        c0 += a * b's first n8 tile, c1 += a * its second
//
// fp32 runs on the TF32 tensor cores with split operands (x = big + small, three products per
// product; see split_tf32), which keeps each product within about 2^-20 of the exact one.
// The k order inside one TF32 step is free as long as A and B agree: [m][k] / [n][k] loads keep
// it (conflict-free scalar reads with a row pitch of 4 mod 32 words), while accumulator, [k][m]
// and [k][n] operands use the order (0, 2, 4, 6 | 1, 3, 5, 7), in which an accumulator's two
// adjacent columns become a0/a2 of one thread without shuffles and the strided reads are
// conflict-free too. The kernels only ever pair load_a with load_b_pair_nk, and the other three
// with each other.
#pragma once

#include <cstdint>

#include "kernels/sm80/mma.cuh"
#include "kernels/common/ptx.cuh"

namespace cuflash::detail::sm80 {

// fp16 / bf16: m16n8k16, ldmatrix loads.
template <typename Element>
struct MmaOps {
  static constexpr int kK = 16;
  static constexpr bool kStagedSums = false;  // see add_product_of_accumulators
  struct A {
    uint32_t reg[4];
  };
  struct BPair {
    uint32_t reg[4];  // {b0, b1} of the first n8 tile, then of the second
  };

  template <typename Tile>
  static __device__ __forceinline__ void load_a(A& a, Tile tile, int m0, int k0, int lane) {
    sm80::load_a(a.reg, tile, m0, k0, lane);
  }
  template <typename Tile>
  static __device__ __forceinline__ void load_a_transposed(A& a, Tile tile, int m0, int k0,
                                                           int lane) {
    sm80::load_a_transposed(a.reg, tile, m0, k0, lane);
  }
  template <typename Tile>
  static __device__ __forceinline__ void load_b_pair_nk(BPair& b, Tile tile, int n0, int k0,
                                                        int lane) {
    sm80::load_b_pair_nk(b.reg, tile, n0, k0, lane);
  }
  template <typename Tile>
  static __device__ __forceinline__ void load_b_pair_kn(BPair& b, Tile tile, int k0, int n0,
                                                        int lane) {
    sm80::load_b_pair_kn(b.reg, tile, k0, n0, lane);
  }
  template <int kTiles>
  static __device__ __forceinline__ void accumulators_to_a(A& a, const float (&acc)[kTiles][4],
                                                           int kk) {
    detail::accumulators_to_a<Element>(a.reg, acc[2 * kk], acc[2 * kk + 1]);
  }
  static __device__ __forceinline__ void mma_pair(float (&c0)[4], float (&c1)[4], const A& a,
                                                  const BPair& b) {
    mma_16x8x16<Element>(c0, a.reg, b.reg[0], b.reg[1]);
    mma_16x8x16<Element>(c1, a.reg, b.reg[2], b.reg[3]);
  }
};

// fp32: m16n8k8 TF32 with split operands, scalar shared-memory loads.
template <>
struct MmaOps<float> {
  static constexpr int kK = 8;
  static constexpr bool kStagedSums = true;
  struct A {
    uint32_t big[4];
    uint32_t small[4];
  };
  struct BPair {
    uint32_t big[4];  // {b0, b1} of the first n8 tile, then of the second
    uint32_t small[4];
  };

  template <int kStride>
  static __device__ __forceinline__ void load_a(A& a, SmemTile<float, kStride> tile, int m0,
                                                int k0, int lane) {
    const int row = m0 + lane / 4;
    const int col = k0 + lane % 4;
    split(a, 0, *tile.at(row, col));
    split(a, 1, *tile.at(row + 8, col));
    split(a, 2, *tile.at(row, col + 4));
    split(a, 3, *tile.at(row + 8, col + 4));
  }
  template <int kStride>
  static __device__ __forceinline__ void load_a_transposed(A& a, SmemTile<float, kStride> tile,
                                                           int m0, int k0, int lane) {
    const int k = k0 + 2 * (lane % 4);  // interleaved k order
    const int m = m0 + lane / 4;
    split(a, 0, *tile.at(k, m));
    split(a, 1, *tile.at(k, m + 8));
    split(a, 2, *tile.at(k + 1, m));
    split(a, 3, *tile.at(k + 1, m + 8));
  }
  template <int kStride>
  static __device__ __forceinline__ void load_b_pair_nk(BPair& b, SmemTile<float, kStride> tile,
                                                        int n0, int k0, int lane) {
    const int n = n0 + lane / 4;
    const int k = k0 + lane % 4;
    split(b, 0, *tile.at(n, k));
    split(b, 1, *tile.at(n, k + 4));
    split(b, 2, *tile.at(n + 8, k));
    split(b, 3, *tile.at(n + 8, k + 4));
  }
  template <int kStride>
  static __device__ __forceinline__ void load_b_pair_kn(BPair& b, SmemTile<float, kStride> tile,
                                                        int k0, int n0, int lane) {
    const int k = k0 + 2 * (lane % 4);  // interleaved k order
    const int n = n0 + lane / 4;
    split(b, 0, *tile.at(k, n));
    split(b, 1, *tile.at(k + 1, n));
    split(b, 2, *tile.at(k, n + 8));
    split(b, 3, *tile.at(k + 1, n + 8));
  }
  template <int kTiles>
  static __device__ __forceinline__ void accumulators_to_a(A& a, const float (&acc)[kTiles][4],
                                                           int kk) {
    // Columns 2q, 2q+1 of rows group and group+8 = interleaved k positions q and q+4.
    split(a, 0, acc[kk][0]);
    split(a, 1, acc[kk][2]);
    split(a, 2, acc[kk][1]);
    split(a, 3, acc[kk][3]);
  }
  static __device__ __forceinline__ void mma_pair(float (&c0)[4], float (&c1)[4], const A& a,
                                                  const BPair& b) {
    // The small cross terms first, so that they are not lost against a large partial sum.
    mma_16x8x8_tf32(c0, a.small, b.big[0], b.big[1]);
    mma_16x8x8_tf32(c1, a.small, b.big[2], b.big[3]);
    mma_16x8x8_tf32(c0, a.big, b.small[0], b.small[1]);
    mma_16x8x8_tf32(c1, a.big, b.small[2], b.small[3]);
    mma_16x8x8_tf32(c0, a.big, b.big[0], b.big[1]);
    mma_16x8x8_tf32(c1, a.big, b.big[2], b.big[3]);
  }

 private:
  template <typename Fragment>
  static __device__ __forceinline__ void split(Fragment& f, int i, float x) {
    split_tf32(x, f.big[i], f.small[i]);
  }
};

// acc[mi] += source[mi] * B for each of a warp's kMTiles m tiles: source[mi] is a 16-row fp32
// accumulator block (P or dS: kSourceTiles n8 tiles = the k extent), B the first
// 8 * kSourceTiles rows of a [k][n] shared tile, all 8 * kOutTiles columns (V, dO, Q).
// The tensor cores add products to an fp32 accumulator with truncation, so the error of a
// long chain of mma into one accumulator grows with its length. For fp32 (kStagedSums) each
// call's contribution is therefore summed from zero and added to acc with an ordinary rounded
// fp32 add: O, dK and dV then carry the error of one key or query block, not of the whole
// sequence. kStagePairs output tile pairs are summed apart at a time (all: independent mma
// chains for the scheduler; 1: fewest registers). 16-bit inputs keep the plain chain (their
// rounding error dominates).
template <int kStagePairs, int kMTiles, int kSourceTiles, int kOutTiles, typename Tile>
__device__ __forceinline__ void add_product_of_accumulators(
    float (&acc)[kMTiles][kOutTiles][4], const float (&source)[kMTiles][kSourceTiles][4],
    Tile b_tile, int lane) {
  using Ops = MmaOps<typename Tile::element_type>;
  constexpr int kSteps = kSourceTiles * 8 / Ops::kK;
  static_assert(kOutTiles % 2 == 0, "B fragments are loaded for pairs of n8 tiles");
  static_assert((kOutTiles / 2) % kStagePairs == 0, "stages cover the tile pairs evenly");
  if constexpr (Ops::kStagedSums) {
#pragma unroll
    for (int first_pair = 0; first_pair < kOutTiles / 2; first_pair += kStagePairs) {
      float partial[kMTiles][2 * kStagePairs][4] = {};
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        typename Ops::A a[kMTiles];
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) Ops::accumulators_to_a(a[mi], source[mi], kk);
#pragma unroll
        for (int pair = 0; pair < kStagePairs; ++pair) {
          typename Ops::BPair b;
          Ops::load_b_pair_kn(b, b_tile, Ops::kK * kk, 16 * (first_pair + pair), lane);
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi) {
            Ops::mma_pair(partial[mi][2 * pair], partial[mi][2 * pair + 1], a[mi], b);
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int t = 0; t < 2 * kStagePairs; ++t) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mi][2 * first_pair + t][i] += partial[mi][t][i];
        }
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      typename Ops::A a[kMTiles];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) Ops::accumulators_to_a(a[mi], source[mi], kk);
#pragma unroll
      for (int pair = 0; pair < kOutTiles / 2; ++pair) {
        typename Ops::BPair b;
        Ops::load_b_pair_kn(b, b_tile, Ops::kK * kk, 16 * pair, lane);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          Ops::mma_pair(acc[mi][2 * pair], acc[mi][2 * pair + 1], a[mi], b);
        }
      }
    }
  }
}

// The same for a kernel whose warp holds one m tile (arrays without the m-tile dimension).
template <int kStagePairs, int kSourceTiles, int kOutTiles, typename Tile>
__device__ __forceinline__ void add_product_of_accumulators(float (&acc)[kOutTiles][4],
                                                            const float (&source)[kSourceTiles][4],
                                                            Tile b_tile, int lane) {
  add_product_of_accumulators<kStagePairs>(
      reinterpret_cast<float(&)[1][kOutTiles][4]>(acc),
      reinterpret_cast<const float(&)[1][kSourceTiles][4]>(source), b_tile, lane);
}

}  // namespace cuflash::detail::sm80
