// Hopper (sm_90a) building blocks: the 128-byte swizzled shared-memory layout that wgmma reads,
// its matrix descriptors, and the fences and waits around the asynchronous wgmma instructions.
//
// Swizzled tile (16-bit elements): the columns are cut into blocks of 64 elements (128 bytes).
// Each column block stores its rows 128 bytes apart, and the eight 16-byte chunks of row r sit
// at chunk position c ^ (r % 8). Eight consecutive rows (1024 bytes, aligned) form one swizzle
// atom. It is the layout a TMA load with 128-byte swizzling writes for a box of 64 columns
// (tma.cuh). The same bytes serve as a K-major operand (rows = M or N, columns = K: Q and K in
// S = Q K^T) and as an N-major one (rows = K, columns = N: V in O = P V).
#pragma once

#include <cstdint>

#include "kernels/common/fragments.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace cuflash::detail::sm90 {

inline constexpr int kSwizzleBytes = 128;       // one row of a column block
inline constexpr int kSwizzleAtomBytes = 1024;  // 8 rows: the unit the swizzle repeats over

template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "whole 64-column blocks of whole atoms");
  static constexpr int kColumnBlockBytes = kRows * kSwizzleBytes;
  static constexpr int kBytes = kCols / 64 * kColumnBlockBytes;

  uint32_t base;  // shared-space address, kSwizzleAtomBytes-aligned
};

// Descriptor of a wgmma operand in a SwizzledTile (128-byte swizzle mode). `start` is the
// address of the operand's first element; the strides say where the next 8-row atom
// (stride_bytes) and, for N-major operands wider than 64, the next column block (leading_bytes)
// begin.
__host__ __device__ __forceinline__ uint64_t swizzled_descriptor(uint32_t start,
                                                                 uint32_t leading_bytes,
                                                                 uint32_t stride_bytes) {
  constexpr uint64_t kSwizzle128B = 1;
  return uint64_t((start >> 4) & 0x3FFF) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (kSwizzle128B << 62);
}

// The descriptor of start + offset_bytes made from the descriptor of `start` (offset_bytes a
// multiple of 16): its low 14 bits hold start >> 4, and a shared-space address is below 2^18 (a
// CTA has at most 227 KiB), so adding offset_bytes >> 4 to the low word never carries out of
// the field and gives the descriptor built from the sum. A k-step's descriptor then costs one
// addition; rebuilt from the address, a k-step's two took about twelve instructions (the SASS of
// the backward's loop: shift, mask, or, the constant upper word moved in again).
__host__ __device__ __forceinline__ uint64_t advanced_descriptor(uint64_t descriptor,
                                                                 uint32_t offset_bytes) {
  const uint32_t low = uint32_t(descriptor) + (offset_bytes >> 4);
  return (descriptor & 0xFFFFFFFF00000000ull) | low;
}

// K-major operand of 16 columns (k0..k0+15, k0 % 16 == 0) starting at row `row0` (a multiple of
// 8): Q or K for S = Q K^T. Within a 128-byte row the 16-column step is a plain 32-byte offset;
// the hardware applies the swizzle to the address it forms. The rows' descriptor does not
// depend on k0: an unrolled k-loop builds it once and advances it.
template <int kRows, int kCols>
__host__ __device__ __forceinline__ uint64_t k_major_descriptor(SwizzledTile<kRows, kCols> tile,
                                                                int row0, int k0) {
  const uint64_t rows = swizzled_descriptor(tile.base + row0 * kSwizzleBytes, 16,
                                            kSwizzleAtomBytes);  // leading offset unused here
  return advanced_descriptor(rows, (k0 / 64) * tile.kColumnBlockBytes + (k0 % 64) * 2);
}

// M- or N-major operand of rows k0..k0+15 (the K of the product) and the columns from col0 (a
// multiple of 8; its M or N): V for O = P V, dO and Q for dV and dK, dS^T and K for dQ. As for
// k_major_descriptor, an offset inside a 128-byte row is a plain byte offset. (Built from the
// address each k-step: advancing the columns' descriptor instead, as k_major_descriptor does,
// made ptxas spill up to 88 more bytes in the head_dim 128 backward kernels.)
template <int kRows, int kCols>
__host__ __device__ __forceinline__ uint64_t n_major_descriptor(SwizzledTile<kRows, kCols> tile,
                                                                int k0, int col0 = 0) {
  return swizzled_descriptor(
      tile.base + (col0 / 64) * tile.kColumnBlockBytes + k0 * kSwizzleBytes + (col0 % 64) * 2,
      tile.kColumnBlockBytes, kSwizzleAtomBytes);
}

// Byte address of elements (row, col), (row, col + 1) of a swizzled tile; col even.
template <int kRows, int kCols>
__device__ __forceinline__ uint32_t swizzled_address(SwizzledTile<kRows, kCols> tile, int row,
                                                     int col) {
  const int chunk = (col % 64) / 8;
  return tile.base + (col / 64) * tile.kColumnBlockBytes + row * kSwizzleBytes +
         ((chunk ^ (row % 8)) * 16) + (col % 8) * 2;
}

// swizzled_address() of a thread's accumulator-fragment elements (row0 + lane / 4 + 8 * half,
// col + 2 * (lane % 4)), row0 and col multiples of 8, in two instructions a store. The rows'
// swizzle (row % 8 == lane / 4) flips the bits of the 16-byte chunk (4-6), which no other term
// of the sum touches (a 1024-aligned tile base, rows from bit 7, the offset in the chunk in bits
// 0-3), so it is applied last, by an XOR. (Per-column addresses held in registers across the
// backward's loop spilled at 128-query blocks.)
template <int kRows, int kCols>
struct FragmentAddresses {
  uint32_t thread;   // tile base + (row0 + lane / 4) rows + (lane % 4) 32-bit columns
  uint32_t swizzle;  // (lane / 4) chunks
  __device__ FragmentAddresses(SwizzledTile<kRows, kCols> tile, int row0, int lane)
      : thread(tile.base + uint32_t(row0 + lane / 4) * kSwizzleBytes + uint32_t(lane % 4) * 4),
        swizzle(uint32_t(lane / 4) * 16) {}
  __device__ uint32_t at(int half, int col) const {
    const uint32_t offset = uint32_t(col / 64) * SwizzledTile<kRows, kCols>::kColumnBlockBytes +
                            uint32_t(8 * half) * kSwizzleBytes + uint32_t((col % 64) / 8) * 16;
    return (thread + offset) ^ swizzle;
  }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Orders this thread's earlier register writes (accumulators, A fragments) before the
// following wgmma instructions read them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the group of wgmma instructions issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Tells the compiler that wgmma (asynchronously) owns these registers up to this point, so it
// neither reads them earlier nor moves writes across: used right after wgmma_wait().
template <int kTiles>
__device__ __forceinline__ void wgmma_fence_operands(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+f"(acc[t][i])::"memory");
  }
}

// Finished accumulators, copied into registers of their own by adding -0 (exact for every value
// but a NaN's payload).
// A loop that reads them in its next iteration after issuing a new product needs the copy:
// ptxas takes registers that a wgmma wrote, or a plain move of them, for ones a pending wgmma
// may still write, and waits for every product before the read (C7517: the overlap is lost).
// (Should ptxas ever fold the addition into a move, share/scripts/check_wgmma_pipelines.py
// fails the build's check on the C7517 it brings back.)
template <int kTiles>
__device__ __forceinline__ void copy_accumulators(const float (&acc)[kTiles][4],
                                                  float (&copy)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      asm volatile("add.rn.f32 %0, %1, 0f80000000;" : "=f"(copy[t][i]) : "f"(acc[t][i]));
    }
  }
}

// Same for A fragments a running wgmma still reads: keeps them (and their registers) alive up
// to the wait, so the compiler does not hand those registers to other values meanwhile.
template <int kTiles>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&fragments)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(fragments[t][i])::"memory");
  }
}

// Makes this thread's generic-proxy shared-memory stores visible to the async proxy (wgmma,
// TMA); a barrier must then order them before the reader.
__device__ __forceinline__ void fence_view_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Hands registers back to the SM (setmaxnreg.dec) or claims more (setmaxnreg.inc), for every
// thread of the executing warpgroup; lets a producer warpgroup that needs few registers leave
// them to the consumer warpgroups.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Stores four 8 x 8 blocks of 16-bit pairs, held as mma fragments (register i: block i, the
// thread's row lane / 4, columns 2 (lane % 4), + 1): lane 8 i + j gives the shared address of
// the 16 bytes of row j of block i.
__device__ __forceinline__ void stmatrix_x4(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :
               : "r"(address), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The same, each block transposed: lane 8 i + j gives the shared address of the 16 bytes of row
// j of block i's transpose (its column j).
__device__ __forceinline__ void stmatrix_x4_transposed(uint32_t address, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :
               : "r"(address), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Writes a warp's 16 rows (from row0) of a wgmma accumulator, 8 * kTiles columns from col0,
// each row times its factor (row_factor[h]: the thread's rows lane / 4 + 8 h), as 16-bit values
// into a tile in the TMA boxes' layout (SwizzledTile): one stmatrix a 16 x 16 block. Lane 8 i + j
// addresses row j of block i (rows row0 + 8 (i % 2) + j, columns from 8 (i / 2)); the next 16
// columns lie two chunks on (an even XOR of the swizzled chunk) or in the next column block.
template <typename Element, int kRows, int kCols, int kTiles>
__device__ __forceinline__ void stage_accumulator_rows(SwizzledTile<kRows, kCols> tile,
                                                       const float (&acc)[kTiles][4], int row0,
                                                       int col0, const float (&row_factor)[2],
                                                       int lane) {
  static_assert(kTiles % 2 == 0, "whole 16 x 16 blocks");
  const uint32_t lane_address =
      swizzled_address(tile, row0 + 8 * ((lane / 8) % 2) + lane % 8, 8 * (lane / 16));
#pragma unroll
  for (int t = 0; t < kTiles; t += 2) {
    uint32_t blocks[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int half = i % 2;
      blocks[i] = ElementOps<Element>::pack(acc[t + i / 2][2 * half] * row_factor[half],
                                            acc[t + i / 2][2 * half + 1] * row_factor[half]);
    }
    const int col = col0 + 8 * t;  // col0: a multiple of 64 or 32 (a piece's first column)
    stmatrix_x4((lane_address ^ uint32_t((col % 64) / 8 * 16)) +
                    uint32_t(col / 64 * SwizzledTile<kRows, kCols>::kColumnBlockBytes),
                blocks);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace cuflash::detail::sm90
