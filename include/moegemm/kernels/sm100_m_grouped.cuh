// What the SM100 m-grouped compositions (impls/sm100_bf16_grouped_gemm.cuh and
// impls/sm100_fp8_fp4_grouped_gemm.cuh: dense, m_indices, packed offsets or masked) share, as
// the base of their policies for kernels/sm100_persistent_gemm.cuh: the work side of
// MGroupedWork (kernels/grouped_work.cuh, shared with SM90: the Config's tile and ring depth,
// the layout's scheduler over GroupingArgs, every tile running all of K, so no tile is empty),
// one CTA per tile (cta_group::1, no clusters), stores from registers and the MMA's sides by
// orientation (swap-AB: the weights' BLOCK_N rows on M, the tile's BLOCK_M tokens on N). The
// policies name the rest (loader, MMA, epilogue).
// Params: m, n, k, num_groups and group_info, as Bf16GemmParams and Sm100Fp8Fp4GemmParams name
// them. Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#include <moegemm/kernels/grouped_work.cuh>

namespace moegemm::sm100 {

template <typename Config, typename Params_>
struct MGroupedTiles : MGroupedWork<Config, Params_> {
  using Base = MGroupedWork<Config, Params_>;
  using Base::BLOCK_M, Base::BLOCK_N;
  using OutT = typename Config::OutT;
  static constexpr bool kSwapAB = Config::kSwapAB;
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 &&
                    Config::Scheduler::kClusterM == 1 && Config::Scheduler::kClusterN == 1,
                "one CTA per tile (cta_group::1)");
  static_assert(Config::kStoreCols == 0, "stores from registers");
  static_assert(Config::kStripeM == 0 || !kSwapAB, "swapped tiles walk whole groups");
  static constexpr uint32_t kUmmaM = kSwapAB ? BLOCK_N : BLOCK_M;
  static constexpr uint32_t kUmmaN = kSwapAB ? BLOCK_M : BLOCK_N;
  static constexpr bool kEmptyTiles = false;
};

}  // namespace moegemm::sm100
