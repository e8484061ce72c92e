// The mma.sync building blocks of the sm80 family: the m16n8k16 (fp16 / bf16) and m16n8k8
// (TF32) products and the ldmatrix fragment loads from row-major shared tiles (SmemTile, padded,
// or ChunkSwizzledTile). Fragment layouts are described in common/fragments.cuh.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/fragments.cuh"
#include "kernels/common/ptx.cuh"

namespace cuflash::detail::sm80 {

// acc (16x8 fp32) += a (16x16) * b (16x8) with 16-bit inputs; layouts in mma.cuh.
template <typename Element>
__device__ __forceinline__ void mma_16x8x16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1);

template <>
__device__ __forceinline__ void mma_16x8x16<__half>(float (&acc)[4], const uint32_t (&a)[4],
                                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16x8x16<__nv_bfloat16>(float (&acc)[4],
                                                           const uint32_t (&a)[4], uint32_t b0,
                                                           uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc (16x8 fp32) += a (16x8) * b (8x8) with TF32 inputs (fp32 bit patterns of which the
// tensor core reads the sign, the exponent and the top 10 mantissa bits).
// A: a0 = (group, quad), a1 = (group+8, quad), a2 = (group, quad+4), a3 = (group+8, quad+4);
// B: b0 = (k quad, n group), b1 = (k quad+4, n group); C as for m16n8k16.
__device__ __forceinline__ void mma_16x8x8_tf32(float (&acc)[4], const uint32_t (&a)[4],
                                                uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x = big + small with big = x rounded to TF32 (to nearest, ties away from zero) and small the
// exact remainder, itself read as TF32 by the tensor core: big * y_big + big * y_small +
// small * y_big misses x * y by about 2^-20 |x y|, close to an fp32 product (2^-24), at three
// TF32 products per fp32 product. Integer rounding (3 instructions) instead of cvt.rna.tf32.f32,
// which sm_80 / sm_90 emulate with about six. |x| within 2^-11 of FLT_MAX rounds to infinity
// and gives a NaN, as a product of such values would overflow anyway.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big));
}

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i, and
// register i of lane l receives row l/4, columns 2*(l%4) and 2*(l%4)+1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Same with each matrix transposed: register i of lane l receives rows 2*(l%4) and 2*(l%4)+1,
// column l/4 of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// A fragment of rows m0..m0+15, cols k0..k0+15 of a row-major [m][k] tile (e.g. Q for Q K^T).
template <typename Tile>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], Tile tile, int m0, int k0, int lane) {
  // matrices: (m0, k0), (m0+8, k0), (m0, k0+8), (m0+8, k0+8) -> a0..a3
  ldmatrix_x4(a, shared_address(tile.at(m0 + (lane & 15), k0 + (lane >> 4) * 8)));
}

// A fragment of the 16x16 block (m0.., k0..) of the operand whose transpose is stored row-major
// as a [k][m] tile (e.g. dS for dS K, with dS^T in shared memory).
template <typename Tile>
__device__ __forceinline__ void load_a_transposed(uint32_t (&a)[4], Tile tile, int m0, int k0,
                                                  int lane) {
  // stored blocks: (k0, m0) -> a0, (k0, m0+8) -> a1, (k0+8, m0) -> a2, (k0+8, m0+8) -> a3
  const int matrix = lane >> 3;
  ldmatrix_x4_trans(a, shared_address(tile.at(k0 + (lane & 7) + (matrix >> 1) * 8,
                                              m0 + (matrix & 1) * 8)));
}

// B fragments of two n8 tiles (n0.. and n0+8..) over k0..k0+15, from a tile stored as [n][k]
// (e.g. K for Q K^T: B[k][n] = K[n][k]). b = {b0, b1} of tile n0, then {b0, b1} of tile n0+8.
template <typename Tile>
__device__ __forceinline__ void load_b_pair_nk(uint32_t (&b)[4], Tile tile, int n0, int k0,
                                               int lane) {
  // matrices: (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8)
  ldmatrix_x4(b, shared_address(tile.at(n0 + (lane & 7) + (lane >> 4) * 8,
                                        k0 + ((lane >> 3) & 1) * 8)));
}

// B fragments of two n8 tiles (n0.., n0+8..) over k0..k0+15, from a tile stored as [k][n]
// (e.g. V for P V), transposed by ldmatrix. Same register order as load_b_pair_nk.
template <typename Tile>
__device__ __forceinline__ void load_b_pair_kn(uint32_t (&b)[4], Tile tile, int k0, int n0,
                                               int lane) {
  // stored blocks: (k0, n0), (k0+8, n0), (k0, n0+8), (k0+8, n0+8)
  ldmatrix_x4_trans(b, shared_address(tile.at(k0 + (lane & 15), n0 + (lane >> 4) * 8)));
}

}  // namespace cuflash::detail::sm80
