// Barriers: the transaction mbarrier of a pipeline stage (CUTLASS's ClusterTransactionBarrier:
// arrive, expect-tx, parity wait), an arrive on the same barrier of another CTA of the cluster,
// named CTA barriers, the warp index as a uniform value.
#pragma once

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>

#include <stdint.h>

namespace moegemm {

using Barrier = cutlass::arch::ClusterTransactionBarrier;

// Arrives on the barrier at `bar`'s offset in the shared memory of cluster CTA `cta`. Relaxed
// CTA-scope arrive, as CUTLASS's consumer release: a cluster-scope release compiles to
// MEMBAR.ALL.GPU per call (measured 1.5-2x slower in the cluster kernels' mainloop).
__device__ __forceinline__ void arrive_remote(Barrier& bar, uint32_t cta) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  asm volatile(
      "{\n\t.reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}" ::"r"(addr),
      "r"(cta)
      : "memory");
}

// Named barrier ids (bar.sync; id 0 is __syncthreads), all in one table: a hardware barrier
// used by two roles with different thread counts hangs, so compositions must not reuse an id.
// A per-warpgroup range holds kMaxMathWarpgroups ids.
struct NamedBarrier {
  static constexpr uint32_t kMaxMathWarpgroups = 4;
  static constexpr uint32_t kFixup = 1;        // all math threads: the loader's stage fixup
  static constexpr uint32_t kStoreBf16 = 2;    // + warpgroup: BF16 TMA-store staging
  static constexpr uint32_t kStoreF32 = 6;     // + warpgroup: FP32 TMA-store chunks
  // + warpgroup: a split tile's partial sums (the swapped kernels, which store no FP32 by TMA).
  static constexpr uint32_t kSplitFixup = kStoreF32;
  static constexpr uint32_t kIdleRelease = 10; // + warpgroup: an idle warpgroup in a cluster
  // + warpgroup: a math warpgroup's own barrier in a kernel without clusters (the same ids).
  static constexpr uint32_t kMathWarpgroup = kIdleRelease;
  static constexpr uint32_t kTransform = 14;   // the transform warpgroup's exchanges
  // All math threads of the FP8 x FP4 table kernel (which has no fixup): they meet at a tile's
  // start, then warpgroup 0 issues its first wgmma before the others (kIssueOrder).
  static constexpr uint32_t kTileStart = kFixup;
  static constexpr uint32_t kIssueOrder = 15;
  static_assert(kStoreF32 - kStoreBf16 >= kMaxMathWarpgroups &&
                    kIdleRelease - kStoreF32 >= kMaxMathWarpgroups &&
                    kIdleRelease + kMaxMathWarpgroups <= kTransform &&
                    kTransform < kIssueOrder && kIssueOrder <= 15,
                "per-warpgroup ranges must not overlap and ids stop at 15");
};

// A stage barrier by its 32-bit shared address (a uniform base plus 8 x stage: no generic to
// shared conversion per call): whether the phase of parity `phase` has completed (test_wait:
// never suspends the thread; 1 or 0, a word rather than a bool, which ptxas would narrow to a
// byte and test again), and the spin until it has.
__device__ __forceinline__ uint32_t mbarrier_test_wait(uint32_t addr, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(addr), "r"(phase)
      : "memory");
  return done;
}

__device__ __forceinline__ void mbarrier_wait(uint32_t addr, uint32_t phase) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT_%=;\n\t}" ::"r"(addr),
      "r"(phase)
      : "memory");
}

// An arrive (CTA scope, no transaction bytes) on the stage barrier at `addr`.
__device__ __forceinline__ void mbarrier_arrive(uint32_t addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");
}

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// A named barrier that also ORs a predicate over its threads and returns the result to each.
__device__ __forceinline__ bool named_barrier_or(uint32_t id, uint32_t num_threads, bool pred) {
  uint32_t result;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n barrier.red.or.pred p, %2, %3, q;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(result)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(num_threads)
      : "memory");
  return result != 0;
}

__device__ __forceinline__ uint32_t warp_idx_sync() {
  return __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
}

}  // namespace moegemm
