// Schedulers of the dense GEMM and of DeepGEMM's contiguous layout (per-row group indices).
// Tiles, grouping arguments and cluster ranks: scheduler/tile.cuh.
#pragma once

#include <stdint.h>

#include <moegemm/scheduler/tile.cuh>

namespace moegemm {

// One dense problem, rasterised in stripes of kStripeM m-blocks with n-blocks inner so the CTAs
// running together share A row-blocks and sweep B together.
// Clusters as described in scheduler/tile.cuh.
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

}  // namespace moegemm
