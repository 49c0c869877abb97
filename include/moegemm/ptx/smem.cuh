// Shared-memory loads and stores by shared-window address (no generic-to-shared conversion per
// use; volatile keeps the loads after the barrier waits they follow), the stores the epilogues
// and transforms use, the generic -> async proxy fence that
// makes ordinary shared-memory writes visible to wgmma and TMA reads, and the 4-byte
// asynchronous global -> shared copies (cp.async) that complete on a stage's mbarrier.
#pragma once

#include <stdint.h>

namespace moegemm {

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v));
}

__device__ __forceinline__ void st_shared_v2_f32(uint32_t smem_addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(smem_addr), "f"(x), "f"(y) : "memory");
}

// Four 8 x 8 BF16 matrices to shared memory; lane l gives the address of row l % 8 of matrix
// l / 8, and register i holds this lane's pair of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1,
                                            uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Orders this thread's generic-proxy shared-memory writes before async-proxy reads (wgmma,
// TMA) that a later barrier hands the bytes to.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 4 bytes global -> shared, asynchronously; `bytes` (0 or 4) of them read, the rest zero-filled
// (0: a row past the tensor writes zeros and reads nothing). Both addresses 4-byte aligned.
__device__ __forceinline__ void cp_async_4(uint32_t smem_addr, const void* gmem, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr), "l"(gmem),
               "r"(bytes)
               : "memory");
}

// Arrives on the mbarrier at `bar_addr` once this thread's earlier cp.async copies have landed.
// noinc: the arrive is one of the barrier's expected arrivals (counted at its init).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar_addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar_addr) : "memory");
}

}  // namespace moegemm
