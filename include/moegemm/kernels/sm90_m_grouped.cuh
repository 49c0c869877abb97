// What the SM90 m-grouped compositions (dense, m_indices, packed offsets or masked) share by
// orientation, as the bases of their policies for kernels/sm90_persistent_gemm.cuh: the work
// side (MGroupedWork, kernels/grouped_work.cuh), which math warpgroup owns which rows of a tile,
// when one idles, and the epilogue that stores its accumulators. The policies name the rest
// (loader, transform, MMA, their own operand checks).
//   TokenRowTiles  tokens on the wgmma's M side (impls/sm90_bf16_grouped_gemm.cuh,
//                  impls/sm90_fp8_fp4_grouped_gemm.cuh): each math warpgroup owns BLOCK_M / W
//                  rows (1 or 2 m64 atoms); TMA stores (kStoreCols) or register stores, Identity
//                  or AddC, or the fused MoE layer's SwiGLU / RowScale; 2-CTA clusters where the
//                  loader takes them.
//   SwapAbTiles    weights on M, the tile's BLOCK_M tokens on N
//                  (impls/sm90_bf16_grouped_gemm_swap_ab.cuh, impls/sm90_fp8_fp4_swap_ab_gemm.cuh):
//                  each math warpgroup owns 64 weight rows; BF16 transposed register stores
//                  (or SwiGLU / RowScale), no C, no clusters.
#pragma once

#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/moe_stores.cuh>
#include <moegemm/epilogue/sm90_register_store.cuh>
#include <moegemm/epilogue/sm90_swap_ab_store.cuh>
#include <moegemm/epilogue/sm90_tma_store.cuh>
#include <moegemm/kernels/grouped_work.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm::sm90 {

template <typename Config, typename Params_>
struct TokenRowTiles : MGroupedWork<Config, Params_> {
  using Base = MGroupedWork<Config, Params_>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::kMoe;
  using Params = Params_;
  using OutT = typename Config::OutT;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterM = Config::kClusterM;  // CTAs sharing B
  static constexpr uint32_t kClusterN = Config::kClusterN;  // CTAs sharing A
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
  static constexpr uint32_t kStoreCols = Config::kStoreCols;
  static constexpr bool kWithC = Config::kWithC;
  static_assert(Config::Scheduler::kClusterM == kClusterM &&
                    Config::Scheduler::kClusterN == kClusterN,
                "the scheduler hands out the config's cluster tiles");
  static_assert(!Config::kSwapAB, "swapped operands: SwapAbTiles");
  static_assert(BLOCK_M % (64 * kNumMathWG) == 0, "each math warpgroup owns whole m64 atoms");
  static constexpr uint32_t kWgRows = BLOCK_M / kNumMathWG;
  static constexpr uint32_t kAtomsM = kWgRows / 64;
  static_assert(kAtomsM == 1 || kAtomsM == 2, "a warpgroup holds at most two m64 accumulators");
  static constexpr bool kTmaStore = kStoreCols != 0;
  static_assert(!kTmaStore || (!kWithC && sizeof(OutT) == 2),
                "the TMA-store epilogue writes BF16 without C");
  using Epilogue = std::conditional_t<kWithC, AddC, Identity>;
  static constexpr bool kSwiGlu = kMoe == kMoeSwiGluSilu || kMoe == kMoeSwiGluOai;
  static_assert(kMoe == kMoeNone || (!kWithC && sizeof(OutT) == 2), "MoE epilogues: BF16, no C");
  static_assert(!kSwiGlu || BLOCK_N % (kTmaStore ? 32 : 16) == 0,
                "SwiGLU pairs 8 gate with 8 up columns (staged: whole 16-column outputs)");
  static constexpr uint32_t kOutCols = kSwiGlu ? BLOCK_N / 2 : BLOCK_N;  // D columns a tile
  static constexpr uint32_t kEpilogueSmemBytes = kTmaStore ? BLOCK_M * kOutCols * 2 : 0;
  static constexpr uint32_t kBytesDPerWG = kEpilogueSmemBytes / kNumMathWG;

  // A group's last m-block often holds rows for the first warpgroup only; with A shared along
  // N, a CTA whose n-block lies past N idles the same way.
  __device__ __forceinline__ static bool math_idle(const Params& params, const Tile& tile,
                                                   uint32_t math_wg) {
    const bool past_n = kClusterN > 1 && tile.n_block * BLOCK_N >= params.n;
    return (kNumMathWG > 1 || kClusterSize > 1) &&
           (tile.row0 + math_wg * kWgRows >= tile.row_end || past_n);
  }

  // A warpgroup whose rows all lie inside the tile's bound (or, without a MoE epilogue, whose
  // bound is the tensor's end, where TMA clips) stages its results for TMA stores; any other
  // stores from registers, so no row outside the bound is ever written.
  template <typename Accum>
  __device__ __forceinline__ static void epilogue(const Params& params, Accum& acc,
                                                  const Tile& tile, uint32_t math_wg,
                                                  uint8_t* smem_d) {
    const uint32_t row0 = tile.row0 + math_wg * kWgRows;
    if constexpr (kTmaStore && kMoe != kMoeNone) {
      if (row0 + kWgRows <= tile.row_end) {
        uint8_t* staging = smem_d + math_wg * kBytesDPerWG;
        const uint32_t barrier = NamedBarrier::kStoreBf16 + math_wg;
        if constexpr (kSwiGlu) {
          store_swiglu_tma<BLOCK_N, kStoreCols, kAtomsM, kMoe>(
              acc.v, staging, &params.tma_d, row0, tile.n_block * BLOCK_N, params.n / 2,
              group_bias(params, tile), barrier);
        } else {
          const RowScaleInN functor{RowScale{group_bias(params, tile), params.row_scale},
                                    params.n};
          store_accumulators_tma<BLOCK_N, kStoreCols, kAtomsM, true>(
              acc.v, staging, &params.tma_d, row0, tile.n_block * BLOCK_N, barrier, functor);
        }
        return;
      }
    } else if constexpr (kTmaStore) {
      if (row0 + kWgRows <= tile.row_end || tile.row_end >= params.rows) {
        store_accumulators_tma<BLOCK_N, kStoreCols, kAtomsM>(
            acc.v, smem_d + math_wg * kBytesDPerWG, &params.tma_d, row0, tile.n_block * BLOCK_N,
            NamedBarrier::kStoreBf16 + math_wg, Identity{});
        return;
      }
    }
    if constexpr (kMoe != kMoeNone) {
#pragma unroll
      for (uint32_t a = 0; a < kAtomsM; ++a)
        store_moe_block<BLOCK_N, kMoe>(acc.v[a], params, tile, row0 + a * 64);
      return;
    }
    Epilogue functor{};
    if constexpr (kWithC) functor = Epilogue{params.c, params.ldc};
#pragma unroll
    for (uint32_t a = 0; a < kAtomsM; ++a) {
      store_accumulators<BLOCK_N, OutT>(acc.v[a], static_cast<OutT*>(params.d), params.ldd,
                                        tile.row_end, params.n, row0 + a * 64,
                                        tile.n_block * BLOCK_N, functor);
    }
  }
};

template <typename Config, typename Params_>
struct SwapAbTiles : MGroupedWork<Config, Params_> {
  using Base = MGroupedWork<Config, Params_>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::kMoe;
  using Params = Params_;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterSize = 1;
  static_assert(Config::kSwapAB, "unswapped operands: TokenRowTiles");
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 &&
                    Config::Scheduler::kClusterM == 1 && Config::Scheduler::kClusterN == 1,
                "no clusters with swapped operands");
  static_assert(Config::kStoreCols == 0 && !Config::kWithC, "register stores of BF16, no C");
  static_assert(BLOCK_N == 64 * kNumMathWG, "each math warpgroup owns 64 weight rows");
  static constexpr bool kTmaStore = false;

  // Weight rows all past N (the last n-block of a multi-warpgroup tile).
  __device__ __forceinline__ static bool math_idle(const Params& params, const Tile& tile,
                                                   uint32_t math_wg) {
    return kNumMathWG > 1 && tile.n_block * BLOCK_N + math_wg * 64 >= params.n;
  }

  template <typename Accum>
  __device__ __forceinline__ static void epilogue(const Params& params, Accum& acc,
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

}  // namespace moegemm::sm90
