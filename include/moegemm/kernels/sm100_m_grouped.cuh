// What the SM100 m-grouped compositions (impls/sm100_bf16_grouped_gemm.cuh and
// impls/sm100_fp8_fp4_grouped_gemm.cuh: dense, m_indices, packed offsets or masked) share, as
// the base of their policies for kernels/sm100_persistent_gemm.cuh: the Config's tile and ring
// depth, one CTA per tile (cta_group::1, no clusters), stores from registers, the MMA's sides by
// orientation (swap-AB: the weights' BLOCK_N rows on M, the tile's BLOCK_M tokens on N), the
// layout's scheduler over GroupingArgs, and every tile running all of K (K > 0: the API handles
// K = 0), so no tile is empty. The policies name the rest (loader, MMA, epilogue).
// Params: m, n, k, num_groups and group_info, as Bf16GemmParams and Sm100Fp8Fp4GemmParams name
// them. Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm::sm100 {

template <typename Config, typename Params_>
struct MGroupedTiles {
  using Params = Params_;
  using OutT = typename Config::OutT;
  using Scheduler = typename Config::Scheduler;
  using Work = Tile;
  static constexpr uint32_t BLOCK_M = Config::kBlockM;
  static constexpr uint32_t BLOCK_N = Config::kBlockN;
  static constexpr uint32_t BLOCK_K = Config::kBlockK;
  static constexpr uint32_t kNumStages = Config::kNumStages;
  static constexpr bool kSwapAB = Config::kSwapAB;
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 && Scheduler::kClusterM == 1 &&
                    Scheduler::kClusterN == 1,
                "one CTA per tile (cta_group::1)");
  static_assert(Config::kStoreCols == 0, "stores from registers");
  static_assert(Config::kStripeM == 0 || !kSwapAB, "swapped tiles walk whole groups");
  static constexpr uint32_t kUmmaM = kSwapAB ? BLOCK_N : BLOCK_M;
  static constexpr uint32_t kUmmaN = kSwapAB ? BLOCK_M : BLOCK_N;
  static constexpr bool kEmptyTiles = false;

  __device__ __forceinline__ static Scheduler make_scheduler(const Params& params) {
    return Scheduler(GroupingArgs{params.m, params.n, params.num_groups, params.group_info});
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params& params) {
    return (params.k + BLOCK_K - 1) / BLOCK_K;
  }
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t k_blocks, const Work&) {
    return k_blocks;  // every tile runs all of K
  }
};

}  // namespace moegemm::sm100
