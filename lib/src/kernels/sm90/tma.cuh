// Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier).
//
// A TMA load copies a box of a tensor described by a CUtensorMap (made on the host, passed as a
// __grid_constant__ kernel parameter) into shared memory, issued by one thread, with no address
// arithmetic in the kernel; rows outside the tensor arrive as zeros. Completion is counted in
// bytes on an mbarrier: the issuing thread announces the bytes (arrive + expect_tx), waiters
// spin on the barrier's phase parity. With 128-byte swizzling and a box 64 elements wide, the
// copy lands in exactly the SwizzledTile layout of wgmma.cuh.
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver library is linked)

#include "cuflash/attention.h"
#include "cuflash/types.h"

namespace cuflash::detail::sm90 {

// kSlots buffers taken in turn by a running count n (a key block, a query block, a Q load):
// use n fills slot n % kSlots and is that slot's (n / kSlots)-th use, so its mbarriers are in
// the phase of that parity. Counted in 32 unsigned bits, slot and phase are a mask and a shift
// where kSlots is a power of two, and then stay right past a wrap (2^32 is a multiple of 2 kSlots).
template <int kSlots>
struct SlotRing {
  static __device__ __forceinline__ uint32_t slot(uint32_t n) { return n % kSlots; }
  static __device__ __forceinline__ uint32_t parity(uint32_t n) { return (n / kSlots) & 1u; }
};

// Box of a TMA tile load: 64 columns (128 bytes, the swizzle width) by up to 256 rows.
inline constexpr int kTmaBoxColumns = 64;

// A [batch, heads, seq, head_dim] 16-bit tensor as a 4-d tensor map whose box is kTmaBoxColumns
// x box_rows of one (batch, head) slice. Returns false when the driver rejects the tensor (e.g.
// a stride it cannot describe); callers then use kernels without TMA.
bool make_tile_tensor_map(CUtensorMap& map, const TensorRef& tensor, DType dtype, int64_t batch,
                          int64_t heads, int64_t seq, int64_t head_dim, int box_rows);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals)
               : "memory");
}

// Makes initialized barriers visible to the other threads and to the TMA unit; a CTA barrier
// must follow before anyone uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives once and announces `bytes` more to come from TMA before the phase may complete.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// This thread's arrival on `barrier`, made once its earlier cp.async copies have landed (noinc:
// the arrival the barrier counts for the thread, not one more), so that the thread goes on
// without waiting for them.
__device__ __forceinline__ void mbarrier_arrive_after_copies(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// Waits until the phase with the given parity (0 for the first phase, 1 for the second, ...)
// has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (!done);
}

// Copies the box at element coordinates (column, row, head, batch) of `map` to `destination`
// (1024-byte aligned for swizzled maps) and counts its bytes on `barrier`.
__device__ __forceinline__ void tma_load_box(uint32_t destination, const CUtensorMap& map,
                                             uint32_t barrier, int column, int row, int head,
                                             int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(column), "r"(row), "r"(head), "r"(batch),
      "r"(barrier)
      : "memory");
}

// Copies `source` (laid out as tma_load_box() lands a box) to the box at element coordinates
// (column, row, head, batch) of `map`, skipping its rows and columns outside the tensor; one
// bulk request in the thread's current bulk group (bulk_commit_group(), bulk_wait_read()). The
// threads that wrote `source` make their stores visible to the async proxy first
// (fence_view_async_shared()), and a barrier orders them before this.
__device__ __forceinline__ void tma_store_box(const CUtensorMap& map, uint32_t source, int column,
                                              int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(&map)),
      "r"(source), "r"(column), "r"(row), "r"(head), "r"(batch)
      : "memory");
}

// Adds `bytes` (a multiple of 16, both addresses 16-byte aligned) of fp32 values from shared
// memory to global memory through the TMA unit, each add atomic in L2; one bulk request in the
// thread's current bulk group instead of a vector atomic per pair of floats from every thread.
__device__ __forceinline__ void bulk_reduce_add_f32(float* destination, uint32_t source,
                                                    uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
          destination),
      "r"(source), "r"(bytes)
      : "memory");
}

// Writes `bytes` (the same conditions) from shared to global memory through the TMA unit,
// one bulk request in the thread's current bulk group like bulk_reduce_add_f32().
__device__ __forceinline__ void bulk_store_f32(float* destination, uint32_t source,
                                               uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(
                   destination),
               "r"(source), "r"(bytes)
               : "memory");
}

// Closes the thread's current bulk group (bulk_reduce_add_f32's and bulk_store_f32's requests).
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until all but the kPending most recent of the thread's bulk groups have read their
// shared memory (it may be written again).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Waits until the thread's bulk groups are complete (their global writes performed), and
// orders them before the thread's later global accesses through the generic proxy.
__device__ __forceinline__ void bulk_wait_complete() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace cuflash::detail::sm90
