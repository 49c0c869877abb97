// SM90 FP8 x FP4 GEMM, NT, dense or m-grouped: D[r, n] = sum_k A[r, k] sfa[r, k/128] *
// W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), A E4M3 with FP32 scales per 128 of K, W MXFP4
// (E2M1 with UE8M0 scales per 32 of K), D BF16; tokens on the wgmma's M side (the prefill
// kernel; impls/sm90_fp8_fp4_swap_ab_gemm.cuh is its decode twin). The skeleton of
// kernels/sm90_persistent_gemm.cuh with, by the weights' layout (Config::kPreparedWeights):
// Prepared weights (python/moegemm/api/mxfp4_weights.py):
//   loader     TableWeightLoader: A, the thread-ordered codes and the offsets words by TMA, the
//              tokens' scales by the producer's lanes,
//   transform  Fp4TableTransform (pipeline/fp4_table_transform.cuh): the table conversion into
//              the E4M3 tile, one warpgroup, or two where the tile's 64-row blocks pair up; a
//              pass per k-block promoted with one factor per 64 weight rows, four exact passes
//              (a factor per weight row) where the preparation flagged a block,
// Checkpoint weights (the raw OCP layout):
//   loader     PackedWeightLoader (A and the packed weights of one 128-wide k-block, both scales
//              by the producer's lanes),
//   transform  Fp4ExpandTransform (pipeline/fp4_expand_transform.cuh): E2M1 -> E4M3 with the
//              scales folded in exactly, one or more passes per k-block (a factor per pass),
// Prepared weights without a transform ring (Config::kTransformStages == 0), convert-ahead:
//   side       Fp4ConvertAhead (pipeline/fp4_convert_ahead.cuh), one warpgroup: converts every
//              unit of the call once into the E4M3 copy w8 in global memory and raises its flag,
//   loader     ConvertedWeightLoader: waits for a tile's flags, then loads w8 like FP8 weights,
//   MMA        Fp8BlockScaledMma: both operands from the TMA ring, a factor per 64 weight rows,
// and for the transform kernels
//   MMA        Fp8PromoteMma (wgmma m64 x BLOCK_N x 32 E4M3, promoted into FP32 every pass with
//              sfa of the row times the pass's weight factors),
//   scheduler  Config::Scheduler: dense, m_indices, offsets or masked (scheduler/), as BF16,
//   epilogue   BF16 TMA stores (Config::kStoreCols != 0) or register stores: the BF16
//              kernel's TokenRowTiles (kernels/sm90_m_grouped.cuh).
//
// Warp roles (1 + T + kNumMathWG warpgroups of 128 threads, T transform warpgroups):
//   warpgroup 0      producer. Warp 0 walks the tile schedule; one elected lane issues the TMA
//                    loads, all 32 lanes cp.async the k-block's scales the TMA does not load
//                    into the stage; setmaxnreg.dec 40 (32 beside two transform warpgroups).
//   warpgroups 1..T  transform. Wait for the stage, write each pass's E4M3 tile and its
//                    metadata into a transform stage.
//   the rest         math, 64 rows of A each: wait for the TMA stage (A) and each pass's
//                    transform stage (W as E4M3), wgmma, wait, promote; then the epilogue.
// Pipelines:
//   TMA ring, kNumStages: full[s] arrive count 1 + 32 (the producer's expect-tx arrive and one
//     cp.async arrive per producer lane: the scales) + the bytes of the boxes; empty[s] 4
//     arrives per transform warpgroup + one per math warp (A is read by the math warpgroups).
//   transform ring, Config::kTransformStages: tfull[t] 128 T arrives (every transform thread,
//     after its stores and fence.proxy.async), tempty[t] one arrive per math warp.
// Shared memory: [A | W codes | sfa | sfb or offsets words] x kNumStages, [W E4M3 | pass
//   metadata] x kTransformStages, the checkpoint transform's tables, D staging (TMA stores),
//   barriers.
// Tails: TMA zero-fills past K, N and the rows; activation scales of rows past the tile's bound
//   read as 0 (never stored); weight scales past N or K are not read (the prepared layout pads K
//   with zero codes to 128).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include <moegemm/common/sm90_fp8_fp4_params.h>
#include <moegemm/kernels/sm90_m_grouped.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_fp8_promote_mma.cuh>
#include <moegemm/pipeline/fp4_convert_ahead.cuh>
#include <moegemm/pipeline/fp4_expand_transform.cuh>
#include <moegemm/pipeline/fp4_table_transform.cuh>
#include <moegemm/scheduler/dense_scheduler.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

// Rows, idling and the epilogue: TokenRowTiles (kernels/sm90_m_grouped.cuh), with one m64 atom
// per math warpgroup and no C.
template <typename Config>
struct Fp8Fp4GemmKernel : TokenRowTiles<Config, Sm90Fp8Fp4GemmParams> {
  using Base = TokenRowTiles<Config, Sm90Fp8Fp4GemmParams>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::BLOCK_K, Base::kNumMathWG, Base::kWgRows;
  using Base::kTmaStore, Base::kMoe;
  static_assert(Config::kClusterM == 1 && Config::kClusterN == 1 && !Config::kWithC,
                "FP8 x FP4: one CTA per tile, BF16 out without C");
  static_assert(BLOCK_K == 128, "one k-block per activation scale");
  static_assert(BLOCK_M == 64 * kNumMathWG, "each math warpgroup owns one m64 atom");
  // The fused MoE layer's epilogues (epilogue/functors.cuh): BF16 register stores.
  static_assert(kMoe == kMoeNone || !kTmaStore, "MoE epilogues store from registers");

  static constexpr bool kPrepared = Config::kPreparedWeights;
  // Prepared weights without a transform ring: the convert-ahead composition.
  static constexpr bool kConvertAhead = kPrepared && Config::kTransformStages == 0;
  using Loader = std::conditional_t<
      kConvertAhead, ConvertedWeightLoader<BLOCK_M, BLOCK_N>,
      std::conditional_t<kPrepared, TableWeightLoader<BLOCK_M, BLOCK_N>,
                         PackedWeightLoader<BLOCK_M, BLOCK_N>>>;
  using Transform = std::conditional_t<
      kConvertAhead, NoTransform,
      std::conditional_t<kPrepared, Fp4TableTransform<BLOCK_N, Config::kTransformStages>,
                         Fp4ExpandTransform<BLOCK_N, Config::kTransformStages>>>;
  using Mma = std::conditional_t<kConvertAhead, Fp8BlockScaledMma<BLOCK_N>, Fp8PromoteMma<BLOCK_N>>;
  using Side = std::conditional_t<kConvertAhead, Fp4ConvertAhead, NoSide>;

  // The activation scales of this thread's two rows (wgmma D fragment rows) at the stage's
  // k-block, from the stage's scale slab (the producer wrote 0 past the tile's row bound).
  template <typename Stages>
  __device__ __forceinline__ static void row_scales(const StageRef& stage, uint32_t math_wg,
                                                    uint32_t math_tid, float& lo, float& hi) {
    const uint32_t t = math_tid % 128;
    const float* sfa = reinterpret_cast<const float*>(Stages::template slab<2>(stage));
    const uint32_t r = math_wg * kWgRows + (t / 32) * 16 + (t % 32) / 4;
    lo = sfa[r];
    hi = sfa[r + 8];
  }
};

template <typename Config>
using Fp8Fp4Gemm = PersistentGemm<Fp8Fp4GemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Fp8Fp4Gemm<Config>::kNumThreads, 1)
    sm90_fp8_fp4_grouped_gemm_kernel(const __grid_constant__ Sm90Fp8Fp4GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Fp8Fp4Gemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
