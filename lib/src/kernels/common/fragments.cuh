// Register fragments in the tensor cores' accumulator layout, which mma.sync (m16n8) and wgmma
// (per warp of a warpgroup) share: packing, conversions between fp32 accumulators and 16-bit
// operands, stores to shared tiles, and 8-element global loads and stores.
//
// Fragment layouts of mma.m16n8k16 (lane = 4 * group + quad, group = lane / 4, quad = lane % 4):
//   A (16x16, 4 regs of 2 elements): a0 = (group, 2q..2q+1), a1 = (group+8, 2q..),
//                                    a2 = (group, 8+2q..),   a3 = (group+8, 8+2q..)
//   B (16x8, 2 regs):                b0 = (k 2q..2q+1, n group), b1 = (k 8+2q.., n group)
//   C (16x8, 4 floats):              c0,c1 = (group, 2q..2q+1), c2,c3 = (group+8, 2q..2q+1)
// The C fragments of two adjacent n8 tiles, packed to 16 bits, are exactly an A fragment; the
// kernels rely on that to feed P (and dS) straight back into the next product.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/ptx.cuh"

namespace cuflash::detail {

// Element-type specific pieces: packing two floats into one 32-bit operand register.
template <typename Element>
struct ElementOps;

template <>
struct ElementOps<__half> {
  // `lo` lands in the low 16 bits, i.e. the lower column of the pair.
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2_raw pair = __floats2half2_rn(lo, hi);
    return uint32_t(pair.x) | (uint32_t(pair.y) << 16);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __half2_raw pair;
    pair.x = static_cast<unsigned short>(bits & 0xffffu);
    pair.y = static_cast<unsigned short>(bits >> 16);
    return __half22float2(__half2(pair));
  }
};

template <>
struct ElementOps<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162_raw pair = __floats2bfloat162_rn(lo, hi);
    return uint32_t(pair.x) | (uint32_t(pair.y) << 16);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __nv_bfloat162_raw pair;
    pair.x = static_cast<unsigned short>(bits & 0xffffu);
    pair.y = static_cast<unsigned short>(bits >> 16);
    return __bfloat1622float2(__nv_bfloat162(pair));
  }
};

// Element-type independent access used by epilogues and elementwise kernels: two adjacent
// elements from fp32 values, and 8 consecutive elements (16-byte aligned) to / from fp32.
template <typename Element>
__device__ __forceinline__ void store_pair(Element* destination, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(destination) = ElementOps<Element>::pack(lo, hi);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* destination, float lo, float hi) {
  *reinterpret_cast<float2*>(destination) = make_float2(lo, hi);
}

// Stores row `half` (0: the thread's fragment row, 1: that row + 8) of a warp's m16 x (8 *
// kOutTiles) accumulators, each value times `scale`, into `out`, a row of Element; the columns
// at and past `head_dim` are not written (a head_dim padded up to the kernel's).
template <typename Element, int kOutTiles>
__device__ __forceinline__ void store_accumulator_row(Element* out,
                                                      const float (&acc)[kOutTiles][4], int half,
                                                      float scale, int head_dim, int lane) {
  const int col = 2 * (lane % 4);
#pragma unroll
  for (int t = 0; t < kOutTiles; ++t) {
    if (8 * t < head_dim) {
      store_pair(out + 8 * t + col, acc[t][2 * half] * scale, acc[t][2 * half + 1] * scale);
    }
  }
}

template <typename Element>
__device__ __forceinline__ void load8(const Element* source, float (&values)[8]) {
  const uint4 bits = *reinterpret_cast<const uint4*>(source);
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = ElementOps<Element>::unpack(words[i]);
    values[2 * i] = pair.x;
    values[2 * i + 1] = pair.y;
  }
}
template <>
__device__ __forceinline__ void load8<float>(const float* source, float (&values)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(source);
  const float4 hi = *reinterpret_cast<const float4*>(source + 4);
  const float all[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) values[i] = all[i];
}

template <typename Element>
__device__ __forceinline__ void store8(Element* destination, const float (&values)[8]) {
  uint4 bits;
  bits.x = ElementOps<Element>::pack(values[0], values[1]);
  bits.y = ElementOps<Element>::pack(values[2], values[3]);
  bits.z = ElementOps<Element>::pack(values[4], values[5]);
  bits.w = ElementOps<Element>::pack(values[6], values[7]);
  *reinterpret_cast<uint4*>(destination) = bits;
}
template <>
__device__ __forceinline__ void store8<float>(float* destination, const float (&values)[8]) {
  *reinterpret_cast<float4*>(destination) = make_float4(values[0], values[1], values[2], values[3]);
  *reinterpret_cast<float4*>(destination + 4) =
      make_float4(values[4], values[5], values[6], values[7]);
}

// A row-major tile in shared memory; `kStride` elements between rows (padded so that the eight
// 16-byte row segments one ldmatrix phase reads fall into distinct banks).
template <typename Element, int kStride>
struct SmemTile {
  using element_type = Element;
  Element* data;
  __device__ __forceinline__ Element* at(int row, int col) const {
    return data + row * kStride + col;
  }
};

// A row-major tile of kCols elements a row, unpadded, whose 16-byte chunks are permuted inside
// each 128-byte segment: chunk c of row r is stored as chunk c ^ (r % 8). Eight consecutive
// rows at one chunk column fall into eight different bank groups (ldmatrix, as with padding),
// and each 128-byte line of a global row lands in one 128-byte segment, so a warp's cp.async
// of whole lines writes shared memory in as few wavefronts as it reads sectors. With padded
// rows most lines straddle two segments: the split kernel's cp.async then asked L2 for 1.5x
// the sectors it needed (H200; performance log, "Split-KV decode: K/V tiles swizzled").
// A part of the tile that starts at a row divisible by 8 is a ChunkSwizzledTile of its own.
// (The wgmma kernels' sm90::SwizzledTile is another layout: TMA's 128-byte swizzle in blocks of
// 64 columns, addressed by descriptors.)
template <typename Element, int kCols>
struct ChunkSwizzledTile {
  static constexpr int kChunkElements = 16 / int(sizeof(Element));
  static_assert(kCols * int(sizeof(Element)) % 128 == 0, "rows of whole 128-byte segments");
  using element_type = Element;
  Element* data;
  __device__ __forceinline__ Element* at(int row, int col) const {
    return data + row * kCols + (col ^ ((row & 7) * kChunkElements));
  }
};

// The A fragment (16 rows x 16 cols) made of two adjacent 16x8 fp32 accumulator tiles.
template <typename Element>
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&left)[4],
                                                  const float (&right)[4]) {
  a[0] = ElementOps<Element>::pack(left[0], left[1]);
  a[1] = ElementOps<Element>::pack(left[2], left[3]);
  a[2] = ElementOps<Element>::pack(right[0], right[1]);
  a[3] = ElementOps<Element>::pack(right[2], right[3]);
}

// Writes a warp's 16 x (8 * kTiles) fp32 accumulators, times the per-row factors, as Element
// values into rows row0..row0+15 of a row-major shared tile.
template <typename Element, int kStride, int kTiles>
__device__ __forceinline__ void store_accumulators(SmemTile<Element, kStride> tile,
                                                   const float (&acc)[kTiles][4], int row0,
                                                   const float (&row_factor)[2], int lane) {
  const int row = row0 + lane / 4;
  const int col = 2 * (lane % 4);
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      store_pair(tile.at(row + 8 * half, 8 * t + col), acc[t][2 * half] * row_factor[half],
                 acc[t][2 * half + 1] * row_factor[half]);
    }
  }
}

// Adds a warp's 16 x (8 * kTiles) fp32 accumulators, times `factor`, to rows row0..row0+15 (those
// below seq_len) and columns 0..(those below cols) of a row-major fp32 slice in global memory
// (BackwardArgs::sums). Every element has one owner thread in a call, so plain loads and stores
// add; 8-column tiles lie wholly below or above cols (a multiple of 8).
template <int kTiles>
__device__ __forceinline__ void add_accumulators_to_sum(float* slice, int64_t seq_stride,
                                                        int64_t row0, int64_t seq_len, int cols,
                                                        const float (&acc)[kTiles][4],
                                                        float factor, int lane) {
  const int col = 2 * (lane % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + lane / 4 + 8 * half;
    if (row >= seq_len) continue;
    float* sum_row = slice + row * seq_stride;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      if (8 * t + col >= cols) continue;
      sum_row[8 * t + col] += acc[t][2 * half] * factor;
      sum_row[8 * t + col + 1] += acc[t][2 * half + 1] * factor;
    }
  }
}

template <int kTiles>
__device__ __forceinline__ void zero(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = 0.f;
  }
}

}  // namespace cuflash::detail
