// SM90 BF16 m-grouped GEMM with A and B swapped on the MMA, for decode: D[r, n] = sum_k A[r, k]
// B[g(r), n, k], computed as D^T = B A^T so that the expert's weight rows fill the wgmma's 64-row
// M side and a group's few tokens fill its N side (BLOCK_M tokens, 8 to 128). A tile is BLOCK_M
// tokens of one group x BLOCK_N = 64 x kNumMathWG weight rows; the Scheduler (GroupWalkScheduler
// for the offsets and masked layouts) hands tiles out exactly as for the unswapped kernel, so
// the tile's names keep their meaning: row0/row_end are token rows of A and D, n_block indexes N.
// The skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     KMajorLoader (A: BLOCK_M token rows, B: BLOCK_N weight rows; no cluster),
//   MMA        SwapAbMma (weights as the wgmma's A operand, tokens as its B),
//   epilogue   store_transposed (epilogue/sm90_swap_ab_store.cuh) with Identity, or for the
//              fused MoE layer (Config::kMoeEpilogue) RowScale or the SwiGLU store.
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
#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_swap_ab_store.cuh>
#include <moegemm/epilogue/moe_stores.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

template <typename Config>
struct Bf16SwapAbGemmKernel {
  using Params = Bf16GemmParams;
  using Scheduler = typename Config::Scheduler;
  using Work = Tile;
  static constexpr uint32_t BLOCK_M = Config::kBlockM;
  static constexpr uint32_t BLOCK_N = Config::kBlockN;
  static constexpr uint32_t BLOCK_K = Config::kBlockK;
  static constexpr uint32_t kNumStages = Config::kNumStages;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterSize = 1;
  static_assert(Config::kSwapAB, "unswapped operands: impls/sm90_bf16_grouped_gemm.cuh");
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 &&
                    Scheduler::kClusterM == 1 && Scheduler::kClusterN == 1,
                "no clusters with swapped operands");
  static_assert(Config::kStoreCols == 0 && !Config::kWithC, "register stores of BF16, no C");
  static_assert(BLOCK_K == 64, "one 128-byte swizzle atom of BF16 per row");
  static_assert(BLOCK_N == 64 * kNumMathWG, "each math warpgroup owns 64 weight rows");
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= 128,
                "tokens fill the wgmma's N side: a multiple of 8, at most 128");
  static constexpr bool kTmaStore = false;
  static constexpr uint32_t kEpilogueSmemBytes = 0;
  // The fused MoE layer's epilogues (epilogue/functors.cuh): SwiGLU or RowScale.
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;

  using Loader = KMajorLoader<__nv_bfloat16, BLOCK_M, BLOCK_N, BLOCK_K>;
  using Transform = transform_of_t<Config>;
  using Mma = SwapAbMma<__nv_bfloat16, BLOCK_M, BLOCK_K>;

  __device__ __forceinline__ static Scheduler make_scheduler(const Params& params) {
    return Scheduler(GroupingArgs{params.m, params.n, params.num_groups, params.group_info});
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params& params) {
    return (params.k + BLOCK_K - 1) / BLOCK_K;
  }
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t k_blocks, const Tile&) {
    return k_blocks;  // every tile runs over all of K
  }
  // Weight rows all past N (the last n-block of a two-warpgroup tile).
  __device__ __forceinline__ static bool math_idle(const Params& params, const Tile& tile,
                                                   uint32_t math_wg) {
    return kNumMathWG > 1 && tile.n_block * BLOCK_N + math_wg * 64 >= params.n;
  }

  __device__ __forceinline__ static void epilogue(const Params& params, typename Mma::Accum& acc,
                                                  const Tile& tile, uint32_t math_wg,
                                                  uint8_t* /*smem_d*/) {
    const uint32_t n0 = tile.n_block * BLOCK_N + math_wg * 64;
    if constexpr (kMoe != kMoeNone) {
      store_moe_transposed<BLOCK_M, kMoe>(acc.v[0], params, tile, n0);
    } else {
      store_transposed<BLOCK_M>(acc.v[0], static_cast<__nv_bfloat16*>(params.d), params.ldd,
                                tile.row0, tile.row_end, n0, params.n, Identity{});
    }
  }
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
