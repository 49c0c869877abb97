// SM90 BF16 m-grouped GEMM with A and B swapped on the MMA, for decode: D[r, n] = sum_k A[r, k]
// B[g(r), n, k], computed as D^T = B A^T so that the expert's weight rows fill the wgmma's 64-row
// M side and a group's few tokens fill its N side (BLOCK_M tokens, 8 to 128). A tile is BLOCK_M
// tokens of one group x BLOCK_N = 64 x kNumMathWG weight rows; the Scheduler (GroupWalkScheduler
// for the offsets and masked layouts) hands tiles out exactly as for the unswapped kernel, so
// the tile's names keep their meaning: row0/row_end are token rows of A and D, n_block indexes N.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads):
//   warpgroup 0      producer. Warp 0 walks the schedule; one elected lane issues the TMA loads
//                    (A: BLOCK_M token rows, B: BLOCK_N weight rows, 64 k each, 128B swizzle).
//   warpgroups 1..W  math. Warpgroup w owns weight rows [64 w, 64 w + 64) of the tile: wgmma
//                    m64 x BLOCK_M x 16 with the weights as the A operand and the tokens as B,
//                    then stores its transposed accumulators from registers.
// Pipeline: kNumStages stages; full[s] (arrive count 1 + TMA bytes), empty[s] (one arrive per
//   math warp after its warpgroup's wgmma reading s retired; one batch stays in flight), state
//   (stage_idx, phase). Same protocol as impls/sm90_bf16_grouped_gemm.cuh.
// Tails: TMA zero-fills weight rows past N and k past K; token rows past the group are read
//   (they belong to the next group or lie past A) but never stored. A warpgroup whose weight
//   rows all lie past N runs a mainloop without wgmma that keeps the waits and arrives.
// Epilogue: thread t holds weight rows r, r + 8 (r = 16 (t / 32) + (t % 32) / 4) for token
//   pairs 8 j + 2 (t % 4) + {0, 1}. Lanes t and t ^ 4 hold neighbouring weight rows, so one
//   shuffle turns each pair of values into two adjacent BF16 columns of one token row: 4-byte
//   stores, bounds-checked against the group's rows and N.
#pragma once

#include <cuda_bf16.h>

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/common/timeline_probe.cuh>
#include <moegemm/ptx/sm90.cuh>
#include <moegemm/scheduler/sm90_grouped_scheduler.cuh>

namespace moegemm::sm90 {

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kNumStages,
          uint32_t kNumMathWG>
struct SwapAbTraits {
  static_assert(BLOCK_K == 64, "one 128-byte swizzle atom of BF16 per row");
  static_assert(BLOCK_N == 64 * kNumMathWG, "each math warpgroup owns 64 weight rows");
  static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= 128,
                "tokens fill the wgmma's N side: a multiple of 8, at most 128");
  static constexpr uint32_t kNumMathWarps = 4 * kNumMathWG;
  static constexpr uint32_t kBytesA = BLOCK_M * BLOCK_K * 2;
  static constexpr uint32_t kBytesB = BLOCK_N * BLOCK_K * 2;
  static_assert(kBytesA % 1024 == 0 && kBytesB % 1024 == 0, "slices must keep 1024B alignment");
  static constexpr uint32_t kSmemBytes = kNumStages * (kBytesA + kBytesB) + kNumStages * 16;
};

// Writes warpgroup accumulators acc[BLOCK_M / 2] (weight rows n0 + 0..63, token columns
// row0 + 0..BLOCK_M-1) into D[token, n] (BF16, row stride ldd), tokens below row_end, n below n.
template <uint32_t BLOCK_M>
__device__ __forceinline__ void store_transposed(const float* acc, __nv_bfloat16* d, uint32_t ldd,
                                                 uint32_t row0, uint32_t row_end, uint32_t n0,
                                                 uint32_t n) {
  const uint32_t t = threadIdx.x % 128;
  const uint32_t lane_row = (t % 32) / 4;  // lanes t and t ^ 4 hold rows lane_row and lane_row ^ 1
  const bool even = lane_row % 2 == 0;
  const uint32_t weight_row = n0 + 16 * (t / 32) + lane_row;
#pragma unroll
  for (uint32_t j = 0; j < BLOCK_M / 8; ++j) {
#pragma unroll
    for (uint32_t half = 0; half < 2; ++half) {
      const float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
      // Even rows keep token c and take the odd neighbour's value for it; odd rows keep c + 1.
      const float other = __shfl_xor_sync(0xffffffffu, even ? y : x, 4);
      const uint32_t token = row0 + 8 * j + 2 * (t % 4) + (even ? 0 : 1);
      const uint32_t col = weight_row + 8 * half - (even ? 0 : 1);
      if (token < row_end && col < n) {
        *reinterpret_cast<__nv_bfloat162*>(d + static_cast<uint64_t>(token) * ldd + col) =
            even ? __floats2bfloat162_rn(x, other) : __floats2bfloat162_rn(other, y);
      }
    }
  }
}

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kNumStages,
          uint32_t kNumMathWG, typename Scheduler>
__global__ void __launch_bounds__(128 * (kNumMathWG + 1), 1)
    sm90_bf16_grouped_gemm_swap_ab_kernel(const __grid_constant__ Sm90Bf16GemmParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Traits = SwapAbTraits<BLOCK_M, BLOCK_N, BLOCK_K, kNumStages, kNumMathWG>;
  static_assert(Scheduler::kClusterM == 1 && Scheduler::kClusterN == 1,
                "no clusters with swapped operands");

  TimelineProbe probe;  // stage variant bit 3 only (common/timeline_probe.cuh)
  probe.stamp(0);
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + kNumStages * Traits::kBytesA;
  auto* full = reinterpret_cast<Barrier*>(sB + kNumStages * Traits::kBytesB);
  auto* empty = full + kNumStages;

  const uint32_t warp_idx = warp_idx_sync();
  const uint32_t lane_idx = threadIdx.x % 32;
  if (warp_idx == 0 && lane_idx == 0) {
    init_pipeline<kNumStages>(&params.tma_a, &params.tma_b, full, empty, Traits::kNumMathWarps);
  }
  __syncthreads();

  // Everything above overlaps the previous kernel under PDL; global memory is touched only below.
  pdl_wait();
  pdl_launch_dependents();

  const uint32_t num_k_blocks = (params.k + BLOCK_K - 1) / BLOCK_K;
  const GroupingArgs grouping{params.m, params.n, params.num_groups, params.group_info};
  Scheduler scheduler(grouping);
  Tile tile;

  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (warp_idx != 0) return;
    // The whole warp walks the schedule (a warp-cooperative search); one lane issues.
    const bool leader = cute::elect_one_sync();
    uint32_t stage_idx = 0, phase = 0;
    probe.stamp(1);
    while (scheduler.next(tile)) {
      probe.stamp_once(2);
      probe.count_tile();
      if (leader) {
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          empty[stage_idx].wait(phase ^ 1);
          full[stage_idx].arrive_and_expect_tx(Traits::kBytesA + Traits::kBytesB);
          const int32_t k_crd = static_cast<int32_t>(kb * BLOCK_K);
          tma_load_2d(&params.tma_a, &full[stage_idx], sA + stage_idx * Traits::kBytesA, k_crd,
                      static_cast<int32_t>(tile.row0));
          tma_load_3d(&params.tma_b, &full[stage_idx], sB + stage_idx * Traits::kBytesB, k_crd,
                      static_cast<int32_t>(tile.n_block * BLOCK_N),
                      static_cast<int32_t>(tile.group));
          stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
          phase ^= stage_idx == 0;
        }
      }
      __syncwarp();
    }
    probe.stamp(3);
    if (lane_idx == 0) probe.print('P');
  } else {
    cutlass::arch::warpgroup_reg_alloc<232>();
    const uint32_t math_wg = threadIdx.x / 128 - 1;
    uint32_t stage_idx = 0, phase = 0;
    float acc[BLOCK_M / 2];
    while (scheduler.next(tile)) {
      const uint32_t n0 = tile.n_block * BLOCK_N + math_wg * 64;
      // Weight rows all past N (the last n-block of a two-warpgroup tile): keep the pipeline's
      // waits and arrives without wgmma. Outside the wgmma loop, so ptxas keeps it pipelined.
      if (kNumMathWG > 1 && n0 >= params.n) {
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          full[stage_idx].wait(phase);
          __syncwarp();
          if (lane_idx == 0) empty[stage_idx].arrive();
          stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
          phase ^= stage_idx == 0;
        }
        continue;
      }
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_M / 2; ++i) acc[i] = 0.0f;

      uint32_t prev_stage = 0, kb_done = 0;
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        full[stage_idx].wait(phase);
        probe.stamp_once(1);
        const uint64_t desc_w =
            make_smem_desc_k128b(sB + stage_idx * Traits::kBytesB + math_wg * 64 * 128);
        const uint64_t desc_t = make_smem_desc_k128b(sA + stage_idx * Traits::kBytesA);
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_M / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
        cute::warpgroup_arrive();
#pragma unroll
        for (uint32_t kk = 0; kk < BLOCK_K / 16; ++kk)
          wgmma_bf16<BLOCK_M>(advance_desc(desc_w, kk * 32), advance_desc(desc_t, kk * 32), acc);
        cute::warpgroup_commit_batch();
        cute::warpgroup_wait<1>();
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_M / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
        if (lane_idx == 0 && kb_done > 0) empty[prev_stage].arrive();
        prev_stage = stage_idx;
        ++kb_done;
        stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
        phase ^= stage_idx == 0;
      }
      cute::warpgroup_wait<0>();
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_M / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
      if (lane_idx == 0 && kb_done > 0) empty[prev_stage].arrive();
      probe.stamp(2);
      probe.count_tile();

      store_transposed<BLOCK_M>(acc, static_cast<__nv_bfloat16*>(params.d), params.ldd,
                                tile.row0, tile.row_end, n0, params.n);
    }
    probe.stamp(3);
    if (threadIdx.x == 128) probe.print('M');
  }
#endif
}

}  // namespace moegemm::sm90
