// Thin wrappers over the PTX instructions the tensor-core kernels use (sm_80 and newer):
// mma.sync, ldmatrix, cp.async and ex2.approx. Everything above this file is plain CUDA C++.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cuflash::detail {

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

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
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

// Copies 16 bytes global -> shared without staging in registers; writes zeros instead when
// `valid` is false (then nothing is read and `source` only has to be some valid address).
__device__ __forceinline__ void cp_async_16(void* destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(source_bytes)
               : "memory");
}

// Copies one 4-byte word global -> shared asynchronously.
__device__ __forceinline__ void cp_async_4(void* destination, const void* source) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_address(destination)),
               "l"(source)
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

// Synchronizes `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is the one
// __syncthreads uses), so that a subset of the CTA can meet without the others.
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

// 2^x with the hardware approximation (relative error ~2^-22); exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace cuflash::detail
