// SM90 BF16 k-grouped GEMM (MoE weight gradients), TN:
//   D[g, m, n] = sum over rows t of group g of A[t, m] * B[t, n] (+ C[g, m, n]), FP32 out.
// Group g owns rows [offs[g-1], offs[g]) of A [T, M] and B [T, N]; the reduction runs down their
// rows, so both operands are MN-major in shared memory and wgmma reads them transposed.
//
// Warp roles (kNumMathWG + 1 warpgroups of 128 threads):
//   warpgroup 0      producer. One elected thread issues the TMA loads: per k-block, BLOCK_M/64
//                    boxes of A and BLOCK_N/64 boxes of B, each 64 columns x BLOCK_K rows.
//   warpgroups 1..W  math. Each owns 64 of the tile's M columns: wgmma m64 x BLOCK_N x 16 with
//                    both operands MN-major; then the FP32 epilogue (+ C). With kStoreCols = 32
//                    the results go through two 8 KB shared-memory chunks per warpgroup and TMA
//                    stores (epilogue/sm90_tma_store.cuh, named barrier 2 + warpgroup), so the
//                    writes overlap the next tile (with C = D, as TMA reduce-adds that never
//                    read C); kStoreCols = 0, or a warpgroup
//                    whose 64 rows run past its group's M, stores from registers.
// Pipeline: kNumStages stages; full[s] (arrive count 1 + TMA bytes) and empty[s] (one arrive per
//   math warp), state (stage_idx, phase) as in the m-grouped kernel.
// Group tails: a group's last k-block may cover rows of the next group. Before using it, the
//   math warpgroups zero those rows of the stage in shared memory (whole 128-byte rows, so the
//   swizzle does not matter), fence the generic->async proxy and sync among themselves.
// Tiles: every group has the same M x N output, so the tile count is known on the host; empty
//   groups still write their tile (C or zeros). Groups are walked largest first and rounds of
//   tiles snake over the CTAs (scheduler/sm90_k_grouped_order.cuh), so ragged groups do not
//   pile onto a few CTAs. Every warp of the producer and math warpgroups builds that order.
#pragma once

#include <moegemm/common/sm90_gemm_params.h>
#include <moegemm/common/stage_variant.h>
#include <moegemm/epilogue/sm90_direct_store.cuh>
#include <moegemm/epilogue/sm90_tma_store.cuh>
#include <moegemm/ptx/sm90.cuh>
#include <moegemm/scheduler/sm90_k_grouped_order.cuh>

// Stage variants (common/stage_variant.h; benchmarks/stage_breakdown.py): bit 0 skips the wgmma,
// bit 1 the epilogue's stores, bit 2 the zeroing of group tails; bit 3 zeroes them per
// warpgroup (no barrier across warpgroups); bit 4 walks the tiles round-robin in group order
// (the order before largest-first; its results are right).

namespace moegemm::sm90 {

// Descriptor of an MN-major tile stored as 128-byte rows (64 BF16 along M or N) per k, with
// the 128B swizzle: 8 k-rows form a 1024-byte atom (stride byte offset); 64-wide MN chunks lie
// `chunk_bytes` apart (leading byte offset).
__device__ __forceinline__ uint64_t make_smem_desc_mn128b(const void* smem_ptr,
                                                           uint32_t chunk_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((chunk_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

#define MOEGEMM_WGMMA_BF16_MN_ATOM(N)                                                    \
  template <>                                                                            \
  struct WgmmaAtomMN<N> {                                                                \
    using Type = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_SS<                       \
        cute::SM90::GMMA::Major::MN, cute::SM90::GMMA::Major::MN>;                       \
  };
template <int N>
struct WgmmaAtomMN;
MOEGEMM_WGMMA_BF16_MN_ATOM(64) MOEGEMM_WGMMA_BF16_MN_ATOM(128)
MOEGEMM_WGMMA_BF16_MN_ATOM(192) MOEGEMM_WGMMA_BF16_MN_ATOM(256)
#undef MOEGEMM_WGMMA_BF16_MN_ATOM

template <int N, size_t... I>
__device__ __forceinline__ void wgmma_bf16_mn_impl(uint64_t desc_a, uint64_t desc_b, float* acc,
                                                   std::index_sequence<I...>) {
  WgmmaAtomMN<N>::Type::fma(desc_a, desc_b, acc[I]..., cute::SM90::GMMA::ScaleOut::One);
}

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kNumStages,
          uint32_t kNumMathWG, bool kWithC, uint32_t kStoreCols>
struct KGroupedTraits {
  static_assert(BLOCK_M == 64 * kNumMathWG, "each math warpgroup owns 64 columns of M");
  static_assert(BLOCK_N % 64 == 0 && BLOCK_N <= 256, "B is loaded in 64-wide chunks");
  static_assert(BLOCK_K % 16 == 0 && BLOCK_K % 8 == 0, "whole k16 steps and 8-row atoms");
  static_assert(kStoreCols == 0 || kStoreCols == 32, "FP32 TMA stores use 128-byte rows");
  static constexpr uint32_t kChunkBytes = BLOCK_K * 128;  // one 64-wide column chunk, all k
  static constexpr uint32_t kBytesA = BLOCK_M / 64 * kChunkBytes;
  static constexpr uint32_t kBytesB = BLOCK_N / 64 * kChunkBytes;
  static constexpr uint32_t kBytesDPerWG = kStoreCols ? 2 * 64 * kStoreCols * 4 : 0;
  static constexpr uint32_t kSmemBytes =
      kNumStages * (kBytesA + kBytesB) + kNumMathWG * kBytesDPerWG + kNumStages * 16;
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kNumStages,
          uint32_t kNumMathWG, bool kWithC, uint32_t kStoreCols>
__global__ void __launch_bounds__(128 * (kNumMathWG + 1), 1)
    sm90_bf16_k_grouped_gemm_kernel(const __grid_constant__ Sm90Bf16KGroupedParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Traits =
      KGroupedTraits<BLOCK_M, BLOCK_N, BLOCK_K, kNumStages, kNumMathWG, kWithC, kStoreCols>;
  constexpr uint32_t kChunkBytes = Traits::kChunkBytes;
  constexpr uint32_t kBytesA = Traits::kBytesA;
  constexpr uint32_t kBytesB = Traits::kBytesB;
  constexpr uint32_t kNumMathThreads = 128 * kNumMathWG;

  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + kNumStages * kBytesA;
  uint8_t* sD = sB + kNumStages * kBytesB;
  auto* full = reinterpret_cast<Barrier*>(sD + kNumMathWG * Traits::kBytesDPerWG);
  auto* empty = full + kNumStages;

  const uint32_t warp_idx = warp_idx_sync();
  const uint32_t lane_idx = threadIdx.x % 32;
  if (warp_idx == 0 && lane_idx == 0) {
    init_pipeline<kNumStages>(&params.tma_a, &params.tma_b, full, empty, 4 * kNumMathWG);
    if constexpr (kStoreCols != 0) prefetch_tma_desc(&params.tma_d);
  }
  __syncthreads();
  pdl_wait();
  pdl_launch_dependents();

  const uint32_t num_m_blocks = (params.m + BLOCK_M - 1) / BLOCK_M;
  const uint32_t num_n_blocks = (params.n + BLOCK_N - 1) / BLOCK_N;
  const uint32_t tiles_per_group = num_m_blocks * num_n_blocks;
  // Rows [start, end) of group g, clamped so malformed offsets cannot reach outside A and B.
  auto group_rows = [&](uint32_t g, uint32_t& start, uint32_t& end) {
    const int32_t lo = g == 0 ? 0 : __ldg(params.offs + g - 1);
    const int32_t hi = __ldg(params.offs + g);
    start = min(static_cast<uint32_t>(max(lo, 0)), params.num_tokens);
    end = max(min(static_cast<uint32_t>(max(hi, 0)), params.num_tokens), start);
  };
  auto rows_of = [&](uint32_t g) {
    uint32_t start, end;
    group_rows(g, start, end);
    return end - start;
  };
  using TileOrder = KGroupedTileOrder<(MOEGEMM_STAGE_VARIANT & 16) == 0>;

  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (warp_idx != 0) return;
    // The whole warp walks the tile order (warp-cooperative); one lane issues the loads.
    const bool leader = cute::elect_one_sync();
    TileOrder order(params.num_groups, tiles_per_group, rows_of);
    uint32_t stage_idx = 0, phase = 0, g, local;
    while (order.next(g, local)) {
      const uint32_t m0 = (local % num_m_blocks) * BLOCK_M, n0 = (local / num_m_blocks) * BLOCK_N;
      uint32_t start, end;
      group_rows(g, start, end);
      for (uint32_t row = start; leader && row < end; row += BLOCK_K) {
        empty[stage_idx].wait(phase ^ 1);
        full[stage_idx].arrive_and_expect_tx(kBytesA + kBytesB);
#pragma unroll
        for (uint32_t c = 0; c < BLOCK_M / 64; ++c)
          tma_load_2d(&params.tma_a, &full[stage_idx],
                      sA + stage_idx * kBytesA + c * kChunkBytes,
                      static_cast<int32_t>(m0 + c * 64), static_cast<int32_t>(row));
#pragma unroll
        for (uint32_t c = 0; c < BLOCK_N / 64; ++c)
          tma_load_2d(&params.tma_b, &full[stage_idx],
                      sB + stage_idx * kBytesB + c * kChunkBytes,
                      static_cast<int32_t>(n0 + c * 64), static_cast<int32_t>(row));
        stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
        phase ^= stage_idx == 0;
      }
      __syncwarp();
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<232>();
    const uint32_t math_wg = threadIdx.x / 128 - 1;
    const uint32_t math_tid = threadIdx.x - 128;
    uint32_t stage_idx = 0, phase = 0;
    float acc[BLOCK_N / 2];
    TileOrder order(params.num_groups, tiles_per_group, rows_of);
    uint32_t g, local;
    while (order.next(g, local)) {
      const uint32_t m0 = (local % num_m_blocks) * BLOCK_M, n0 = (local / num_m_blocks) * BLOCK_N;
      uint32_t start, end;
      group_rows(g, start, end);
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_N / 2; ++i) acc[i] = 0.0f;

      uint32_t prev_stage = 0, kb_done = 0;
      for (uint32_t row = start; row < end; row += BLOCK_K) {
        full[stage_idx].wait(phase);
        uint8_t* stage_a = sA + stage_idx * kBytesA;
        uint8_t* stage_b = sB + stage_idx * kBytesB;
        const uint32_t valid = min(end - row, BLOCK_K);
        if constexpr ((MOEGEMM_STAGE_VARIANT & 8) != 0) {
          // Timing build: each warpgroup zeroes its own A chunk and all of B and waits for its
          // own threads only (128-thread named barrier), instead of both warpgroups meeting.
          if (valid < BLOCK_K) {
            const uint32_t wg_tid = math_tid % 128;
            constexpr uint32_t kChunks = 1 + BLOCK_N / 64;
            const uint32_t vectors_per_chunk = (BLOCK_K - valid) * 8;
            for (uint32_t v = wg_tid; v < kChunks * vectors_per_chunk; v += 128) {
              const uint32_t chunk = v / vectors_per_chunk, in_chunk = v % vectors_per_chunk;
              uint8_t* base = chunk == 0 ? stage_a + math_wg * kChunkBytes
                                         : stage_b + (chunk - 1) * kChunkBytes;
              *reinterpret_cast<uint4*>(base + valid * 128 + in_chunk * 16) = make_uint4(0, 0, 0, 0);
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("bar.sync %0, 128;" ::"r"(4 + math_wg) : "memory");
          }
        } else if ((MOEGEMM_STAGE_VARIANT & 4) == 0 && valid < BLOCK_K) {
          // Zero the k-rows past the group's end in every chunk of A and B, 16 bytes a thread.
          constexpr uint32_t kChunks = (BLOCK_M + BLOCK_N) / 64;
          const uint32_t vectors_per_chunk = (BLOCK_K - valid) * 8;
          for (uint32_t v = math_tid; v < kChunks * vectors_per_chunk; v += kNumMathThreads) {
            const uint32_t chunk = v / vectors_per_chunk, in_chunk = v % vectors_per_chunk;
            uint8_t* base = chunk < BLOCK_M / 64 ? stage_a + chunk * kChunkBytes
                                                 : stage_b + (chunk - BLOCK_M / 64) * kChunkBytes;
            *reinterpret_cast<uint4*>(base + valid * 128 + in_chunk * 16) = make_uint4(0, 0, 0, 0);
          }
          // Make the zeros visible to wgmma (async proxy) before any warpgroup issues it.
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          asm volatile("bar.sync 1, %0;" ::"n"(kNumMathThreads) : "memory");
        }
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_N / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
        cute::warpgroup_arrive();
#pragma unroll
        for (uint32_t kk = 0; kk < BLOCK_K / 16; ++kk) {
          // 16 k-rows of 128 bytes per step: two whole swizzle atoms, so no intra-atom offset.
          const uint64_t desc_a =
              make_smem_desc_mn128b(stage_a + math_wg * kChunkBytes + kk * 2048, kChunkBytes);
          const uint64_t desc_b = make_smem_desc_mn128b(stage_b + kk * 2048, kChunkBytes);
          if constexpr ((MOEGEMM_STAGE_VARIANT & 1) == 0)
            wgmma_bf16_mn_impl<BLOCK_N>(desc_a, desc_b, acc,
                                        std::make_index_sequence<BLOCK_N / 2>{});
        }
        cute::warpgroup_commit_batch();
        // Keep this k-block's wgmma in flight while the next stage is awaited: only the
        // previous one must have retired before its stage goes back to the producer.
        cute::warpgroup_wait<1>();
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_N / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
        if (lane_idx == 0 && kb_done > 0) empty[prev_stage].arrive();
        prev_stage = stage_idx;
        ++kb_done;
        stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
        phase ^= stage_idx == 0;
      }
      cute::warpgroup_wait<0>();
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_N / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
      if (lane_idx == 0 && kb_done > 0) empty[prev_stage].arrive();

      const uint32_t row_end = g * params.m + params.m;
      const uint32_t row0 = g * params.m + m0 + math_wg * 64;
      if constexpr ((MOEGEMM_STAGE_VARIANT & 2) != 0) {
        // Timing build without stores: keep the accumulators live so the wgmma stays.
        if (acc[0] == 1.2345e-30f) params.d[threadIdx.x] = acc[1];
        continue;
      }
      if constexpr (kStoreCols != 0) {
        if (row0 + 64 <= row_end) {
          store_accumulators_tma_f32<BLOCK_N, kWithC>(acc, sD + math_wg * Traits::kBytesDPerWG,
                                                      &params.tma_d, params.c, params.n,
                                                      params.n, row0, n0, 2 + math_wg,
                                                      params.c == params.d);
          continue;
        }
      }
      store_accumulators<BLOCK_N, kWithC, float>(acc, params.d, params.c, params.n, params.n,
                                                 row_end, params.n, row0, n0);
    }
    // The CTA's shared memory must outlive the copy engine's reads of the staging buffers.
    if constexpr (kStoreCols != 0)
      if (threadIdx.x % 128 == 0) tma_store_drain();
  }
#endif
}

}  // namespace moegemm::sm90
