// The grouped walk of the packed-offsets and masked layouts (one scheduler, two ways to read a
// group's rows). Tiles, grouping arguments and cluster ranks: scheduler/tile.cuh.
#pragma once

#include <stdint.h>

#include <moegemm/scheduler/stripe_walk.h>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm {

// Groups laid one after another: group g owns rows [start(g), start(g) + size(g)). The linear
// tile space is the concatenation of each group's m-blocks x n-blocks; a CTA's tile indices only
// grow, so its group cursor only moves forward. Inside a group, m-blocks are fastest: CTAs that
// run together share one n-block of the group's weights, read from HBM once.
//   kOffsets = true : torch's packed layout, group_info[g] = cumulative end row of group g;
//                     m = total rows.
//   kOffsets = false: masked layout, group g starts at g * m (m = rows per group) and uses
//                     group_info[g] rows of it.
// The cursor moves 32 groups at a time: each lane of the calling warp reads one group's size,
// a warp prefix sum turns sizes into tile counts, a ballot finds the group that holds the tile.
// Decode with hundreds of mostly empty groups then costs a few dependent loads instead of one
// per group. next() must be called by whole warps (every lane, same sequence).
// Clusters as in DenseScheduler, inside one group: a group's tiles count its m-blocks and
// n-blocks in cluster units.
// Rounds: the CTAs take tiles in rounds of one tile each, round r's tiles going to the CTAs
// rotated by r. Without the rotation, CTA b always lands on the same m-block position of
// groups whose m-block count divides the CTA count (132 = 2 * 2 * 3 * 11), so with 2 or 3
// m-blocks per group some CTAs draw only full blocks and others only partial last blocks, and
// cheaper last blocks shorten nobody's critical path. A round still covers consecutive tiles
// (the CTAs running together keep sharing each n-block of B).
// Stripes (kStripeM > 0): a group's tiles are taken in stripes of at most kStripeM m-blocks,
// balanced (scheduler/stripe_walk.h), n-blocks inside a stripe, as DenseScheduler does; 0 takes
// all of a group's m-blocks per n-block. The heuristics choose stripes of 8 where A's rows are
// long and groups hold more than 8 m-blocks (heuristics/sm90_bf16.py, walk_stripe_m; measured
// in BENCHMARKS.md, "Walk stripes").
template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kOffsets, uint32_t kClusterM_ = 1,
          uint32_t kClusterN_ = 1, uint32_t kStripeM = 0>
struct GroupWalkScheduler {
  static constexpr uint32_t kClusterM = kClusterM_;
  static constexpr uint32_t kClusterN = kClusterN_;
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
  static constexpr uint32_t kClusterRows = BLOCK_M * kClusterM;
  const int32_t* group_info;
  uint32_t m, num_groups, num_n_blocks;
  uint32_t tile_idx, round = 0;
  // Cursor: the group that holds the last tile handed out, where its tiles begin in the linear
  // space, and the first group not yet examined.
  uint32_t group_first_tile = 0, group_tiles = 0, group_m_blocks = 0;
  uint32_t group = 0, group_start = 0, group_rows = 0, next_group = 0;
  // prefetch(): the sizes of groups next_group + lane, read for the next call's first window.
  uint32_t prefetched_start = 0, prefetched_rows = 0;
  bool prefetched = false;

  __device__ __forceinline__ explicit GroupWalkScheduler(const GroupingArgs& args)
      : group_info(args.group_info),
        m(args.m),
        num_groups(args.num_groups),
        num_n_blocks((args.n + BLOCK_N * kClusterN - 1) / (BLOCK_N * kClusterN)),
        tile_idx(blockIdx.x / kClusterSize) {}

  // Rows of group g, clamped to [0, m]: malformed sizes (decreasing or negative offsets, rows
  // past the tensor) can then neither hang the walk nor send a store outside the tensor.
  __device__ __forceinline__ void read_group(uint32_t g, uint32_t& start, uint32_t& rows) const {
    if constexpr (kOffsets) {
      const int32_t lo = g == 0 ? 0 : __ldg(group_info + g - 1);
      const int32_t hi = __ldg(group_info + g);
      start = min(static_cast<uint32_t>(max(lo, 0)), m);
      const uint32_t end = min(static_cast<uint32_t>(max(hi, 0)), m);
      rows = end > start ? end - start : 0;
    } else {
      start = g * m;
      rows = min(static_cast<uint32_t>(max(__ldg(group_info + g), 0)), m);
    }
  }

  // Where the next tile lies past the cursor's group, reads the first window the next call
  // walks, so that the load's latency passes under whatever the caller does in between (the
  // swapped kernels' stores: each CTA's next tile lands ~12 groups on at decode, and every math
  // warp waited out this load between two tiles). Whole warps, as next().
  __device__ __forceinline__ void prefetch() {
    const uint32_t g = next_group + threadIdx.x % 32;
    prefetched = tile_idx >= group_first_tile + group_tiles && next_group < num_groups;
    uint32_t start = 0, rows = 0;  // lanes past the last group read nothing, as in next()
    if (prefetched && g < num_groups) read_group(g, start, rows);
    prefetched_start = start;
    prefetched_rows = rows;
  }

  __device__ __forceinline__ bool next(Tile& tile) { return next_at(tile, tile_idx); }

  // next() with tile `idx` (at least this round's, so the cursor still only moves forward) in
  // place of this round's: the tail split's rounds (scheduler/tail_split_scheduler.cuh). The
  // next round's index stays a function of the round, which ptxas then need not hold.
  __device__ __forceinline__ bool next_at(Tile& tile, uint32_t idx) {
    constexpr uint32_t kFullMask = 0xffffffffu;
    const uint32_t lane = threadIdx.x % 32;
    while (idx >= group_first_tile + group_tiles) {
      if (next_group >= num_groups) return false;
      const uint32_t base = group_first_tile + group_tiles;
      const uint32_t g = next_group + lane;
      uint32_t start = 0, rows = 0;
      if (prefetched) {  // the same groups: next_group has not moved since
        start = prefetched_start;
        rows = prefetched_rows;
        prefetched = false;
      } else if (g < num_groups) {
        read_group(g, start, rows);
      }
      const uint32_t tiles = (rows + kClusterRows - 1) / kClusterRows * num_n_blocks;
      uint32_t cum = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
      for (uint32_t delta = 1; delta < 32; delta *= 2) {
        const uint32_t up = __shfl_up_sync(kFullMask, cum, delta);
        if (lane >= delta) cum += up;
      }
      const uint32_t hit = __ballot_sync(kFullMask, g < num_groups && base + cum > idx);
      if (hit == 0) {  // none of these 32 groups holds the tile
        group_first_tile = base + __shfl_sync(kFullMask, cum, 31);
        group_tiles = 0;
        next_group += 32;
        continue;
      }
      const uint32_t l = __ffs(hit) - 1;
      group = next_group + l;
      next_group = group + 1;
      group_first_tile = base + __shfl_sync(kFullMask, cum - tiles, l);
      group_tiles = __shfl_sync(kFullMask, tiles, l);
      group_start = __shfl_sync(kFullMask, start, l);
      group_rows = __shfl_sync(kFullMask, rows, l);
      group_m_blocks = (group_rows + kClusterRows - 1) / kClusterRows;  // in cluster tiles
    }
    const uint32_t local = idx - group_first_tile;
    uint32_t m_offset, n_offset;
    cluster_offsets<kClusterM, kClusterN>(m_offset, n_offset);
    uint32_t m_block = local % group_m_blocks, n_block = local / group_m_blocks;
    if constexpr (kStripeM != 0)  // balanced stripes of at most kStripeM cluster m-blocks
      stripe_walk_tile<kStripeM>(local, group_m_blocks, num_n_blocks, m_block, n_block);
    tile.row0 = group_start + m_block * kClusterRows + m_offset * BLOCK_M;
    tile.row_end = group_start + group_rows;
    tile.n_block = n_block * kClusterN + n_offset;
    tile.group = group;
    // Next round: tile (round + 1) * C + (b + round + 1) % C of C = gridDim.x / kClusterSize
    // cluster tiles per round; always past this one, so the cursor only moves forward.
    const uint32_t ctas = gridDim.x / kClusterSize, cta = blockIdx.x / kClusterSize;
    ++round;
    tile_idx = round * ctas + (cta + round) % ctas;
    return true;
  }
};

}  // namespace moegemm
