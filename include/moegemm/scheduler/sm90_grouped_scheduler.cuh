// Persistent tile schedulers for the SM90 m-grouped GEMMs. CTA b visits tiles b, b + gridDim.x,
// ...; every role of the CTA (producer, math warpgroups) runs its own copy over the same
// sequence, so they agree without talking. Group sizes are read on the device: no host sync,
// and a CUDA graph replays with new sizes.
//
// A tile names the first A/D row it covers (`row0`, absolute), the bound its stores must stay
// below (`row_end`, so rows of other groups and padding are never written), its n-block and the
// group whose B it multiplies.
#pragma once

#include <stdint.h>

#include <moegemm/common/stage_variant.h>
#include <moegemm/scheduler/stripe_walk.h>

namespace moegemm::sm90 {

struct Tile {
  uint32_t row0;
  uint32_t row_end;
  uint32_t n_block;
  uint32_t group;
};

// What a scheduler reads: total rows (contiguous) or rows per group (masked), N, groups and the
// per-row / per-group integers of the layout.
struct GroupingArgs {
  uint32_t m;
  uint32_t n;
  uint32_t num_groups;
  const int32_t* group_info;
};

// Clusters: the kClusterM * kClusterN CTAs of a cluster take one "cluster tile" together
// (CTA rank r its r-th tile), so they can share an operand by TMA multicast:
//   kClusterM > 1: the same n-block and kClusterM consecutive m-blocks (B shared); a rank whose
//                  m-block lies past the rows gets row0 >= row_end (nothing to do but keep the
//                  pipeline in step);
//   kClusterN > 1: the same m-block and kClusterN consecutive n-blocks (A shared); a rank whose
//                  n-block lies past N keeps the pipeline in step the same way.
// Cluster tiles are counted in units of kClusterM m-blocks by kClusterN n-blocks.
template <uint32_t kClusterM, uint32_t kClusterN>
__device__ __forceinline__ void cluster_offsets(uint32_t& m_offset, uint32_t& n_offset) {
  static_assert(kClusterM == 1 || kClusterN == 1, "clusters run along M or along N");
  const uint32_t rank = blockIdx.x % (kClusterM * kClusterN);
  m_offset = kClusterM > 1 ? rank : 0;
  n_offset = kClusterN > 1 ? rank : 0;
}

// One dense problem, rasterised in stripes of kStripeM m-blocks with n-blocks inner so the CTAs
// running together share A row-blocks and sweep B together.
// Clusters as described above.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kStripeM = 8, uint32_t kClusterM_ = 1,
          uint32_t kClusterN_ = 1>
struct DenseScheduler {
  static constexpr uint32_t kClusterM = kClusterM_;
  static constexpr uint32_t kClusterN = kClusterN_;
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;
  uint32_t m, num_m_blocks, num_n_blocks, num_tiles, tile_idx;

  __device__ __forceinline__ explicit DenseScheduler(const GroupingArgs& args)
      : m(args.m),
        num_m_blocks((args.m + BLOCK_M * kClusterM - 1) / (BLOCK_M * kClusterM)),
        num_n_blocks((args.n + BLOCK_N * kClusterN - 1) / (BLOCK_N * kClusterN)),
        num_tiles(num_m_blocks * num_n_blocks),
        tile_idx(blockIdx.x / kClusterSize) {}

  __device__ __forceinline__ bool next(Tile& tile) {
    if (tile_idx >= num_tiles) return false;
    const uint32_t tiles_per_stripe = kStripeM * num_n_blocks;
    const uint32_t stripe = tile_idx / tiles_per_stripe;
    const uint32_t first_m = stripe * kStripeM;
    const uint32_t stripe_m = min(kStripeM, num_m_blocks - first_m);
    const uint32_t in_stripe = tile_idx - stripe * tiles_per_stripe;
    const uint32_t cluster_m_block = first_m + in_stripe % stripe_m;
    uint32_t m_offset, n_offset;
    cluster_offsets<kClusterM, kClusterN>(m_offset, n_offset);
    tile.row0 = (cluster_m_block * kClusterM + m_offset) * BLOCK_M;
    tile.row_end = m;
    tile.n_block = in_stripe / stripe_m * kClusterN + n_offset;
    tile.group = 0;
    tile_idx += gridDim.x / kClusterSize;
    return true;
  }
};

// DeepGEMM's contiguous layout: group_info[r] is the group of row r, -1 for padding; each
// group's segment starts on a multiple of the alignment, which BLOCK_M divides, so a block
// belongs to the group of its first row. Blocks that start on padding are skipped. Rows are
// walked m-block-major per n-block stripe, like DenseScheduler.
// Clusters along N only (A shared): two consecutive m-blocks may belong to different groups
// (different B), but the n-blocks of one m-block share its group, so both CTAs of a cluster
// skip the same padding blocks.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kClusterN_ = 1>
struct ContiguousIndexScheduler {
  static constexpr uint32_t kClusterM = 1;
  static constexpr uint32_t kClusterN = kClusterN_;
  DenseScheduler<BLOCK_M, BLOCK_N, 8, 1, kClusterN> dense;
  const int32_t* m_indices;

  __device__ __forceinline__ explicit ContiguousIndexScheduler(const GroupingArgs& args)
      : dense(args), m_indices(args.group_info) {}

  __device__ __forceinline__ bool next(Tile& tile) {
    while (dense.next(tile)) {
      const int32_t group = __ldg(m_indices + tile.row0);
      if (group < 0) continue;
      tile.group = static_cast<uint32_t>(group);
      return true;
    }
    return false;
  }
};

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
// (the CTAs running together keep sharing each n-block of B). Stage variant bit 2 (timing
// twins only) keeps the unrotated order.
// Stripes (kStripeM > 0): a group's tiles are taken in stripes of at most kStripeM m-blocks,
// balanced (scheduler/stripe_walk.h), n-blocks inside a stripe, as DenseScheduler does; 0 takes
// all of a group's m-blocks per n-block. The heuristics choose stripes of 8 where A's rows are
// long and groups hold more than 8 m-blocks (sm90.walk_stripe_m; measured in BENCHMARKS.md,
// tenth and eleventh sessions).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kOffsets, uint32_t kClusterM_ = 1,
          uint32_t kClusterN_ = 1, uint32_t kStripeM = 0>
struct GroupWalkScheduler {
  static constexpr bool kRotate = (MOEGEMM_STAGE_VARIANT & 4) == 0;
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

  __device__ __forceinline__ bool next(Tile& tile) {
    constexpr uint32_t kFullMask = 0xffffffffu;
    const uint32_t lane = threadIdx.x % 32;
    while (tile_idx >= group_first_tile + group_tiles) {
      if (next_group >= num_groups) return false;
      const uint32_t base = group_first_tile + group_tiles;
      const uint32_t g = next_group + lane;
      uint32_t start = 0, rows = 0;
      if (g < num_groups) read_group(g, start, rows);
      const uint32_t tiles = (rows + kClusterRows - 1) / kClusterRows * num_n_blocks;
      uint32_t cum = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
      for (uint32_t delta = 1; delta < 32; delta *= 2) {
        const uint32_t up = __shfl_up_sync(kFullMask, cum, delta);
        if (lane >= delta) cum += up;
      }
      const uint32_t hit = __ballot_sync(kFullMask, g < num_groups && base + cum > tile_idx);
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
    const uint32_t local = tile_idx - group_first_tile;
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
    tile_idx = round * ctas + (kRotate ? (cta + round) % ctas : cta);
    return true;
  }
};

}  // namespace moegemm::sm90
