// TMA (the bulk tensor copy engine, SM90 and later): tensor loads into shared memory completing
// bytes on an mbarrier, multicast loads into every CTA of a cluster, tensor stores and
// reduce-adds from shared memory tracked as bulk groups, descriptor prefetch. Wraps CuTe's
// arch-level copy atoms only (no CuTe layouts or tensors), so a kernel compiles in seconds.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include <stdint.h>

#include <moegemm/ptx/barrier.cuh>

namespace moegemm {

// L2 evict-normal cache policy for every load (the operands are each read a few times), and
// evict-first for operands a kernel streams through once.
constexpr uint64_t kTmaCacheHintNormal = 0x1000000000000000ull;
constexpr uint64_t kTmaCacheHintEvictFirst = 0x12F0000000000000ull;

__device__ __forceinline__ void tma_load_2d(const void* desc, Barrier* bar, void* smem,
                                            int32_t crd0, int32_t crd1) {
  cute::SM90_TMA_LOAD_2D::copy(desc, reinterpret_cast<uint64_t*>(bar), kTmaCacheHintNormal, smem,
                               crd0, crd1);
}

__device__ __forceinline__ void tma_load_3d(const void* desc, Barrier* bar, void* smem,
                                            int32_t crd0, int32_t crd1, int32_t crd2) {
  cute::SM90_TMA_LOAD_3D::copy(desc, reinterpret_cast<uint64_t*>(bar), kTmaCacheHintNormal, smem,
                               crd0, crd1, crd2);
}

__device__ __forceinline__ void tma_load_5d(const void* desc, Barrier* bar, void* smem,
                                            int32_t crd0, int32_t crd1, int32_t crd2,
                                            int32_t crd3, int32_t crd4,
                                            uint64_t cache_hint = kTmaCacheHintNormal) {
  cute::SM90_TMA_LOAD_5D::copy(desc, reinterpret_cast<uint64_t*>(bar), cache_hint, smem, crd0,
                               crd1, crd2, crd3, crd4);
}

// An operand shared by the CTAs of a cluster: one CTA's box lands at the same offset of every
// CTA in `cta_mask`, completing bytes on the barrier at the same offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(const void* desc, Barrier* bar, void* smem,
                                                      int32_t crd0, int32_t crd1,
                                                      uint16_t cta_mask) {
  cute::SM90_TMA_LOAD_MULTICAST_2D::copy(desc, reinterpret_cast<uint64_t*>(bar), cta_mask,
                                         kTmaCacheHintNormal, smem, crd0, crd1);
}
__device__ __forceinline__ void tma_load_3d_multicast(const void* desc, Barrier* bar, void* smem,
                                                      int32_t crd0, int32_t crd1, int32_t crd2,
                                                      uint16_t cta_mask) {
  cute::SM90_TMA_LOAD_MULTICAST_3D::copy(desc, reinterpret_cast<uint64_t*>(bar), cta_mask,
                                         kTmaCacheHintNormal, smem, crd0, crd1, crd2);
}

// TMA stores from shared memory, tracked as bulk groups of the issuing thread: commit closes a
// group; wait_read returns once every committed group has finished reading shared memory (the
// buffer may be rewritten); drain waits until they have fully completed.
__device__ __forceinline__ void tma_store_2d(const void* desc, const void* smem, int32_t crd0,
                                             int32_t crd1) {
  cute::SM90_TMA_STORE_2D::copy(desc, smem, crd0, crd1);
}
// D += the box, element-wise in the copy engine (FP32: round to nearest; like red.add.f32 it
// may flush subnormals).
__device__ __forceinline__ void tma_reduce_add_2d(const void* desc, const void* smem, int32_t crd0,
                                                  int32_t crd1) {
  cute::SM90_TMA_REDUCE_ADD_2D::copy(desc, smem, crd0, crd1);
}
__device__ __forceinline__ void tma_store_commit() { cute::tma_store_arrive(); }
__device__ __forceinline__ void tma_store_wait_read() { cute::tma_store_wait<0>(); }
__device__ __forceinline__ void tma_store_drain() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Orders this thread's ordinary shared-memory writes before later async-proxy reads (TMA
// stores, wgmma) of the same bytes; a barrier must still follow.
__device__ __forceinline__ void fence_async_shared() { cute::tma_store_fence(); }

__device__ __forceinline__ void prefetch_tma_desc(const void* desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

}  // namespace moegemm
