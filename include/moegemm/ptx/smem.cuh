// Shared-memory stores the epilogues and transforms use, and the generic -> async proxy fence
// that makes ordinary shared-memory writes visible to wgmma and TMA reads.
#pragma once

#include <stdint.h>

namespace moegemm {

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

}  // namespace moegemm
