// Thin wrappers over the PTX instructions that both kernel families use (sm_80 and newer):
// cp.async, named barriers, shared-memory stores, paired atomics and ex2.approx. The mma.sync
// and ldmatrix wrappers are in sm80/mma.cuh, the wgmma and TMA ones under sm90/.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cuflash::detail {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Copies 16 bytes global -> shared without staging in registers; writes zeros instead when
// `valid` is false (then nothing is read and `source` only has to be some valid address).
__device__ __forceinline__ void cp_async_16(void* destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(source_bytes)
               : "memory");
}

// The same for 16 bytes that are always read (no source-size operand to compute).
__device__ __forceinline__ void cp_async_16(void* destination, const void* source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(destination)),
               "l"(source)
               : "memory");
}

// The same with the L2::128B hint: a miss in L2 fetches the whole 128-byte line from memory. For
// streams read once, in order and in whole lines (the split kernel's K/V blocks), where the
// line's other sectors are the next requests: 1-3 % faster decoding on the H200 (performance
// log, decode v5).
__device__ __forceinline__ void cp_async_16_whole_line(void* destination, const void* source) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(
                   shared_address(destination)),
               "l"(source)
               : "memory");
}

// Copies one 4-byte word global -> shared asynchronously.
__device__ __forceinline__ void cp_async_4(void* destination, const void* source) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_address(destination)),
               "l"(source)
               : "memory");
}

// The same, writing zeros instead when `valid` is false (then nothing is read, and `source` only
// has to be some valid address).
__device__ __forceinline__ void cp_async_4(void* destination, const void* source, bool valid) {
  const int source_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(source_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// A 32-bit store to a shared-space address.
__device__ __forceinline__ void store_shared_u32(uint32_t address, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

// A 32-bit load from a shared-space address.
__device__ __forceinline__ uint32_t load_shared_u32(uint32_t address) {
  uint32_t value;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(value) : "r"(address) : "memory");
  return value;
}

// Synchronizes `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is the one
// __syncthreads uses), so that a subset of the CTA can meet without the others.
// Ids of the named barriers the kernels use (0 is __syncthreads's).
inline constexpr int kComputeBarrier = 1;    // the threads that compute, without the others
// sm90 forward: warpgroup g (0..2) waits for its turn on this + g; the barriers of each
// warpgroup's own rows follow those of the turns.
inline constexpr int kFirstTurnBarrier = 2;

// `value`, through a move the compiler cannot see through: what is computed from it is computed
// where it is used, not kept in registers from an earlier computation of the same.
__device__ __forceinline__ uint32_t opaque(uint32_t value) {
  uint32_t copy;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(copy) : "r"(value));
  return copy;
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at hardware barrier `id` without waiting: counts toward the `threads` that a
// named_barrier_sync on the same id waits for.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// address[0] += x, address[1] += y (fp32, relaxed, device scope) for an 8-byte aligned pair:
// one vector reduction on sm_90, two scalar ones before.
__device__ __forceinline__ void atomic_add_pair(float* address, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y)
               : "memory");
#else
  atomicAdd(address, x);
  atomicAdd(address + 1, y);
#endif
}

// A load that no later load or store of this thread moves before (acquire, device scope): what
// another CTA wrote before its release to `address` is visible after it returns that value.
__device__ __forceinline__ int load_acquire(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// *address read without ordering (device scope): a value read ahead of its use, which
// fence_acquire() then makes an acquire (a relaxed read followed by an acquire fence
// synchronizes with the release it read from, as load_acquire() does).
__device__ __forceinline__ int load_relaxed(const int* address) {
  int value;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// On sm_90 the acquire fence alone: the L1 invalidation that an acquire read also does, without
// the acq_rel fence's wait for this thread's outstanding memory operations (its release, its
// cp.async loads). Before sm_90, or with a CUDA before 12.8 (fence.acquire is PTX ISA 8.6), the
// acq_rel one.
__device__ __forceinline__ void fence_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
  asm volatile("fence.acquire.gpu;\n" ::: "memory");
#else
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
#endif
}

// *address += value after everything this thread's CTA did before a barrier it passed becomes
// visible at device scope (release: pairs with load_acquire()).
__device__ __forceinline__ void add_release(int* address, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(address), "r"(value)
               : "memory");
}

// 2^x with the hardware approximation (relative error ~2^-22); exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) in one MUFU instruction (sm_75+), an approximation: less exact than fast_tanh(),
// well within what 16-bit inputs carry (score_mod.cuh). Saturates to +-1.
__device__ __forceinline__ float hardware_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace cuflash::detail
