// The grouped walk with its last wave split along K. A persistent grid of P CTAs runs T tiles in
// ceil(T / P) rounds; when T % P tiles are left for the last round, the other CTAs idle through
// it while those few run all of K (DeepSeek-V3 L1 at 32 rows a group: 704 tiles on 132 SMs, 5.33
// waves run as 6). Here the first T / P rounds are the walk's own (GroupWalkScheduler, whole
// tiles), and the last round's R = T % P tiles are cut into S = min(kMaxParts, P / R, k-blocks)
// parts of consecutive k-blocks, one part a CTA: the round then takes about S times less.
//
// Unit u < S R of the split round (the CTAs take units rotated by the round, as the walk does)
// is part u / R of the round's tile u % R, and its workspace slot. Each part's epilogue writes
// its FP32 accumulators to its slot and counts itself in on the tile's ticket; the part that
// counts last adds every slot in part order, so the sum is the same whatever order the CTAs
// finish in, and stores the tile (epilogue/split_k_fixup.cuh). No part waits for another, so
// the grid needs no CTA resident beside any other.
//
// T is counted before the first tile: each CTA's warps read every group's size (32 a window, the
// rows clamped as the walk clamps them), so the grid agrees on T without talking. Without a
// workspace (`split` false) the scheduler is the plain walk.
#pragma once

#include <stdint.h>

#include <moegemm/scheduler/group_walk_scheduler.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm {

template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kOffsets, uint32_t kMaxParts>
struct TailSplitScheduler {
  static_assert(kMaxParts >= 2 && kMaxParts <= 4, "a split into 2..4 parts (div_by_parts)");
  static constexpr uint32_t kClusterM = 1;
  static constexpr uint32_t kClusterN = 1;
  static constexpr bool kSplitsK = true;
  using Walk = GroupWalkScheduler<BLOCK_M, BLOCK_N, kOffsets>;
  static constexpr uint32_t kWholeWalk = 0xFFFFu;  // whole_rounds: no split round

  Walk walk;

  // The whole rounds: the walk's own tiles until the split round.
  struct WholeRounds {
    using Work = Tile;
    Walk walk;
    __device__ __forceinline__ void prefetch() { walk.prefetch(); }
    __device__ __forceinline__ bool next(Tile& work) {
      const uint32_t whole_rounds = plan_word() & 0xFFFFu;
      return (whole_rounds == kWholeWalk || walk.round < whole_rounds) && walk.next(work);
    }
  };

  // The split round: this CTA's part, if it has one. A fresh copy of the walk finds its tile
  // (the cursor moves forward from the first group).
  struct SplitRound {
    using Work = SplitTile;
    Walk walk;
    bool done = false;
    __device__ __forceinline__ bool next(SplitTile& work) {
      const uint32_t packed = plan_word();
      const uint32_t whole_rounds = packed & 0xFFFFu;
      if (done || whole_rounds == kWholeWalk) return false;
      done = true;
      const uint32_t tail_tiles = (packed >> 16) & 0xFFFu, parts = packed >> 28;
      // Round r's tiles go to the CTAs rotated by r, as the walk's rounds do.
      const uint32_t ctas = gridDim.x;
      uint32_t tile = (blockIdx.x + whole_rounds) % ctas, part = 0;
      if (tile >= tail_tiles * parts) return false;
#pragma unroll
      for (uint32_t p = 1; p < kMaxParts; ++p) {  // part = unit / R, by subtraction
        if (tile >= tail_tiles) {
          tile -= tail_tiles;
          ++part;
        }
      }
      if (!walk.next_at(work, whole_rounds * ctas + tile)) return false;
      work.split = part | parts << 4 | tile << 8 | tail_tiles << 20;
      return true;
    }
  };

  // Every thread of the CTA, whole warps (the count is warp-cooperative). `split`: whether the
  // launch brought a workspace. No part gets fewer than one k-block.
  __device__ __forceinline__ TailSplitScheduler(const GroupingArgs& args, uint32_t k_blocks,
                                                bool split)
      : walk(args) {
    const uint32_t ctas = gridDim.x;
    const uint32_t tiles = split ? count_tiles() : 0;
    const uint32_t rest = tiles % ctas;
    const uint32_t parts = rest == 0 ? 1 : min(min(ctas / rest, kMaxParts), k_blocks);
    const uint32_t whole = tiles / ctas;
    // Every thread stores the same word and reads back only what it stored or an equal word,
    // so no barrier orders the writers.
    plan_slot() = parts >= 2 && whole < kWholeWalk && rest < 4096
                      ? whole | rest << 16 | parts << 28
                      : kWholeWalk;
  }

  __device__ __forceinline__ WholeRounds whole_rounds() const { return WholeRounds{walk}; }
  __device__ __forceinline__ SplitRound split_round() const { return SplitRound{walk}; }

  // Tiles of the whole problem, in every lane (REDUX: a uniform register).
  __device__ __forceinline__ uint32_t count_tiles() const {
    const uint32_t lane = threadIdx.x % 32;
    uint32_t tiles = 0;
#pragma unroll 4
    for (uint32_t g0 = 0; g0 < walk.num_groups; g0 += 32) {
      uint32_t start = 0, rows = 0;
      if (g0 + lane < walk.num_groups) walk.read_group(g0 + lane, start, rows);
      tiles += (rows + BLOCK_M - 1) / BLOCK_M * walk.num_n_blocks;
    }
    return __reduce_add_sync(0xffffffffu, tiles);
  }

  // The plan, whole_rounds | tail_tiles << 16 | parts << 28, in static shared memory (an
  // immediate address), read where needed rather than carried (REDUX: uniform). Static shared
  // memory puts the kernel's dynamic shared memory (aligned to 1 KiB) 1 KiB on, which the
  // configs leave free (SMEM_RESERVE).
  __device__ __forceinline__ static uint32_t& plan_slot() {
    __shared__ uint32_t plan;
    return plan;
  }
  __device__ __forceinline__ static uint32_t plan_word() {
    return __reduce_or_sync(0xffffffffu, *static_cast<volatile uint32_t*>(&plan_slot()));
  }
};

}  // namespace moegemm
