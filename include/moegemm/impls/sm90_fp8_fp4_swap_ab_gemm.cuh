// SM90 FP8 x FP4 GEMM with swapped operands, m-grouped or dense: D[r, n] as in
// impls/sm90_fp8_fp4_grouped_gemm.cuh, weight rows on the wgmma's M side as register operands,
// tokens (BLOCK_M of them, Config::kBlockM) on its N side. Two compositions of the skeleton
// (kernels/sm90_persistent_gemm.cuh), by the weights' layout (Config::kPreparedWeights):
//
// Prepared weights (python/moegemm/api/mxfp4_weights.py; every M, tokens 8..160):
//   loader     TableWeightLoader: tokens' E4M3 rows, the thread-ordered codes (evict-first:
//              streamed once) and the offsets words by TMA, the tokens' scales by the lanes,
//   MMA        Fp4TableMma (mma/sm90_fp4_table_mma.cuh): the whole tile; per k-block the table
//              conversion of k-block kb + 1 runs while kb's 4 RS wgmma do, then the promotion,
// Checkpoint weights (the raw OCP layout; decode only, tokens 8..64):
//   loader     PackedWeightLoader: tokens, packed codes, and both scales by the lanes,
//   MMA        Fp4RegisterMma (mma/sm90_fp4_register_mma.cuh): per k-block and pass, convert
//              16 registers, 4 wgmma into a temporary set, wait, promote,
// and for both
//   scheduler  Config::Scheduler: any of the four layouts' walks over token blocks and
//              64 x kNumMathWG weight rows,
//   epilogue   SwapAbTiles (kernels/sm90_m_grouped.cuh, shared with the BF16 swap-AB
//              kernel): store_transposed (epilogue/sm90_swap_ab_store.cuh) or the fused MoE
//              layer's SwiGLU / RowScale stores, BF16 from registers.
//
// Warp roles (1 + kNumMathWG warpgroups of 128 threads):
//   warpgroup 0      producer: TMA boxes by one lane, scales by all 32 (cp.async). Prepared
//                    weights: its second warp is the relay, which turns each landed stage's
//                    token scales into every math warpgroup's promotion factors.
//   warpgroups 1..W  math, 64 weight rows each; the conversion is their work, so several of
//                    them share the SM's integer pipes and one converts while another's wgmma
//                    runs. setmaxnreg.inc by what the producer gives back. Prepared weights:
//                    all meet at a tile's start (named barrier kTileStart, 128 W threads) and
//                    warpgroup 0 issues its first wgmma batch before the others (kIssueOrder),
//                    so their batches queue one after another and each promotes under
//                    another's wgmma instead of all promoting at once.
// Pipeline: one TMA ring, kNumStages: full[s] 1 + 32 arrivals + the boxes' bytes; empty[s] one
//   arrive per math warp after its warpgroup's last wgmma on the stage has retired; prepared
//   weights add ready[s] (RelayRing): 32 arrivals, the relay's lanes after their writes; the
//   math warps wait on it instead of full[s].
// Shared memory: [tokens | codes | token scales (prepared: the relay's factors, a row per math
//   warpgroup) | offsets words (prepared) or scale words] x
//   kNumStages, the conversion tables (the table MMA's scratch, 2.5 KiB a math warpgroup; the
//   checkpoint path's 128 bytes a math warpgroup), barriers.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include <moegemm/common/sm90_fp8_fp4_params.h>
#include <moegemm/epilogue/split_k_fixup.cuh>
#include <moegemm/kernels/sm90_m_grouped.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_fp4_register_mma.cuh>
#include <moegemm/mma/sm90_fp4_table_mma.cuh>
#include <moegemm/scheduler/dense_scheduler.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>
#include <moegemm/scheduler/tail_split_scheduler.cuh>

namespace moegemm::sm90 {

// Weight rows per warpgroup, idling and the transposed stores: SwapAbTiles
// (kernels/sm90_m_grouped.cuh).
template <typename Config>
struct Fp8Fp4SwapAbGemmKernel : SwapAbTiles<Config, Sm90Fp8Fp4GemmParams> {
  using Base = SwapAbTiles<Config, Sm90Fp8Fp4GemmParams>;
  using Base::BLOCK_M, Base::BLOCK_N, Base::BLOCK_K;  // BLOCK_M tokens, BLOCK_N weight rows
  static_assert(BLOCK_K == 128, "one k-block per activation scale");
  static constexpr bool kPrepared = Config::kPreparedWeights;
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= (kPrepared ? 160 : 64),
                "tokens on N: 8..160 (prepared weights), 8..64 (checkpoint layout)");
  // The epilogue stores from registers, so its region holds the conversion tables: the table
  // MMA's scratch (prepared weights), the checkpoint path's 128 bytes a math warpgroup.
  static constexpr uint32_t kEpilogueSmemBytes =
      kPrepared ? Fp4TableMma<BLOCK_M, BLOCK_N>::kScratchBytes : 1024;

  using Loader = std::conditional_t<kPrepared,
                                    TableWeightLoader<BLOCK_M, BLOCK_N, true,
                                                      Fp4TableMma<BLOCK_M, BLOCK_N>::kScaleFloats>,
                                    PackedWeightLoader<BLOCK_M, BLOCK_N>>;
  using Transform = NoTransform;
  using Mma = std::conditional_t<kPrepared, Fp4TableMma<BLOCK_M, BLOCK_N>,
                                 Fp4RegisterMma<BLOCK_M, BLOCK_N>>;
  static_assert(!kPrepared || !Fp4TableMma<BLOCK_M, BLOCK_N>::kPairedKBlocks ||
                    Config::kNumStages >= 4,
                "paired k-blocks hold two stages and wait for two more");
  static_assert(!Base::kSplitsK || kPrepared, "tiles split along K on prepared weights");

  // A part of a split tile (the split round's SplitTile, parts > 1) stores its sums to the
  // launch's workspace (params.w8 as FP32 slots, params.ready as the tiles' tickets); the part
  // that counts last on its tile's ticket adds every part's and stores the tile.
  template <typename Accum, typename W>
  __device__ __forceinline__ static void epilogue(const Sm90Fp8Fp4GemmParams& params, Accum& acc,
                                                  const W& work, uint32_t math_wg,
                                                  uint8_t* smem_d) {
    if constexpr (std::is_same_v<W, SplitTile>) {
      using Fixup = SplitKFixup<Mma::kNumAccum>;
      constexpr uint32_t W_ = Base::kNumMathWG;
      const uint32_t parts = work.parts();
      if (parts > 1) {
        // Part p of the round's tile t: slot p R + t (R tiles in the round), W words a slot;
        // the tile's ticket t, W words a ticket.
        const uint32_t stride = work.round_tiles() * W_, first = work.round_tile() * W_ + math_wg;
        float* workspace = reinterpret_cast<float*>(params.w8);
        const uint32_t barrier = NamedBarrier::kSplitFixup + math_wg;
        if (!Fixup::finish_part(workspace, params.ready, first + work.part() * stride, first,
                                parts, acc.v[0], barrier))
          return;
        Fixup::add_parts(workspace, first, stride, parts, acc.v[0]);
      }
    }
    Base::epilogue(params, acc, work, math_wg, smem_d);
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
