// The work side of a kernel policy, shared by the SM90 and SM100 skeletons
// (kernels/sm90_persistent_gemm.cuh, kernels/sm100_persistent_gemm.cuh): the Config's tile and
// ring depth, the layout's scheduler, and how many k-blocks each of its tiles runs.
//   MGroupedWork  dense, m_indices, packed offsets or masked: the layout's scheduler over
//                 GroupingArgs, every tile running all of K (K > 0: the API handles K = 0).
//                 Params: m, n, k, num_groups and group_info.
//   KGroupedWork  the k-grouped weight gradient: each tile's reduction runs down its group's
//                 rows (none for an empty group), FP32 out, C optional. Params: offs, m, n,
//                 num_tokens, num_groups, c.
// One CTA per tile for k-grouped work; the m-grouped policies say what clusters they take.
#pragma once

#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/scheduler/k_grouped_scheduler.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm {

// The Config's tile and ring depth, under the names the skeletons read.
template <typename Config>
struct ConfigTile {
  using Scheduler = typename Config::Scheduler;
  static constexpr uint32_t BLOCK_M = Config::kBlockM;
  static constexpr uint32_t BLOCK_N = Config::kBlockN;
  static constexpr uint32_t BLOCK_K = Config::kBlockK;
  static constexpr uint32_t kNumStages = Config::kNumStages;
};

template <typename Config, typename Params_>
struct MGroupedWork : ConfigTile<Config> {
  using Params = Params_;
  using Scheduler = typename Config::Scheduler;
  static constexpr bool kSplitsK = splits_k<Scheduler>::value;
  using Work = std::conditional_t<kSplitsK, SplitTile, Tile>;
  // The fused MoE layer's epilogue (epilogue/functors.cuh), kMoeNone unless the Config names one.
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;

  // A splitting scheduler splits only where the launch brought a workspace (Params::ready).
  __device__ __forceinline__ static Scheduler make_scheduler(const Params& params) {
    const GroupingArgs args{params.m, params.n, params.num_groups, params.group_info};
    if constexpr (kSplitsK) {
      return Scheduler(args, k_blocks(params), params.ready != nullptr);
    } else {
      return Scheduler(args);
    }
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params& params) {
    return (params.k + Config::kBlockK - 1) / Config::kBlockK;
  }
  // Every tile runs all of K, a split tile's part its share.
  template <typename W>
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t k_blocks, const W& work) {
    return k_blocks_of(k_blocks, work);
  }
};

template <typename Config, typename Params_>
struct KGroupedWork : ConfigTile<Config> {
  using Params = Params_;
  using Work = KGroupedTile;
  static constexpr bool kWithC = Config::kWithC;
  using Epilogue = std::conditional_t<kWithC, AddC, Identity>;
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 && !Config::kSwapAB,
                "one CTA per tile, no swapped operands");
  static_assert(std::is_same_v<typename Config::OutT, float>, "FP32 out");

  __device__ __forceinline__ static typename Config::Scheduler make_scheduler(
      const Params& params) {
    using Scheduler = typename Config::Scheduler;
    return Scheduler(params.offs, params.m, params.n, params.num_tokens, params.num_groups);
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params&) { return 0; }
  // A tile's reduction runs over its group's rows: none for an empty group.
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t, const Work& tile) {
    return (tile.row_end - tile.row_start + Config::kBlockK - 1) / Config::kBlockK;
  }
  // D [G, M, N] as [G x M, N]: C, when added, has D's N columns.
  __device__ __forceinline__ static Epilogue functor(const Params& params) {
    Epilogue functor{};
    if constexpr (kWithC) functor = Epilogue{params.c, params.n};
    return functor;
  }
};

}  // namespace moegemm
