// SM90 BF16 k-grouped GEMM (MoE weight gradients), TN:
//   D[g, m, n] = sum over rows t of group g of A[t, m] * B[t, n] (+ C[g, m, n]), FP32 out.
// Group g owns rows [offs[g-1], offs[g]) of A [T, M] and B [T, N]; the reduction runs down their
// rows, so both operands are MN-major in shared memory and wgmma reads them transposed.
// The skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     MnMajorChunkLoader (64-wide chunks; its fixup zeroes group tails),
//   MMA        MnMajorMma (each math warpgroup owns 64 of the tile's M columns),
//   scheduler  KGroupedScheduler (largest groups first, rounds snaked over the CTAs), with the
//              k-blocks of a tile and C from KGroupedWork (kernels/grouped_work.cuh, shared
//              with SM100),
//   epilogue   Identity or AddC; TMA stores of 32 FP32 columns or register stores.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads, one more with a transform):
//   warpgroup 0      producer. One elected thread issues the TMA loads: per k-block, BLOCK_M/64
//                    boxes of A and BLOCK_N/64 boxes of B, each 64 columns x BLOCK_K rows.
//   warpgroups 1..W  math. wgmma m64 x BLOCK_N x 16 with both operands MN-major; then the FP32
//                    epilogue (+ C). With kStoreCols = 32 the results go through two 8 KB
//                    shared-memory chunks per warpgroup and TMA stores
//                    (epilogue/sm90_tma_store.cuh, NamedBarrier::kStoreF32 + warpgroup), so the writes
//                    overlap the next tile (with C = D, as TMA reduce-adds that never read C);
//                    kStoreCols = 0, or a warpgroup whose 64 rows run past its group's M,
//                    stores from registers.
// Pipeline: kNumStages stages; full[s] (arrive count 1 + TMA bytes) and empty[s] (one arrive per
//   math warp), state (stage_idx, phase) as in the m-grouped kernel.
// Shared memory: [A stages | B stages | D chunks per warpgroup | full | empty barriers].
// Group tails: a group's last k-block may cover rows of the next group. Before using it, the
//   math warpgroups zero those rows of the stage in shared memory (whole 128-byte rows, so the
//   swizzle does not matter), fence the generic->async proxy and sync among themselves (named
//   barrier 1, all math threads).
// Tiles: every group has the same M x N output, so the tile count is known on the host; empty
//   groups still write their tile (C or zeros). Groups are walked largest first and rounds of
//   tiles snake over the CTAs (scheduler/k_grouped_scheduler.cuh), so ragged groups do not
//   pile onto a few CTAs. Every warp of the producer and math warpgroups builds that order.
#pragma once

#include <cuda_bf16.h>

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/epilogue/sm90_register_store.cuh>
#include <moegemm/epilogue/sm90_tma_store.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/grouped_work.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/scheduler/k_grouped_scheduler.cuh>

namespace moegemm::sm90 {

// The tile order, k-blocks per tile and C: KGroupedWork (kernels/grouped_work.cuh).
template <typename Config>
struct Bf16KGroupedGemmKernel : KGroupedWork<Config, Bf16KGroupedParams> {
  using Base = KGroupedWork<Config, Bf16KGroupedParams>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::BLOCK_K;
  using typename Base::Params, typename Base::Work;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterSize = 1;
  static constexpr uint32_t kStoreCols = Config::kStoreCols;
  static_assert(BLOCK_M == 64 * kNumMathWG, "each math warpgroup owns 64 columns of M");
  static_assert(BLOCK_N % 64 == 0 && BLOCK_N <= 256, "B is loaded in 64-wide chunks");
  static_assert(kStoreCols == 0 || kStoreCols == 32, "FP32 TMA stores use 128-byte rows");
  static constexpr bool kTmaStore = kStoreCols != 0;
  static constexpr uint32_t kBytesDPerWG = kStoreCols ? 2 * 64 * kStoreCols * 4 : 0;
  static constexpr uint32_t kEpilogueSmemBytes = kNumMathWG * kBytesDPerWG;

  using Loader = MnMajorChunkLoader<BLOCK_M, BLOCK_N, BLOCK_K, 128 * kNumMathWG>;
  using Transform = transform_of_t<Config>;
  using Mma = MnMajorMma<__nv_bfloat16, BLOCK_N, BLOCK_K, Loader::kChunkBytes>;

  __device__ __forceinline__ static bool math_idle(const Params&, const Work&, uint32_t) {
    return false;  // every warpgroup writes its 64 rows (C or zeros for an empty group)
  }

  __device__ __forceinline__ static void epilogue(const Params& params, typename Mma::Accum& acc,
                                                  const Work& tile, uint32_t math_wg,
                                                  uint8_t* smem_d) {
    const uint32_t row_end = tile.group * params.m + params.m;
    const uint32_t row0 = tile.group * params.m + tile.m0 + math_wg * 64;
    // Built, then assigned (the form the C path's registers were allocated with; initializing
    // it from Base::functor swaps two of them).
    typename Base::Epilogue functor{};
    if constexpr (Base::kWithC) functor = Base::functor(params);
    if constexpr (kTmaStore) {
      if (row0 + 64 <= row_end) {
        store_accumulators_tma_f32<BLOCK_N>(acc.v[0], smem_d + math_wg * kBytesDPerWG,
                                            &params.tma_d, params.n, row0, tile.n0, NamedBarrier::kStoreF32 + math_wg,
                                            functor, params.c == params.d);
        return;
      }
    }
    store_accumulators<BLOCK_N, float>(acc.v[0], params.d, params.n, row_end, params.n, row0,
                                       tile.n0, functor);
  }
};

template <typename Config>
using Bf16KGroupedGemm = PersistentGemm<Bf16KGroupedGemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Bf16KGroupedGemm<Config>::kNumThreads, 1)
    sm90_bf16_k_grouped_gemm_kernel(const __grid_constant__ Bf16KGroupedParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Bf16KGroupedGemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
