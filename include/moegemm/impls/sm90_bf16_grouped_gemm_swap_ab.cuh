// SM90 BF16 m-grouped GEMM with A and B swapped on the MMA, for decode: D[r, n] = sum_k A[r, k]
// B[g(r), n, k], computed as D^T = B A^T so that the expert's weight rows fill the wgmma's 64-row
// M side and a group's few tokens fill its N side (BLOCK_M tokens, 8 to 128). A tile is BLOCK_M
// tokens of one group x BLOCK_N = 64 x kNumMathWG weight rows; the Scheduler (GroupWalkScheduler
// for the offsets and masked layouts) hands tiles out exactly as for the unswapped kernel, so
// the tile's names keep their meaning: row0/row_end are token rows of A and D, n_block indexes N.
// The skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     KMajorLoader (A: BLOCK_M token rows, B: BLOCK_N weight rows; no cluster),
//   MMA        SwapAbMma (weights as the wgmma's A operand, tokens as its B),
//   scheduler  Config::Scheduler (MGroupedWork, kernels/grouped_work.cuh),
//   epilogue   SwapAbTiles (kernels/sm90_m_grouped.cuh, shared with the FP8 x FP4 swap-AB
//              kernel): store_transposed (epilogue/sm90_swap_ab_store.cuh) with Identity, or
//              for the fused MoE layer (Config::kMoeEpilogue) RowScale or the SwiGLU store.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads, one more with a transform):
//   warpgroup 0      producer. Warp 0 walks the schedule; one elected lane issues the TMA loads
//                    (A: BLOCK_M token rows, B: BLOCK_N weight rows, 64 k each, 128B swizzle).
//   warpgroups 1..W  math. Warpgroup w owns weight rows [64 w, 64 w + 64) of the tile: wgmma
//                    m64 x BLOCK_M x 16, then stores its transposed accumulators from registers.
// Pipeline: kNumStages stages; full[s] (arrive count 1 + TMA bytes), empty[s] (one arrive per
//   math warp after its warpgroup's wgmma reading s retired; one batch stays in flight), state
//   (stage_idx, phase). Same protocol as impls/sm90_bf16_grouped_gemm.cuh.
// Shared memory: [A stages | B stages | full barriers | empty barriers].
// Tails: TMA zero-fills weight rows past N and k past K; token rows past the group are read
//   (they belong to the next group or lie past A) but never stored. A warpgroup whose weight
//   rows all lie past N runs the idle mainloop (waits and arrives, no wgmma).
#pragma once

#include <cuda_bf16.h>

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_m_grouped.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

// Weight rows per warpgroup, idling and the transposed stores: SwapAbTiles
// (kernels/sm90_m_grouped.cuh).
template <typename Config>
struct Bf16SwapAbGemmKernel : SwapAbTiles<Config, Bf16GemmParams> {
  using Base = SwapAbTiles<Config, Bf16GemmParams>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::BLOCK_K;
  static_assert(BLOCK_K == 64, "one 128-byte swizzle atom of BF16 per row");
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= 128,
                "tokens fill the wgmma's N side: a multiple of 8, at most 128");
  static constexpr uint32_t kEpilogueSmemBytes = 0;

  using Loader = KMajorLoader<__nv_bfloat16, BLOCK_M, BLOCK_N, BLOCK_K>;
  using Transform = transform_of_t<Config>;
  using Mma = SwapAbMma<__nv_bfloat16, BLOCK_M, BLOCK_K>;
};

template <typename Config>
using Bf16SwapAbGemm = PersistentGemm<Bf16SwapAbGemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Bf16SwapAbGemm<Config>::kNumThreads, 1)
    sm90_bf16_grouped_gemm_swap_ab_kernel(const __grid_constant__ Bf16GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Bf16SwapAbGemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
