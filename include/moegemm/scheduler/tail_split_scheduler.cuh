// The grouped walk with its last wave split along K. A persistent grid of P CTAs runs T tiles in
// ceil(T / P) rounds; when T % P tiles are left for the last round, the other CTAs idle through
// it while those few run all of K (DeepSeek-V3 L1 at 32 rows a group: 704 tiles on 132 SMs, 5.33
// waves run as 6). Here the first T / P rounds are the walk's own (GroupWalkScheduler, whole
// tiles), and the last round's R = T % P tiles are cut into S = min(kMaxParts, P / R, k-blocks)
// parts of consecutive k-blocks, one part a CTA: the round then takes about S times less.
//
// Unit u < S R of the split round (the CTAs take units rotated by the round, as the walk does)
// is part u / R of the round's tile u % R, and its workspace slot. The epilogue of part p < S - 1
// writes its FP32 accumulators to its slot and raises its flag; part S - 1 waits for the others'
// flags and adds their slots in part order, so the sum is the same whatever order the CTAs
// finish in (epilogue/split_k_fixup.cuh). A part waits only on parts of its own round, which run
// on other CTAs with nothing to wait for, so every wait ends once those CTAs are resident.
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
  using Work = SplitTile;
  using Walk = GroupWalkScheduler<BLOCK_M, BLOCK_N, kOffsets>;
  static constexpr uint32_t kWholeWalk = 0xFFFFu;  // whole_rounds: no split round

  Walk walk;  // its round counts this scheduler's rounds too

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

  // Tiles of the whole problem, in every lane.
  __device__ __forceinline__ uint32_t count_tiles() const {
    constexpr uint32_t kFullMask = 0xffffffffu;
    const uint32_t lane = threadIdx.x % 32;
    uint32_t tiles = 0;
#pragma unroll 4
    for (uint32_t g0 = 0; g0 < walk.num_groups; g0 += 32) {
      uint32_t start = 0, rows = 0;
      if (g0 + lane < walk.num_groups) walk.read_group(g0 + lane, start, rows);
      tiles += (rows + BLOCK_M - 1) / BLOCK_M * walk.num_n_blocks;
    }
    // REDUX: the sum lands in a uniform register, so the plan and the walk's round and tile
    // index derived from it stay uniform (vector registers spilled where the math warpgroups
    // had none to spare).
    return __reduce_add_sync(kFullMask, tiles);
  }

  __device__ __forceinline__ void prefetch() { walk.prefetch(); }

  __device__ __forceinline__ bool next(SplitTile& work) {
    const uint32_t packed = plan_word();
    const uint32_t whole_rounds = packed & 0xFFFFu;
    uint32_t split = 1u << 4;  // a whole tile: part 0 of 1
    uint32_t idx = walk.tile_idx;
    if (whole_rounds != kWholeWalk && walk.round >= whole_rounds) {
      if (walk.round != whole_rounds) return false;
      // The walk's own tile for this round is (b + round) % ctas into it: its rotation.
      const uint32_t unit = idx - whole_rounds * gridDim.x;
      if (unit >= ((packed >> 16) & 0xFFFu) * (packed >> 28)) {
        ++walk.round;  // nothing for this CTA: the round ends its walk
        return false;
      }
      split = split_of(packed, unit);
      idx = whole_rounds * gridDim.x + ((split >> 8) & 0xFFFu);  // past every tile so far
    }
    if (!walk.next_at(work, idx)) return false;  // (counts the round)
    work.split = uniform(split);
    return true;
  }

  // work.split of the tile next() handed out last, derived again from the walk (the math
  // warpgroups call it after the mainloop, which then carries no register for it).
  __device__ __forceinline__ void restore_split(SplitTile& work) const {
    const uint32_t packed = plan_word();
    const uint32_t whole_rounds = packed & 0xFFFFu;
    uint32_t split = 1u << 4;
    if (whole_rounds != kWholeWalk && walk.round == whole_rounds + 1) {
      // The walk's next tile is (b + round + 1) % ctas into the next round; this round's unit
      // was (b + round) % ctas: one less, cyclically (no division, so the part stays on the
      // uniform datapath, and with it the mainloop's ring state).
      const uint32_t ctas = gridDim.x;
      const uint32_t next_unit = walk.tile_idx - (whole_rounds + 1) * ctas;
      split = split_of(packed, next_unit == 0 ? ctas - 1 : next_unit - 1);
    }
    work.split = uniform(split);
  }

 private:
  // A word the lanes hold alike, through REDUX into a uniform register: what derives from it
  // stays off the vector registers. The walk's tile index is a vector value (its rotation
  // divides by the grid), and a part derived from it would carry the tile's k-block count, and
  // through it the mainloop's ring state, into vector registers.
  __device__ __forceinline__ static uint32_t uniform(uint32_t word) {
    return __reduce_or_sync(0xffffffffu, word);
  }

  __device__ __forceinline__ static uint32_t plan_word() {
    return uniform(*static_cast<volatile uint32_t*>(&plan_slot()));
  }

  // The plan, whole_rounds | tail_tiles << 16 | parts << 28, in static shared memory (an
  // immediate address): the roles read it at each next() instead of carrying it, which the
  // math warpgroups have no register for. Static shared memory puts the kernel's dynamic
  // shared memory (aligned to 1 KiB) 1 KiB on, which the configs leave free (SMEM_RESERVE).
  __device__ __forceinline__ static uint32_t& plan_slot() {
    __shared__ uint32_t plan;
    return plan;
  }

  // Unit u of the split round: part u / R of its tile u % R (by subtraction: at most 3 parts
  // past the first).
  __device__ __forceinline__ static uint32_t split_of(uint32_t packed, uint32_t unit) {
    const uint32_t tail_tiles = (packed >> 16) & 0xFFFu, parts = packed >> 28;
    uint32_t part = 0;
#pragma unroll
    for (uint32_t p = 1; p < kMaxParts; ++p) {
      if (unit >= tail_tiles) {
        unit -= tail_tiles;
        ++part;
      }
    }
    return part | parts << 4 | unit << 8 | tail_tiles << 20;
  }
};

}  // namespace moegemm
