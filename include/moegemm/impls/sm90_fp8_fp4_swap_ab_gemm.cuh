// SM90 FP8 x FP4 decode GEMM, m-grouped (packed offsets or masked): D[r, n] as in
// impls/sm90_fp8_fp4_grouped_gemm.cuh, with the operands swapped: weight rows on the wgmma's M
// side as register operands, tokens (BLOCK_M = 8..64 of them, Config::kBlockM) on its N side.
// The skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     PackedWeightLoader<BLOCK_M tokens, BLOCK_N weight rows> (the same stage as the
//              prefill kernel's: tokens' E4M3 rows, packed weights, both scales),
//   transform  none: each math warpgroup expands its own 64 weight rows into registers,
//   MMA        Fp4RegisterMma (mma/sm90_fp4_register_mma.cuh): per k-block and pass, 16
//              converted registers, wgmma m64 x BLOCK_M x 32 (RS), wait, promote with the
//              row's weight factor times the token's scale,
//   scheduler  Config::Scheduler: the grouped walk (offsets or masked) over token blocks and
//              64 x kNumMathWG weight rows,
//   epilogue   store_transposed (epilogue/sm90_swap_ab_store.cuh), BF16 register stores.
//
// Warp roles (1 + kNumMathWG warpgroups of 128 threads):
//   warpgroup 0      producer: TMA boxes by one lane, scales by all 32 (cp.async), as prefill.
//   warpgroups 1..W  math, 64 weight rows each; the conversion is their work, so several of
//                    them share the SM's integer pipes and one converts while another's wgmma
//                    runs. setmaxnreg.inc by what the producer gives back.
// Pipeline: one TMA ring, kNumStages: full[s] 1 + 32 arrivals + the boxes' bytes; empty[s] one
//   arrive per math warp after its warpgroup's last wgmma on the stage has retired.
// Shared memory: [tokens | packed weights | sfa | sfb words] x kNumStages, the math warpgroups'
//   conversion tables (128 bytes each, in the epilogue's region), barriers.
// Status: run and tested on the H200 (tests/test_fp8_fp4_decode_gpu.py); the heuristics pick it
//   at decode by cost (heuristics/sm90_fp8_fp4_decode.py).
#pragma once

#include <cuda_bf16.h>

#include <moegemm/common/sm90_fp8_fp4_params.h>
#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_swap_ab_store.cuh>
#include <moegemm/epilogue/moe_stores.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_fp4_register_mma.cuh>
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
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= 64, "tokens on N: 8..64");
  static constexpr bool kTmaStore = false;
  static constexpr uint32_t kEpilogueSmemBytes = 1024;  // the math warpgroups' tables

  using Loader = PackedWeightLoader<BLOCK_M, BLOCK_N>;
  using Transform = NoTransform;
  using Mma = Fp4RegisterMma<BLOCK_M, BLOCK_N, Config::kPreparedWeights>;
  // The fused MoE layer's epilogues (epilogue/functors.cuh): SwiGLU or RowScale.
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;
  static_assert(Mma::kTableBytes * kNumMathWG <= kEpilogueSmemBytes, "tables fit");

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
