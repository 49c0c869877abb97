// Thin device helpers for Hopper: wgmma shared-memory descriptors, the wgmma atom for a given N,
// TMA loads, mbarriers and register reallocation. Wraps CuTe/CUTLASS arch-level headers only
// (no CuTe layouts/tensors) so a kernel compiles in about two seconds.
#pragma once

// N outside {8, 16, 32, 64, 96, 128, 192, 256} needs CuTe's extended atoms, which cost ~0.6 s of
// compile time: the generated source defines MOEGEMM_WGMMA_EXTENDED_N only when it uses one.
#if defined(MOEGEMM_WGMMA_EXTENDED_N) && !defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <stdint.h>
#include <utility>

namespace moegemm::sm90 {

using Barrier = cutlass::arch::ClusterTransactionBarrier;

// Shared-memory matrix descriptor for a K-major tile stored as rows of 128 bytes with the 128B
// swizzle TMA writes. Rows come in atoms of 8 (1024 bytes), hence the stride byte offset of 1024;
// the leading byte offset is unused for swizzled K-major layouts.
__device__ __forceinline__ uint64_t make_smem_desc_k128b(const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);   // start address, bits [0, 14)
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;         // stride byte offset, bits [32, 46)
  desc |= static_cast<uint64_t>(1) << 62;                 // layout type: SWIZZLE_128B
  return desc;
}

// Advancing a K-major 128B-swizzled descriptor by `bytes` along K inside the 128-byte row: the
// hardware applies the swizzle to the final address, so moving the start address is enough.
__device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// The CuTe atom for one wgmma m64nNk16: FP32 accumulators, BF16 operands from shared memory,
// both K-major.
#define MOEGEMM_WGMMA_BF16_ATOM(N)                                                       \
  template <>                                                                            \
  struct WgmmaAtom<N> {                                                                  \
    using Type = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_SS<                       \
        cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;                         \
  };

template <int N>
struct WgmmaAtom;
MOEGEMM_WGMMA_BF16_ATOM(8) MOEGEMM_WGMMA_BF16_ATOM(16) MOEGEMM_WGMMA_BF16_ATOM(32)
MOEGEMM_WGMMA_BF16_ATOM(64) MOEGEMM_WGMMA_BF16_ATOM(96) MOEGEMM_WGMMA_BF16_ATOM(128)
MOEGEMM_WGMMA_BF16_ATOM(192) MOEGEMM_WGMMA_BF16_ATOM(256)
#if defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
MOEGEMM_WGMMA_BF16_ATOM(24) MOEGEMM_WGMMA_BF16_ATOM(40) MOEGEMM_WGMMA_BF16_ATOM(48)
MOEGEMM_WGMMA_BF16_ATOM(56) MOEGEMM_WGMMA_BF16_ATOM(72) MOEGEMM_WGMMA_BF16_ATOM(80)
MOEGEMM_WGMMA_BF16_ATOM(88) MOEGEMM_WGMMA_BF16_ATOM(104) MOEGEMM_WGMMA_BF16_ATOM(112)
MOEGEMM_WGMMA_BF16_ATOM(120) MOEGEMM_WGMMA_BF16_ATOM(136) MOEGEMM_WGMMA_BF16_ATOM(144)
MOEGEMM_WGMMA_BF16_ATOM(152) MOEGEMM_WGMMA_BF16_ATOM(160) MOEGEMM_WGMMA_BF16_ATOM(168)
MOEGEMM_WGMMA_BF16_ATOM(176) MOEGEMM_WGMMA_BF16_ATOM(184) MOEGEMM_WGMMA_BF16_ATOM(200)
MOEGEMM_WGMMA_BF16_ATOM(208) MOEGEMM_WGMMA_BF16_ATOM(216) MOEGEMM_WGMMA_BF16_ATOM(224)
MOEGEMM_WGMMA_BF16_ATOM(232) MOEGEMM_WGMMA_BF16_ATOM(240) MOEGEMM_WGMMA_BF16_ATOM(248)
#endif
#undef MOEGEMM_WGMMA_BF16_ATOM

// Issues one wgmma over an accumulator array; the atom takes each register by reference.
template <int N, size_t... I>
__device__ __forceinline__ void wgmma_bf16_impl(uint64_t desc_a, uint64_t desc_b, float* acc,
                                                std::index_sequence<I...>) {
  WgmmaAtom<N>::Type::fma(desc_a, desc_b, acc[I]..., cute::SM90::GMMA::ScaleOut::One);
}

template <int N>
__device__ __forceinline__ void wgmma_bf16(uint64_t desc_a, uint64_t desc_b, float* acc) {
  wgmma_bf16_impl<N>(desc_a, desc_b, acc, std::make_index_sequence<N / 2>{});
}

__device__ __forceinline__ void tma_load_2d(const void* desc, Barrier* bar, void* smem,
                                            int32_t crd0, int32_t crd1) {
  constexpr uint64_t kCacheHintNormal = 0x1000000000000000ull;  // L2 evict-normal policy
  cute::SM90_TMA_LOAD_2D::copy(desc, reinterpret_cast<uint64_t*>(bar), kCacheHintNormal, smem,
                               crd0, crd1);
}

__device__ __forceinline__ void tma_load_3d(const void* desc, Barrier* bar, void* smem,
                                            int32_t crd0, int32_t crd1, int32_t crd2) {
  constexpr uint64_t kCacheHintNormal = 0x1000000000000000ull;
  cute::SM90_TMA_LOAD_3D::copy(desc, reinterpret_cast<uint64_t*>(bar), kCacheHintNormal, smem,
                               crd0, crd1, crd2);
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

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
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

// An operand shared by the CTAs of a cluster: one CTA's box lands at the same offset of every
// CTA in `cta_mask`, completing bytes on the barrier at the same offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(const void* desc, Barrier* bar, void* smem,
                                                      int32_t crd0, int32_t crd1,
                                                      uint16_t cta_mask) {
  constexpr uint64_t kCacheHintNormal = 0x1000000000000000ull;
  cute::SM90_TMA_LOAD_MULTICAST_2D::copy(desc, reinterpret_cast<uint64_t*>(bar), cta_mask,
                                         kCacheHintNormal, smem, crd0, crd1);
}
__device__ __forceinline__ void tma_load_3d_multicast(const void* desc, Barrier* bar, void* smem,
                                                      int32_t crd0, int32_t crd1, int32_t crd2,
                                                      uint16_t cta_mask) {
  constexpr uint64_t kCacheHintNormal = 0x1000000000000000ull;
  cute::SM90_TMA_LOAD_MULTICAST_3D::copy(desc, reinterpret_cast<uint64_t*>(bar), cta_mask,
                                         kCacheHintNormal, smem, crd0, crd1, crd2);
}

// A math warp gives a stage back to the producer(s): lane 0 arrives on its own CTA's empty
// barrier; with a cluster, lane r arrives on CTA r's (each CTA's producer multicasts into this
// CTA's stage too). CTA-scope release, as CUTLASS's consumer release: the wgmma reads it orders
// have retired (warpgroup wait) before the arrive. A cluster-scope release compiles to
// MEMBAR.ALL.GPU once per k-block and warp; with it the cluster kernels ran 1.5-2x slower
// than one CTA per tile.
// With a cluster only the first warp of each math warpgroup signals (`signaling_warp`), as
// CUTLASS does: a wgmma is one operation of the whole warpgroup, so once any of its warps has
// seen a batch retire, the warpgroup's reads of that stage are over; the empty barriers count
// one arrive per warpgroup and CTA instead of one per warp.
template <uint32_t kClusterSize>
__device__ __forceinline__ void release_stage(Barrier& empty, uint32_t lane_idx,
                                              bool signaling_warp) {
  if constexpr (kClusterSize == 1) {
    if (lane_idx == 0) empty.arrive();
  } else {
    if (signaling_warp && lane_idx < kClusterSize) {
      const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(&empty));
      asm volatile(
          "{\n\t.reg .b32 remote;\n\t"
          "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
          "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}" ::"r"(addr),
          "r"(lane_idx)
          : "memory");
    }
  }
}

__device__ __forceinline__ void prefetch_tma_desc(const void* desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

// Programmatic dependent launch: wait until the previous grid's writes are visible; let the
// next grid begin its prologue. Both are no-ops when the launch did not enable PDL.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" :::);
}

// One thread sets up a kernel's TMA -> math pipeline: prefetches both operand descriptors and
// initialises the stage barriers (full: the producer's one arrive plus TMA bytes; empty:
// `num_releases` arrives, one per math warp, or with a cluster one per math warpgroup of every
// CTA).
template <uint32_t kNumStages>
__device__ __forceinline__ void init_pipeline(const void* tma_a, const void* tma_b, Barrier* full,
                                              Barrier* empty, uint32_t num_releases) {
  prefetch_tma_desc(tma_a);
  prefetch_tma_desc(tma_b);
#pragma unroll
  for (uint32_t s = 0; s < kNumStages; ++s) {
    full[s].init(1);
    empty[s].init(num_releases);
  }
  cutlass::arch::fence_barrier_init();
}

__device__ __forceinline__ uint32_t warp_idx_sync() {
  return __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
}

}  // namespace moegemm::sm90
