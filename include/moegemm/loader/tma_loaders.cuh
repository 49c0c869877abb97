// Loader policies of the producer warp: which TMA boxes one k-block of a tile loads into a
// stage, and the bytes the stage's full barrier expects. A loader provides
//   Stages<kNumStages>   the StageLayout of its ring (one slab per operand),
//   kExpectedBytes       what lands in this CTA per stage (all of it, multicast shares included),
//   prefetch(params)     its TMA descriptors (one thread, before the ring is used),
//   load(params, bar, stage, tile, kb, cta_rank)   one elected thread issues the boxes,
//   kNeedsFixup / fixup(...)  the math threads' repair of a landed stage (k-grouped tails),
//   kRolledLoop          the producer's k-block loop stays rolled (else the compiler unrolls).
// FP8 x FP4 loads activations and the weights' codes (Fp8TokenLoader, the base of
// PackedWeightLoader and TableWeightLoader), the scales by the producer warp's lanes.
#pragma once

#include <stdint.h>

#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/pipeline/fp4_convert_ahead.cuh>
#include <moegemm/ptx/global.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/ptx/tma.cuh>
#include <moegemm/scheduler/k_grouped_scheduler.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm {

// K-major A [rows, K] (2D: {K, rows}) and B [G, N, K] (3D: {K, N, G}), both with BLOCK_K-wide
// 128B-swizzled rows: per k-block a BLOCK_M x BLOCK_K box of A at the tile's rows and a
// BLOCK_N x BLOCK_K box of B at its n-block and group. The dense, m-grouped and swap-AB
// kernels load this way (swap-AB only reads the slabs the other way round).
// Clusters of two CTAs share one operand by multicast:
//   kClusterM = 2 (B shared): each CTA loads its own A and half of B's rows, multicast into both;
//   kClusterN = 2 (A shared): each CTA loads half of A's rows, multicast into both, and its B.
// The full barrier still expects both whole slabs: the peer's half lands here too.
template <typename T, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kClusterM = 1,
          uint32_t kClusterN = 1>
struct KMajorLoader {
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
  static_assert(kClusterSize <= 2, "an operand is shared by at most two CTAs, along M or N");
  static_assert(BLOCK_K * sizeof(T) == 128, "one 128-byte swizzle atom per row");
  static_assert(BLOCK_N % (8 * kClusterM) == 0, "each CTA's share of B is whole swizzle atoms");
  static_assert(BLOCK_M % (8 * kClusterN) == 0, "each CTA's share of A is whole swizzle atoms");
  static constexpr uint32_t kBytesA = BLOCK_M * BLOCK_K * sizeof(T);
  static constexpr uint32_t kBytesB = BLOCK_N * BLOCK_K * sizeof(T);
  static constexpr uint32_t kBytesAShare = kBytesA / kClusterN;  // what one CTA's TMA brings
  static constexpr uint32_t kBytesBShare = kBytesB / kClusterM;
  static constexpr uint32_t kExpectedBytes = kBytesA + kBytesB;
  static constexpr uint16_t kClusterMask = (1u << kClusterSize) - 1;
  static constexpr bool kNeedsFixup = false;
  static constexpr bool kRolledLoop = false;
  static constexpr bool kLaneCopies = false;
  static constexpr uint32_t kFillArrivals = 1;
  template <uint32_t kNumStages>
  using Stages = StageLayout<kNumStages, kBytesA, kBytesB>;

  template <typename Params>
  __device__ __forceinline__ static void prefetch(const Params& params) {
    prefetch_tma_desc(&params.tma_a);
    prefetch_tma_desc(&params.tma_b);
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load(const Params& params, Barrier* bar,
                                              const StageRef& stage, const Tile& tile,
                                              uint32_t kb, uint32_t cta_rank) {
    const int32_t k_crd = static_cast<int32_t>(kb * BLOCK_K);
    uint8_t* stage_a = Stages::template slab<0>(stage);
    if constexpr (kClusterN == 1) {
      tma_load_2d(&params.tma_a, bar, stage_a, k_crd, static_cast<int32_t>(tile.row0));
    } else {
      tma_load_2d_multicast(&params.tma_a, bar, stage_a + cta_rank * kBytesAShare, k_crd,
                            static_cast<int32_t>(tile.row0 + cta_rank * (BLOCK_M / kClusterN)),
                            kClusterMask);
    }
    const uint32_t b_rank = kClusterM > 1 ? cta_rank : 0;  // this CTA's share of B
    uint8_t* stage_b = Stages::template slab<1>(stage) + b_rank * kBytesBShare;
    const int32_t n_crd =
        static_cast<int32_t>(tile.n_block * BLOCK_N + b_rank * (BLOCK_N / kClusterM));
    if constexpr (kClusterM == 1) {
      tma_load_3d(&params.tma_b, bar, stage_b, k_crd, n_crd, static_cast<int32_t>(tile.group));
    } else {
      tma_load_3d_multicast(&params.tma_b, bar, stage_b, k_crd, n_crd,
                            static_cast<int32_t>(tile.group), kClusterMask);
    }
  }
};

// What the two FP8 x FP4 loaders share: per 128-wide k-block by TMA a BLOCK_M x 128-byte box
// of the tokens' K-major E4M3 rows A [rows, K] (2D: {K, rows}, 128B swizzle) into slab 0 and a
// BLOCK_N x 64-byte box of the weights' E2M1 codes [G, N, K/2] (3D: {K/2, N, G}) into slab 1
// (zero-filled past K, N and the rows: zero codes are zeros), and by the producer warp's 32
// lanes, with cp.async, the activation scale of each of the tile's BLOCK_M rows into slab 2
// (float; 0 past the tile's row bound or the tensor). The lane copies arrive on the same full
// barrier as the TMA (1 + 32 arrivals), so the scales ride the ring as far ahead as the
// operands do. Slab 3 is the loader's own: the weights' scales in one form or the other.
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
struct Fp8TokenLoader {
  static constexpr uint32_t BLOCK_K = 128;
  static constexpr uint32_t kBytesA = BLOCK_M * BLOCK_K;
  static constexpr uint32_t kBytesB = BLOCK_N * BLOCK_K / 2;
  static constexpr uint32_t kBytesSfa = (BLOCK_M * 4 + 1023) / 1024 * 1024;
  static constexpr bool kNeedsFixup = false;
  static constexpr bool kRolledLoop = false;
  static constexpr bool kLaneCopies = true;
  static constexpr uint32_t kFillArrivals = 1 + 32;

  // One elected thread: the tokens' box and the codes' box of k-block kb.
  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load_operands(const Params& params, Barrier* bar,
                                                       const StageRef& stage, const Tile& tile,
                                                       uint32_t kb) {
    tma_load_2d(&params.tma_a, bar, Stages::template slab<0>(stage),
                static_cast<int32_t>(kb * BLOCK_K), static_cast<int32_t>(tile.row0));
    tma_load_3d(&params.tma_b, bar, Stages::template slab<1>(stage),
                static_cast<int32_t>(kb * BLOCK_K / 2), static_cast<int32_t>(tile.n_block * BLOCK_N),
                static_cast<int32_t>(tile.group));
  }

  // Every lane of the producer warp: its share of k-block kb's activation scales (the caller
  // arrives on the full barrier).
  template <typename Stages, typename Params>
  __device__ __forceinline__ static void copy_token_scales(const Params& params,
                                                           const StageRef& stage,
                                                           const Tile& tile, uint32_t kb,
                                                           uint32_t lane) {
    const uint32_t sfa_slab = smem_u32(Stages::template slab<2>(stage));
    const float* sfa = params.sfa + uint64_t{tile.group} * params.sfa_stride_group +
                       uint64_t{kb} * params.sfa_stride_kb;
    const uint32_t first = tile.group * params.sfa_group_rows;
    const uint32_t bound = min(tile.row_end, params.rows);
#pragma unroll
    for (uint32_t r = lane; r < BLOCK_M; r += 32) {
      const uint32_t row = tile.row0 + r;
      const bool ok = row < bound;
      cp_async_4(sfa_slab + r * 4, ok ? sfa + uint64_t{row - first} * params.sfa_stride_row : sfa,
                 ok ? 4 : 0);
    }
  }
};

// FP8 x FP4 on checkpoint weights: packed E2M1 W [G, N, K/2] in unswizzled 64-byte rows, which
// the transform reads row by row, and by the lanes, besides the tokens' scales
// (Fp8TokenLoader), slab 3: per weight row, the two aligned 32-bit words holding its 4 scale
// bytes of the k-block (a row of K/32 bytes starts anywhere inside a word); zeros past N. The
// transform (or the register MMA) shifts the bytes out (scale_word, below) and never reads past
// K/32.
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
struct PackedWeightLoader : Fp8TokenLoader<BLOCK_M, BLOCK_N> {
  using Base = Fp8TokenLoader<BLOCK_M, BLOCK_N>;
  using Base::kBytesA, Base::kBytesB, Base::kBytesSfa;
  static constexpr uint32_t kBytesSfb = (BLOCK_N * 8 + 1023) / 1024 * 1024;
  static constexpr uint32_t kExpectedBytes = kBytesA + kBytesB;  // the TMA part
  template <uint32_t kNumStages>
  using Stages = StageLayout<kNumStages, kBytesA, kBytesB, kBytesSfa, kBytesSfb>;

  template <typename Params>
  __device__ __forceinline__ static void prefetch(const Params& params) {
    prefetch_tma_desc(&params.tma_a);
    prefetch_tma_desc(&params.tma_b);
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load(const Params& params, Barrier* bar,
                                              const StageRef& stage, const Tile& tile,
                                              uint32_t kb, uint32_t /*cta_rank*/) {
    Base::template load_operands<Stages>(params, bar, stage, tile, kb);
  }

  // Every lane of the producer warp: its share of the k-block's scales, then its arrive.
  template <typename Stages, typename Params>
  __device__ __forceinline__ static void copy_lanes(const Params& params, Barrier* bar,
                                                    const StageRef& stage, const Tile& tile,
                                                    uint32_t kb, uint32_t lane) {
    Base::template copy_token_scales<Stages>(params, stage, tile, kb, lane);
    const uint32_t sfb_slab = smem_u32(Stages::template slab<3>(stage));
    const uint64_t group_start = uint64_t{tile.group} * params.sfb_stride_group;
#pragma unroll
    for (uint32_t r = lane; r < BLOCK_N; r += 32) {
      const uint32_t n = tile.n_block * BLOCK_N + r;
      // Byte offset from the (16-byte aligned) base: the words are aligned to it.
      const uint64_t start = group_start + uint64_t{n} * params.sfb_stride_row + kb * 4;
      const uint32_t valid = params.k / 32 - min(kb * 4, params.k / 32);  // bytes in this row
      const uint32_t need = min(valid, 4u) + static_cast<uint32_t>(start % 4);
      const uint8_t* word = params.sfb + start / 4 * 4;
      const bool ok = n < params.n;
      cp_async_4(sfb_slab + r * 8, ok ? word : params.sfb, ok && need > 0 ? 4 : 0);
      cp_async_4(sfb_slab + r * 8 + 4, ok ? word + 4 : params.sfb, ok && need > 4 ? 4 : 0);
    }
    cp_async_arrive(smem_u32(bar));
  }
};

// The 4 scale bytes of weight row n at k-block kb (byte j: 32-block j of the k-block), out of
// the row's two aligned words `w` that PackedWeightLoader staged: the row's first byte of the
// k-block sits its global byte offset % 4 bytes into the first word.
template <typename Params>
__device__ __forceinline__ uint32_t scale_word(const Params& params, uint32_t group, uint32_t n,
                                               uint32_t kb, const uint2& w) {
  const uint32_t offset = static_cast<uint32_t>(
      (uint64_t{group} * params.sfb_stride_group + uint64_t{n} * params.sfb_stride_row + kb * 4) %
      4);
  return __funnelshift_r(w.x, w.y, 8 * offset);
}

// FP8 x FP4 on prepared weights (mma/sm90_fp4_table_mma.cuh; python/moegemm/api/mxfp4_weights.py
// has the layout): the codes of the tile's BLOCK_N / 64 row blocks at k-block kb, each 4096
// contiguous bytes in memory (the 5-D view of csrc/sm90_fp8_fp4_gemm.cpp: {256, 16, Kb, Np / 64,
// G}) landing as the block's thread-ordered k-block, and, by TMA too, a BLOCK_N-word box of the
// offsets words [G, 2 Kb, Np] (first plane) into slab 3; the lanes copy only the tokens' scales
// (Fp8TokenLoader). kStreamed: the codes are read once (the decode kernel's tile holds all of a
// group's tokens), so they load evict-first and leave L2 to the tokens every weight block of the
// group reads. kScaleFloats: the token-scale slab's floats, BLOCK_M or more (the swap-AB MMA's
// relay writes a row of promotion factors per math warpgroup over the lanes' copy).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kStreamed = false,
          uint32_t kScaleFloats = BLOCK_M>
struct TableWeightLoader : Fp8TokenLoader<BLOCK_M, BLOCK_N> {
  using Base = Fp8TokenLoader<BLOCK_M, BLOCK_N>;
  static_assert(BLOCK_N % 64 == 0, "whole 64-row blocks of codes");
  using Base::kBytesA, Base::kBytesB;
  static_assert(kScaleFloats >= BLOCK_M, "the lanes copy BLOCK_M scales");
  static constexpr uint32_t kBytesSfa = (kScaleFloats * 4 + 1023) / 1024 * 1024;
  static constexpr uint32_t kBytesOffsets = (BLOCK_N * 4 + 1023) / 1024 * 1024;
  static constexpr uint32_t kExpectedBytes = kBytesA + kBytesB + BLOCK_N * 4;  // the TMA part
  template <uint32_t kNumStages>
  using Stages = StageLayout<kNumStages, kBytesA, kBytesB, kBytesSfa, kBytesOffsets>;

  template <typename Params>
  __device__ __forceinline__ static void prefetch(const Params& params) {
    prefetch_tma_desc(&params.tma_a);
    prefetch_tma_desc(&params.tma_b);
    prefetch_tma_desc(&params.tma_sfb);
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load(const Params& params, Barrier* bar,
                                              const StageRef& stage, const Tile& tile,
                                              uint32_t kb, uint32_t /*cta_rank*/) {
    tma_load_2d(&params.tma_a, bar, Stages::template slab<0>(stage),
                static_cast<int32_t>(kb * Base::BLOCK_K), static_cast<int32_t>(tile.row0));
    tma_load_5d(&params.tma_b, bar, Stages::template slab<1>(stage), 0, 0,
                static_cast<int32_t>(kb), static_cast<int32_t>(tile.n_block * (BLOCK_N / 64)),
                static_cast<int32_t>(tile.group),
                kStreamed ? kTmaCacheHintEvictFirst : kTmaCacheHintNormal);
    tma_load_3d(&params.tma_sfb, bar, Stages::template slab<3>(stage),
                static_cast<int32_t>(tile.n_block * BLOCK_N), static_cast<int32_t>(kb),
                static_cast<int32_t>(tile.group));
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void copy_lanes(const Params& params, Barrier* bar,
                                                    const StageRef& stage, const Tile& tile,
                                                    uint32_t kb, uint32_t lane) {
    Base::template copy_token_scales<Stages>(params, stage, tile, kb, lane);
    cp_async_arrive(smem_u32(bar));
  }
};

// FP8 x FP4 convert-ahead (pipeline/fp4_convert_ahead.cuh): the weights as the E4M3 copy w8
// [G, N, Kp] the converter warpgroups write (3D: {Kp, N, G}, BLOCK_N x 128-byte boxes, 128B
// swizzle) into slab 1, the tokens and their scales as Fp8TokenLoader, and the offsets words as
// TableWeightLoader (slab 3: the MMA takes each 64-row block's factor from its first word).
// Before a tile's first load the whole producer warp waits for the ready flags of every unit
// the tile reads (each k-block of its BLOCK_N / 64 blocks, the lanes' flags in flight at once):
// once per tile, so the flags' latency hides behind the stages already in the ring.
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
struct ConvertedWeightLoader : TableWeightLoader<BLOCK_M, BLOCK_N> {
  using Table = TableWeightLoader<BLOCK_M, BLOCK_N>;  // prefetch, copy_lanes, the offsets box
  using Table::kBytesA, Table::kBytesSfa, Table::kBytesOffsets;
  static constexpr uint32_t kBytesB = BLOCK_N * Table::BLOCK_K;  // E4M3
  static constexpr uint32_t kExpectedBytes = kBytesA + kBytesB + BLOCK_N * 4;  // the TMA part
  static constexpr bool kWaitsForTile = true;
  template <uint32_t kNumStages>
  using Stages = StageLayout<kNumStages, kBytesA, kBytesB, kBytesSfa, kBytesOffsets>;

  // The whole warp: waits until every unit of the tile is converted. One pass of relaxed
  // loads, a lane's flags all in flight at once; only where one is still down, a spin on it;
  // then one acquire fence for them all and the proxy fence for the TMA loads that follow.
  template <typename Params>
  __device__ __forceinline__ static void wait_tile(const Params& params, const Tile& tile,
                                                   uint32_t num_k_blocks, uint32_t lane) {
    constexpr uint32_t kBlocks = BLOCK_N / 64;
    const uint32_t blocks = params.n / 64;
    const uint32_t k_blocks = (params.k + 127) / 128;
    // A group past the weights (malformed m_indices): nothing converts it, the loads fill zeros.
    if (tile.group >= params.num_groups) return;
    const uint32_t first = tile.n_block * kBlocks;
    const uint32_t live = min(kBlocks, blocks - min(first, blocks));  // past N: TMA zero-fills
    const uint32_t count = num_k_blocks * live;
    // Flags (g, block, kb): the tile's blocks' k-blocks.
    const uint32_t* ready = params.ready + (uint64_t{tile.group} * blocks + first) * k_blocks;
    auto flag_of = [&](uint32_t i) {
      return ready + (i / num_k_blocks) * k_blocks + i % num_k_blocks;
    };
    bool down = false;
#pragma unroll 4
    for (uint32_t i = lane; i < count; i += 32)
      down |= ld_relaxed_gpu(flag_of(i)) < Fp4ConvertAhead::kReady;
    if (__any_sync(0xFFFFFFFFu, down)) {
      for (uint32_t i = lane; i < count; i += 32) {
        while (ld_relaxed_gpu(flag_of(i)) < Fp4ConvertAhead::kReady) {
        }
      }
    }
    // Every lane's acquire covers the flags it read; the warp meets after them, so the leader's
    // TMA loads follow all of them.
    fence_acquire_gpu();
    __syncwarp();
    fence_proxy_async_global();
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load(const Params& params, Barrier* bar,
                                              const StageRef& stage, const Tile& tile,
                                              uint32_t kb, uint32_t /*cta_rank*/) {
    tma_load_2d(&params.tma_a, bar, Stages::template slab<0>(stage),
                static_cast<int32_t>(kb * Table::BLOCK_K), static_cast<int32_t>(tile.row0));
    tma_load_3d(&params.tma_b, bar, Stages::template slab<1>(stage),
                static_cast<int32_t>(kb * Table::BLOCK_K), static_cast<int32_t>(tile.n_block * BLOCK_N),
                static_cast<int32_t>(tile.group));
    tma_load_3d(&params.tma_sfb, bar, Stages::template slab<3>(stage),
                static_cast<int32_t>(tile.n_block * BLOCK_N), static_cast<int32_t>(kb),
                static_cast<int32_t>(tile.group));
  }
};

// MN-major A [T, M] and B [T, N] of the k-grouped GEMM, reduced down their rows: per k-block
// BLOCK_M / 64 boxes of A and BLOCK_N / 64 boxes of B, each 64 columns (128 bytes) x BLOCK_K
// rows, at rows tile.row_start + kb * BLOCK_K. A group's last k-block may cover rows of the
// next group (TMA cannot clip them): fixup() has the math threads zero those rows of the stage
// before the wgmma reads it.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kNumMathThreads>
struct MnMajorChunkLoader {
  static_assert(BLOCK_M % 64 == 0 && BLOCK_N % 64 == 0, "A and B load in 64-wide chunks");
  static_assert(BLOCK_K % 16 == 0 && BLOCK_K % 8 == 0, "whole k16 steps and 8-row atoms");
  static constexpr uint32_t kChunkBytes = BLOCK_K * 128;  // one 64-wide column chunk, all k
  static constexpr uint32_t kBytesA = BLOCK_M / 64 * kChunkBytes;
  static constexpr uint32_t kBytesB = BLOCK_N / 64 * kChunkBytes;
  static constexpr uint32_t kExpectedBytes = kBytesA + kBytesB;
  static constexpr bool kNeedsFixup = true;
  static constexpr bool kLaneCopies = false;
  static constexpr uint32_t kFillArrivals = 1;
  // A group's k-blocks vary from tile to tile and are few for small groups: unrolling only
  // multiplies the producer's code (the loop was never unrolled before the skeleton).
  static constexpr bool kRolledLoop = true;
  template <uint32_t kNumStages>
  using Stages = StageLayout<kNumStages, kBytesA, kBytesB>;

  template <typename Params>
  __device__ __forceinline__ static void prefetch(const Params& params) {
    prefetch_tma_desc(&params.tma_a);
    prefetch_tma_desc(&params.tma_b);
  }

  template <typename Stages, typename Params>
  __device__ __forceinline__ static void load(const Params& params, Barrier* bar,
                                              const StageRef& stage, const KGroupedTile& tile,
                                              uint32_t kb, uint32_t /*cta_rank*/) {
    const int32_t row = static_cast<int32_t>(tile.row_start + kb * BLOCK_K);
    uint8_t* stage_a = Stages::template slab<0>(stage);
    uint8_t* stage_b = Stages::template slab<1>(stage);
#pragma unroll
    for (uint32_t c = 0; c < BLOCK_M / 64; ++c)
      tma_load_2d(&params.tma_a, bar, stage_a + c * kChunkBytes,
                  static_cast<int32_t>(tile.m0 + c * 64), row);
#pragma unroll
    for (uint32_t c = 0; c < BLOCK_N / 64; ++c)
      tma_load_2d(&params.tma_b, bar, stage_b + c * kChunkBytes,
                  static_cast<int32_t>(tile.n0 + c * 64), row);
  }

  // Zero the k-rows past the group's end in every chunk of A and B, 16 bytes a thread (whole
  // 128-byte rows, so the swizzle does not matter), then make the zeros visible to wgmma (async
  // proxy) and meet the other math warpgroups (NamedBarrier::kFixup) before any of them issues it.
  template <typename Stages>
  __device__ __forceinline__ static void fixup(const StageRef& stage, const KGroupedTile& tile,
                                               uint32_t kb, uint32_t math_tid) {
    const uint32_t row = tile.row_start + kb * BLOCK_K;
    const uint32_t valid = min(tile.row_end - row, BLOCK_K);
    if (valid < BLOCK_K) {
      uint8_t* stage_a = Stages::template slab<0>(stage);
      uint8_t* stage_b = Stages::template slab<1>(stage);
      constexpr uint32_t kChunks = (BLOCK_M + BLOCK_N) / 64;
      const uint32_t vectors_per_chunk = (BLOCK_K - valid) * 8;
      for (uint32_t v = math_tid; v < kChunks * vectors_per_chunk; v += kNumMathThreads) {
        const uint32_t chunk = v / vectors_per_chunk, in_chunk = v % vectors_per_chunk;
        uint8_t* base = chunk < BLOCK_M / 64 ? stage_a + chunk * kChunkBytes
                                             : stage_b + (chunk - BLOCK_M / 64) * kChunkBytes;
        *reinterpret_cast<uint4*>(base + valid * 128 + in_chunk * 16) = make_uint4(0, 0, 0, 0);
      }
      fence_proxy_async_shared();
      named_barrier_sync(NamedBarrier::kFixup, kNumMathThreads);
    }
  }
};

}  // namespace moegemm
