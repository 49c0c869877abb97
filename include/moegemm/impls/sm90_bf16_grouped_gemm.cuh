// SM90 BF16 GEMM, NT, dense or m-grouped: D[r, n] = sum_k A[r, k] B[g(r), n, k] (+ C[r, n]),
// persistent and warp-specialized: the skeleton of kernels/sm90_persistent_gemm.cuh with
//   loader     KMajorLoader (A 2D, B 3D; 2x1 clusters share B, 1x2 clusters share A),
//   transform  none (Config::Transform may name one, e.g. the compile test's CopyTransform),
//   MMA        KMajorMma (each math warpgroup owns BLOCK_M / W rows: 1 or 2 wgmma m64 atoms),
//   scheduler  Config::Scheduler: dense, contiguous with per-row group indices, packed with
//              group offsets, masked (scheduler/); each tile names its A/D rows, the group whose
//              B it uses and the row bound its stores respect,
//   epilogue   Identity or AddC (Config::kWithC), TMA stores (Config::kStoreCols != 0) or
//              register stores; for the fused MoE layer (Config::kMoeEpilogue) SwiGLU
//              (epilogue/moe_stores.cuh, D has N / 2 columns) or RowScale, by either path.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads, one more with a transform):
//   warpgroup 0      producer. Warp 0 walks the tile schedule; one elected lane issues the TMA
//                    loads of A and B; setmaxnreg.dec 40.
//   warpgroups 1..W  math. wgmma m64 x BLOCK_N x 16 from shared memory, then the epilogue;
//                    setmaxnreg.inc 232 (less with a transform: the skeleton splits what
//                    the other roles give back).
// Pipeline: a ring of kNumStages stages, each one BLOCK_M x 64 slab of A and one BLOCK_N x 64
//   slab of B (128-byte rows, 128B swizzle).
//   full[s]:  producer -> math. Arrive count 1 (the producer's arrive.expect_tx); completes when
//             the TMA bytes of both slabs have landed.
//   empty[s]: math -> producer. Arrive count = number of math warps (lane 0 of each, after its
//             warpgroup's wgmma reading stage s has retired); with a cluster, the math
//             warpgroups of both CTAs (one warp of each releases a stage on both), so neither
//             producer overwrites a stage the peer still reads. One wgmma batch stays in
//             flight: stage s is released once the batch of stage s + 1 has been issued.
// Clusters of two CTAs sharing one operand by TMA multicast (reachable through config=):
//   - along M (kClusterM = 2, B shared): consecutive m-blocks of one group, the same n-block;
//   - along N (kClusterN = 2, A shared): the same m-block, consecutive n-blocks. No padding for
//     ragged groups (both CTAs hold the same rows); a CTA whose n-block lies past N only keeps
//     the pipeline in step.
//   Cluster barriers after the barrier set-up and before exit.
// Shared memory: [A stages | B stages | D staging | full barriers | empty barriers]; every slab
//   starts on a 1024-byte boundary as the 128B swizzle requires.
// Epilogue (kStoreCols): 0 stores from registers (epilogue/sm90_register_store.cuh). Otherwise a
//   warpgroup whose rows all lie inside the tile's bound (or whose bound is the tensor's end,
//   where TMA clips) stages BF16 results in its own D buffer and issues TMA stores
//   (epilogue/sm90_tma_store.cuh, NamedBarrier::kStoreBf16 + warpgroup), then starts the next tile while
//   the copy engine writes; a warpgroup whose rows cross into another group stores from
//   registers, so no row outside the tile's bound is ever written. MoE epilogues stage only
//   warpgroups whose rows all lie below the bound (RowScale reads each row's scale), SwiGLU's
//   staging holds BLOCK_N / 2 output columns.
// Tails: TMA zero-fills reads past the rows, N and K, so the mainloop needs no bounds checks;
//   rows of a neighbouring group that a tile's A box covers are read but never stored: the
//   epilogue checks rows against the tile's bound and columns against N. A math warpgroup with
//   no row below the bound runs the idle mainloop (one branch per tile, uniform in the
//   warpgroup).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_register_store.cuh>
#include <moegemm/epilogue/moe_stores.cuh>
#include <moegemm/epilogue/sm90_tma_store.cuh>
#include <moegemm/kernels/config_traits.cuh>
#include <moegemm/kernels/sm90_persistent_gemm.cuh>
#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/scheduler/dense_scheduler.cuh>
#include <moegemm/scheduler/group_walk_scheduler.cuh>

namespace moegemm::sm90 {

template <typename Config>
struct Bf16GemmKernel {
  using Params = Bf16GemmParams;
  using OutT = typename Config::OutT;
  using Scheduler = typename Config::Scheduler;
  using Work = Tile;
  static constexpr uint32_t BLOCK_M = Config::kBlockM;
  static constexpr uint32_t BLOCK_N = Config::kBlockN;
  static constexpr uint32_t BLOCK_K = Config::kBlockK;
  static constexpr uint32_t kNumStages = Config::kNumStages;
  static constexpr uint32_t kNumMathWG = Config::kNumMathWG;
  static constexpr uint32_t kClusterM = Config::kClusterM;  // CTAs sharing B
  static constexpr uint32_t kClusterN = Config::kClusterN;  // CTAs sharing A
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
  static constexpr uint32_t kStoreCols = Config::kStoreCols;
  static constexpr bool kWithC = Config::kWithC;
  static_assert(Scheduler::kClusterM == kClusterM && Scheduler::kClusterN == kClusterN,
                "the scheduler hands out the config's cluster tiles");
  static_assert(!Config::kSwapAB, "swapped operands: impls/sm90_bf16_grouped_gemm_swap_ab.cuh");
  static_assert(BLOCK_K == 64, "one 128-byte swizzle atom of BF16 per row");
  static_assert(BLOCK_M % (64 * kNumMathWG) == 0, "each math warpgroup owns whole m64 atoms");
  static constexpr uint32_t kWgRows = BLOCK_M / kNumMathWG;
  static constexpr uint32_t kAtomsM = kWgRows / 64;
  static_assert(kAtomsM == 1 || kAtomsM == 2, "a warpgroup holds at most two m64 accumulators");
  static constexpr bool kTmaStore = kStoreCols != 0;
  static_assert(!kTmaStore || (!kWithC && sizeof(OutT) == 2),
                "the TMA-store epilogue writes BF16 without C");

  using Loader = KMajorLoader<__nv_bfloat16, BLOCK_M, BLOCK_N, BLOCK_K, kClusterM, kClusterN>;
  using Transform = transform_of_t<Config>;
  using Mma = KMajorMma<__nv_bfloat16, BLOCK_N, BLOCK_K, kAtomsM>;
  using Epilogue = std::conditional_t<kWithC, AddC, Identity>;
  // The fused MoE layer's epilogues: BF16 without C.
  static constexpr uint32_t kMoe = moe_epilogue_of<Config>::value;
  static constexpr bool kSwiGlu = kMoe == kMoeSwiGluSilu || kMoe == kMoeSwiGluOai;
  static_assert(kMoe == kMoeNone || (!kWithC && sizeof(OutT) == 2), "MoE epilogues: BF16, no C");
  static_assert(!kSwiGlu || BLOCK_N % (kTmaStore ? 32 : 16) == 0,
                "SwiGLU pairs 8 gate with 8 up columns (staged: whole 16-column outputs)");
  static constexpr uint32_t kOutCols = kSwiGlu ? BLOCK_N / 2 : BLOCK_N;  // D columns a tile
  static constexpr uint32_t kEpilogueSmemBytes = kTmaStore ? BLOCK_M * kOutCols * 2 : 0;
  static constexpr uint32_t kBytesDPerWG = kEpilogueSmemBytes / kNumMathWG;

  __device__ __forceinline__ static Scheduler make_scheduler(const Params& params) {
    return Scheduler(GroupingArgs{params.m, params.n, params.num_groups, params.group_info});
  }
  __device__ __forceinline__ static uint32_t k_blocks(const Params& params) {
    return (params.k + BLOCK_K - 1) / BLOCK_K;
  }
  __device__ __forceinline__ static uint32_t num_k_blocks(uint32_t k_blocks, const Tile&) {
    return k_blocks;  // every tile runs over all of K
  }
  // A group's last m-block often holds rows for the first warpgroup only; with A shared along
  // N, a CTA whose n-block lies past N idles the same way.
  __device__ __forceinline__ static bool math_idle(const Params& params, const Tile& tile,
                                                   uint32_t math_wg) {
    const bool past_n = kClusterN > 1 && tile.n_block * BLOCK_N >= params.n;
    return (kNumMathWG > 1 || kClusterSize > 1) &&
           (tile.row0 + math_wg * kWgRows >= tile.row_end || past_n);
  }

  __device__ __forceinline__ static void epilogue(const Params& params, typename Mma::Accum& acc,
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

// The skeleton composed with the policies above (kNumThreads, kSmemBytes, run).
template <typename Config>
using Bf16Gemm = PersistentGemm<Bf16GemmKernel<Config>>;

template <typename Config>
__global__ void __launch_bounds__(Bf16Gemm<Config>::kNumThreads, 1)
    sm90_bf16_grouped_gemm_kernel(const __grid_constant__ Bf16GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  Bf16Gemm<Config>::run(params);
#endif
}

}  // namespace moegemm::sm90
