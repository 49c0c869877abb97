// SM90 BF16 GEMM, NT, dense or m-grouped: D[r, n] = sum_k A[r, k] B[g(r), n, k] (+ C[r, n]),
// persistent and warp-specialized: the skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     KMajorLoader (A 2D, B 3D; 2x1 clusters share B, 1x2 clusters share A),
//   transform  none (Config::Transform may name one, e.g. the compile test's CopyTransform),
//   MMA        KMajorMma (each math warpgroup owns BLOCK_M / W rows: 1 or 2 wgmma m64 atoms),
//   scheduler  Config::Scheduler: dense, contiguous with per-row group indices, packed with
//              group offsets, masked (scheduler/), built by MGroupedWork
//              (kernels/grouped_work.cuh); each tile names its A/D rows, the group whose B it
//              uses and the row bound its stores respect,
//   epilogue   TokenRowTiles (kernels/sm90_m_grouped.cuh, shared with the FP8 x FP4 kernel):
//              Identity or AddC (Config::kWithC), TMA stores (Config::kStoreCols != 0) or
//              register stores; for the fused MoE layer (Config::kMoeEpilogue) SwiGLU
//              (epilogue/moe_stores.cuh, D has N / 2 columns) or RowScale, by either path.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads, one more with a transform):
//   warpgroup 0      producer. Warp 0 walks the tile schedule; one elected lane issues the TMA
//                    loads of A and B; setmaxnreg.dec 40.
//   warpgroups 1..W  math. wgmma m64 x BLOCK_N x 16 from shared memory, then the epilogue;
//                    setmaxnreg.inc 232 (less with a transform: the skeleton splits what
//                    the other roles give back).
// Pipeline: a ring of kNumStages stages, each one BLOCK_M x 64 slab of A and one BLOCK_N x 64
//   slab of B (128-byte rows, 128B swizzle).
//   full[s]:  producer -> math. Arrive count 1 (the producer's arrive.expect_tx); completes when
//             the TMA bytes of both slabs have landed.
//   empty[s]: math -> producer. Arrive count = number of math warps (lane 0 of each, after its
//             warpgroup's wgmma reading stage s has retired); with a cluster, the math
//             warpgroups of both CTAs (one warp of each releases a stage on both), so neither
//             producer overwrites a stage the peer still reads. One wgmma batch stays in
//             flight: stage s is released once the batch of stage s + 1 has been issued.
// Clusters of two CTAs sharing one operand by TMA multicast (reachable through config=):
//   - along M (kClusterM = 2, B shared): consecutive m-blocks of one group, the same n-block;
//   - along N (kClusterN = 2, A shared): the same m-block, consecutive n-blocks. No padding for
//     ragged groups (both CTAs hold the same rows); a CTA whose n-block lies past N only keeps
//     the pipeline in step.
//   Cluster barriers after the barrier set-up and before exit.
// Shared memory: [A stages | B stages | D staging | full barriers | empty barriers]; every slab
//   starts on a 1024-byte boundary as the 128B swizzle requires.
// Epilogue (kStoreCols): 0 stores from registers (epilogue/sm90_register_store.cuh). Otherwise a
//   warpgroup whose rows all lie inside the tile's bound (or whose bound is the tensor's end,
//   where TMA clips) stages BF16 results in its own D buffer and issues TMA stores
//   (epilogue/sm90_tma_store.cuh, NamedBarrier::kStoreBf16 + warpgroup), then starts the next tile while
//   the copy engine writes; a warpgroup whose rows cross into another group stores from
//   registers, so no row outside the tile's bound is ever written. MoE epilogues stage only
//   warpgroups whose rows all lie below the bound (RowScale reads each row's scale), SwiGLU's
//   staging holds BLOCK_N / 2 output columns.
// Tails: TMA zero-fills reads past the rows, N and K, so the mainloop needs no bounds checks;
//   rows of a neighbouring group that a tile's A box covers are read but never stored: the
//   epilogue checks rows against the tile's bound and columns against N. A math warpgroup with
//   no row below the bound runs the idle mainloop (one branch per tile, uniform in the
//   warpgroup).
#pragma once

#include <cuda_bf16.h>

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_m_grouped.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/scheduler/dense_scheduler.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

// Rows, idling and the epilogue: TokenRowTiles (kernels/sm90_m_grouped.cuh).
template <typename Config>
struct Bf16GemmKernel : TokenRowTiles<Config, Bf16GemmParams> {
  using Base = TokenRowTiles<Config, Bf16GemmParams>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::BLOCK_K, Base::kClusterM, Base::kClusterN;
  using Base::kAtomsM;
  static_assert(BLOCK_K == 64, "one 128-byte swizzle atom of BF16 per row");

  using Loader = KMajorLoader<__nv_bfloat16, BLOCK_M, BLOCK_N, BLOCK_K, kClusterM, kClusterN>;
  using Transform = transform_of_t<Config>;
  using Mma = KMajorMma<__nv_bfloat16, BLOCK_N, BLOCK_K, kAtomsM>;
};

// The skeleton composed with the policies above (kNumThreads, kSmemBytes, run).
template <typename Config>
using Bf16Gemm = PersistentGemm<Bf16GemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Bf16Gemm<Config>::kNumThreads, 1)
    sm90_bf16_grouped_gemm_kernel(const __grid_constant__ Bf16GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Bf16Gemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
