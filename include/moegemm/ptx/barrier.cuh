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

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

__device__ __forceinline__ uint32_t warp_idx_sync() {
  return __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
}

}  // namespace moegemm
