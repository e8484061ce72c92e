// Columns of a wgmma product as pieces that N-major operands can describe. The B operands of the
// backward's dV, dK and dQ products (dO, Q, K) are N-major swizzled tiles of 64-column blocks,
// and an N-major operand may start inside a block only when it stays inside that block: a
// product over columns that are not whole blocks from a block boundary is issued as a wide piece
// (whole blocks) and a narrow one (32 columns). Used by the key-split backward (all of a warp's
// columns, e.g. head_dim 96 as [0, 64) + [64, 96)) and the column-split one (each warpgroup's
// half of them).
#pragma once

#include <cstdint>

#include "kernels/common/fragments.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace cuflash::detail::sm90 {

// kCols columns of a warpgroup as pieces. In the column-split kernel kCols = D/2: D/2 = 128
// (D = 256) is one wide piece per warpgroup, at 0 and 128; D/2 = 96 (D = 192) is a 64-column
// piece on a block boundary and a 32-column one inside block 1: warpgroup 0 takes [0, 64) +
// [64, 96), warpgroup 1 [96, 128) + [128, 192). In the key-split kernel every warpgroup takes
// the columns of warpgroup 0: [0, kWide) + [kWide, kCols).
template <int kCols>
struct ColumnPieces {
  static constexpr int kNarrow = kCols % 64;  // 0 or 32
  static constexpr int kWide = kCols - kNarrow;
  static_assert(kNarrow == 0 || kNarrow == 32, "the narrow piece is half a swizzle block");
  static_assert(kWide > 0 && (kNarrow == 0 || kWide == 64), "the narrow piece lies in block 1");
  __device__ static int wide_col(int warp_group) { return warp_group == 0 ? 0 : kCols + kNarrow; }
  __device__ static int narrow_col(int warp_group) { return warp_group == 0 ? kWide : kCols; }
};

// One product's accumulators over a warpgroup's pieces (16 rows of a warp each).
template <typename Pieces>
struct PieceAccumulators {
  float wide[Pieces::kWide / 8][4];
  float narrow[Pieces::kNarrow > 0 ? Pieces::kNarrow / 8 : 1][4];  // unused when kNarrow is 0
};

template <typename Pieces>
__device__ __forceinline__ void zero_pieces(PieceAccumulators<Pieces>& acc) {
  zero(acc.wide);
  zero(acc.narrow);
}

// store_accumulators() of both pieces into the columns they hold in a row-major staged tile.
template <typename Pieces, typename Element, int kStride>
__device__ __forceinline__ void store_pieces(SmemTile<Element, kStride> tile,
                                             const PieceAccumulators<Pieces>& acc, int row0,
                                             const float (&row_factor)[2], int warp_group,
                                             int lane) {
  store_accumulators(SmemTile<Element, kStride>{tile.data + Pieces::wide_col(warp_group)},
                     acc.wide, row0, row_factor, lane);
  if constexpr (Pieces::kNarrow > 0) {
    store_accumulators(SmemTile<Element, kStride>{tile.data + Pieces::narrow_col(warp_group)},
                       acc.narrow, row0, row_factor, lane);
  }
}

// add_accumulators_to_sum() of both pieces of warpgroup 0's columns (the key-split kernel's).
template <typename Pieces>
__device__ __forceinline__ void add_pieces_to_sum(float* slice, int64_t seq_stride, int64_t row0,
                                                  int64_t seq_len, int cols,
                                                  const PieceAccumulators<Pieces>& acc,
                                                  float factor, int lane) {
  add_accumulators_to_sum(slice, seq_stride, row0, seq_len, cols, acc.wide, factor, lane);
  if constexpr (Pieces::kNarrow > 0) {
    add_accumulators_to_sum(slice + Pieces::kWide, seq_stride, row0, seq_len,
                            cols - Pieces::kWide, acc.narrow, factor, lane);
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <typename Pieces>
__device__ __forceinline__ void fence_piece_operands(PieceAccumulators<Pieces>& acc) {
  wgmma_fence_operands(acc.wide);
  if constexpr (Pieces::kNarrow > 0) wgmma_fence_operands(acc.narrow);
}

// acc += A B[k0..k0+15, this warpgroup's columns] for one k-step: A a register fragment, B an
// N-major tile.
template <typename Element, typename Pieces, typename BTile>
__device__ __forceinline__ void piece_products_rs(PieceAccumulators<Pieces>& acc,
                                                  const uint32_t (&a)[4], BTile b_tile, int k0,
                                                  int warp_group) {
  Wgmma<Element, Pieces::kWide>::template rs<1>(
      acc.wide, a, n_major_descriptor(b_tile, k0, Pieces::wide_col(warp_group)), true);
  if constexpr (Pieces::kNarrow > 0) {
    Wgmma<Element, Pieces::kNarrow>::template rs<1>(
        acc.narrow, a, n_major_descriptor(b_tile, k0, Pieces::narrow_col(warp_group)), true);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace cuflash::detail::sm90
