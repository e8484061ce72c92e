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
