// SM90 FP8 x FP4 GEMM with swapped operands, m-grouped or dense: D[r, n] as in
// impls/sm90_fp8_fp4_grouped_gemm.cuh, weight rows on the wgmma's M side as register operands,
// tokens (BLOCK_M of them, Config::kBlockM) on its N side. Two compositions of the skeleton
// (kernels/sm90_persistent_gemm.cuh), by the weights' layout (Config::kPreparedWeights):
//
// Prepared weights (python/moegemm/api/mxfp4_weights.py; every M, tokens 8..128):
//   loader     TableWeightLoader: tokens' E4M3 rows, the thread-ordered codes and the offsets
//              words by TMA, the tokens' scales by the producer's lanes,
//   MMA        Fp4TableMma (mma/sm90_fp4_table_mma.cuh): the whole tile; per k-block the table
//              conversion of k-block kb + 1 runs while kb's 4 RS wgmma do, then the promotion,
// Checkpoint weights (the raw OCP layout; decode only, tokens 8..64):
//   loader     PackedWeightLoader: tokens, packed codes, and both scales by the lanes,
//   MMA        Fp4RegisterMma (mma/sm90_fp4_register_mma.cuh): per k-block and pass, convert
//              16 registers, 4 wgmma into a temporary set, wait, promote,
// and for both
//   scheduler  Config::Scheduler: any of the four layouts' walks over token blocks and
//              64 x kNumMathWG weight rows,
//   epilogue   store_transposed (epilogue/sm90_swap_ab_store.cuh) or the fused MoE layer's
//              SwiGLU / RowScale stores, BF16 from registers.
//
// Warp roles (1 + kNumMathWG warpgroups of 128 threads):
//   warpgroup 0      producer: TMA boxes by one lane, scales by all 32 (cp.async).
//   warpgroups 1..W  math, 64 weight rows each; the conversion is their work, so several of
//                    them share the SM's integer pipes and one converts while another's wgmma
//                    runs. setmaxnreg.inc by what the producer gives back.
// Pipeline: one TMA ring, kNumStages: full[s] 1 + 32 arrivals + the boxes' bytes; empty[s] one
//   arrive per math warp after its warpgroup's last wgmma on the stage has retired.
// Shared memory: [tokens | codes | token scales | offsets words (prepared) or scale words] x
//   kNumStages, the checkpoint path's conversion tables (128 bytes a math warpgroup), barriers.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include <moegemm/common/sm90_fp8_fp4_params.h>
#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_swap_ab_store.cuh>
#include <moegemm/epilogue/moe_stores.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_fp4_register_mma.cuh>
#include <moegemm/mma/sm90_fp4_table_mma.cuh>
#include <moegemm/scheduler/dense_scheduler.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

template <typename Config>
struct Fp8Fp4SwapAbGemmKernel {
  using Params = Sm90Fp8Fp4GemmParams;
  using Scheduler = typename Config::Scheduler;
  using Work = Tile;
  static constexpr uint32_t BLOCK_M = Config::kBlockM;  // tokens
  static constexpr uint32_t BLOCK_N = Config::kBlockN;  // weight rows
  static constexpr uint32_t BLOCK_K = Config::kBlockK;
  static constexpr uint32_t kNumStages = Config::kNumStages;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterSize = 1;
  static_assert(Config::kSwapAB && Config::kClusterM == 1 && Config::kClusterN == 1 &&
                    Config::kStoreCols == 0 && !Config::kWithC,
                "swapped operands, one CTA per tile, BF16 register stores without C");
  static_assert(BLOCK_K == 128, "one k-block per activation scale");
  static_assert(BLOCK_N == 64 * kNumMathWG, "each math warpgroup owns 64 weight rows");
  static constexpr bool kPrepared = Config::kPreparedWeights;
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= (kPrepared ? 128 : 64),
                "tokens on N: 8..128 (prepared weights), 8..64 (checkpoint layout)");
  static constexpr bool kTmaStore = false;
  // The checkpoint path's conversion tables, 128 bytes a math warpgroup.
  static constexpr uint32_t kEpilogueSmemBytes = kPrepared ? 0 : 1024;

  using Loader = std::conditional_t<kPrepared, TableWeightLoader<BLOCK_M, BLOCK_N>,
                                    PackedWeightLoader<BLOCK_M, BLOCK_N>>;
  using Transform = NoTransform;
  using Mma = std::conditional_t<kPrepared, Fp4TableMma<BLOCK_M, BLOCK_N>,
                                 Fp4RegisterMma<BLOCK_M, BLOCK_N>>;
  // The fused MoE layer's epilogues (epilogue/functors.cuh): SwiGLU or RowScale.
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;

  __device__ __forceinline__ static Scheduler make_scheduler(const Params& params) {
    return Scheduler(GroupingArgs{params.m, params.n, params.num_groups, params.group_info});
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params& params) {
    return (params.k + BLOCK_K - 1) / BLOCK_K;
  }
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t k_blocks, const Tile&) {
    return k_blocks;
  }
  // Weight rows all past N (the last n-block of a multi-warpgroup tile).
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
using Fp8Fp4SwapAbGemm = PersistentGemm<Fp8Fp4SwapAbGemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Fp8Fp4SwapAbGemm<Config>::kNumThreads, 1)
    sm90_fp8_fp4_swap_ab_gemm_kernel(const __grid_constant__ Sm90Fp8Fp4GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Fp8Fp4SwapAbGemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
