// Moving tiles between global and shared memory: cp.async loads with zero fill for rows past
// the end of a sequence, and coalesced 16-byte stores of finished tiles.
//
// Column padding: a kernel compiled for kCols columns also serves a head_dim below it (a
// multiple of 8, head_dims.h): `cols` is the number of columns that exist in global memory.
// Chunks at or past it are zero-filled on load and skipped on store; a chunk (16 bytes: 8
// fp16/bf16 or 4 fp32 elements) never straddles `cols`, as cols is a multiple of 8. A thread's
// column is the same for all its chunks whenever kThreads is a multiple of the chunks per row,
// so the test is loop-invariant; at cols == kCols (the default) it is always true.
#pragma once

#include <cstdint>

#include "kernels/common/fragments.cuh"
#include "kernels/common/ptx.cuh"

namespace cuflash::detail {

// Calls visit(row, col) for each 16-byte chunk of a (kRows, kCols) tile that `thread` of
// kThreads moves: chunk i goes to thread i % kThreads, so that consecutive threads touch
// consecutive 16 bytes of a row.
template <int kRows, int kCols, int kThreads, typename Element, typename Visit>
__device__ __forceinline__ void for_each_chunk(int thread, Visit&& visit) {
  constexpr int kChunksPerRow = kCols * int(sizeof(Element)) / 16;
  constexpr int kElementsPerChunk = 16 / int(sizeof(Element));
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
  for (int chunk = thread; chunk < kChunks; chunk += kThreads) {
    visit(chunk / kChunksPerRow, (chunk % kChunksPerRow) * kElementsPerChunk);
  }
}

// Whether every thread of kThreads moves the same number of chunks of a (kRows, kCols) tile.
template <int kRows, int kCols, int kThreads, typename Element>
inline constexpr bool kEvenChunks = (kRows * kCols * int(sizeof(Element)) / 16) % kThreads == 0;

// Starts loading rows row0..row0+kRows-1 of a [seq_len, cols] slice (row stride `seq_stride`
// elements, contiguous rows) into a shared tile (kRows, kCols), padded or swizzled; rows at or past
// seq_len and columns at or past `cols` become zeros. All kThreads threads of the block take part.
template <int kRows, int kCols, int kThreads, typename Tile, typename Element>
__device__ __forceinline__ void load_tile_async(Tile tile, const Element* slice, int64_t seq_stride,
                                                int64_t row0, int64_t seq_len, int thread,
                                                int cols = kCols) {
  static_assert(kEvenChunks<kRows, kCols, kThreads, Element>,
                "every thread copies the same number of chunks");
  for_each_chunk<kRows, kCols, kThreads, Element>(thread, [&](int row, int col) {
    const bool valid = row0 + row < seq_len && col < cols;
    const Element* source = valid ? slice + (row0 + row) * seq_stride + col : slice;
    cp_async_16(tile.at(row, col), source, valid);
  });
}

// Stores rows 0..kRows-1 of a shared tile (kRows, kCols) to rows row0.. of a [seq_len, cols]
// slice, skipping rows at or past seq_len and columns at or past `cols` (which may be <= 0:
// nothing is stored); 16 bytes per thread and step.
template <int kRows, int kCols, int kThreads, typename Element, int kStride>
__device__ __forceinline__ void store_tile(Element* slice, int64_t seq_stride, int64_t row0,
                                           int64_t seq_len, SmemTile<Element, kStride> tile,
                                           int thread, int cols = kCols) {
  static_assert(kEvenChunks<kRows, kCols, kThreads, Element>,
                "every thread copies the same number of chunks");
  for_each_chunk<kRows, kCols, kThreads, Element>(thread, [&](int row, int col) {
    if (row0 + row < seq_len && col < cols) {
      *reinterpret_cast<uint4*>(slice + (row0 + row) * seq_stride + col) =
          *reinterpret_cast<const uint4*>(tile.at(row, col));
    }
  });
}

// Writes zeros to rows row0..row0+kRows-1 (those below seq_len) of a [seq_len, cols] slice.
template <int kRows, int kCols, int kThreads, typename Element>
__device__ __forceinline__ void store_zero_rows(Element* slice, int64_t seq_stride, int64_t row0,
                                                int64_t seq_len, int thread, int cols = kCols) {
  for_each_chunk<kRows, kCols, kThreads, Element>(thread, [&](int row, int col) {
    if (row0 + row < seq_len && col < cols) {
      *reinterpret_cast<uint4*>(slice + (row0 + row) * seq_stride + col) = make_uint4(0, 0, 0, 0);
    }
  });
}

}  // namespace cuflash::detail
