// Tile order and scheduler of the k-grouped GEMM (weight gradients).
//
// Every group has the same M x N output tiles, but a tile's k-loop runs over its group's rows,
// so with ragged groups the tiles of a large group cost several times those of a small one.
// Handing tiles out round-robin in group order lets some CTAs draw tiles of several large
// groups: simulated with the qwen3-30b wgrad routing of the benchmark (rows 1280-8192), the
// busiest CTA of 128 x 256 tiles carries 1.35x the mean load. Here groups are walked largest
// first (rank = number of groups with more rows, ties by index) and rounds of gridDim.x tiles
// alternate direction (a snake), the longest-first rule of list scheduling: the same case
// simulates at 1.04x, and balanced groups keep their order and their load.
//
// Each warp builds the order on its own from the offsets (no shared memory, no CTA barrier):
// lane l keeps the ranks of groups l, l + 32, ... . next() must be called by whole warps, every
// lane, in the same sequence; every role of the CTA then walks the same tiles. More than
// kMaxSortedGroups groups keep the group order (still snaked).
#pragma once

#include <stdint.h>

namespace moegemm {

template <uint32_t kMaxPerLane = 4>
struct KGroupedTileOrder {
  static constexpr uint32_t kMaxSortedGroups = 32 * kMaxPerLane;
  uint32_t rank[kMaxPerLane];
  uint32_t num_groups, tiles_per_group, num_tiles;
  uint32_t round = 0;
  bool sorted;

  // rows_of(g) returns group g's row count (clamped by the caller).
  template <typename RowsOf>
  __device__ __forceinline__ KGroupedTileOrder(uint32_t num_groups_, uint32_t tiles_per_group_,
                                               RowsOf rows_of)
      : num_groups(num_groups_),
        tiles_per_group(tiles_per_group_),
        num_tiles(num_groups_ * tiles_per_group_),
        sorted(num_groups_ > 1 && num_groups_ <= kMaxSortedGroups) {
    constexpr uint32_t kFullMask = 0xffffffffu;
    if (!sorted) return;
    const uint32_t lane = threadIdx.x % 32;
    uint32_t rows[kMaxPerLane];
#pragma unroll
    for (uint32_t j = 0; j < kMaxPerLane; ++j) {
      const uint32_t g = lane + 32 * j;
      rows[j] = g < num_groups ? rows_of(g) : 0;
      rank[j] = g < num_groups ? 0 : ~0u;  // groups past the end never match a position
    }
#pragma unroll
    for (uint32_t j2 = 0; j2 < kMaxPerLane; ++j2) {
      if (32 * j2 >= num_groups) break;  // uniform across the warp
      for (uint32_t src = 0; src < 32; ++src) {
        const uint32_t h = 32 * j2 + src;
        const uint32_t v = __shfl_sync(kFullMask, rows[j2], src);
#pragma unroll
        for (uint32_t j = 0; j < kMaxPerLane; ++j) {
          const uint32_t g = lane + 32 * j;
          if (h < num_groups && g < num_groups && (v > rows[j] || (v == rows[j] && h < g)))
            ++rank[j];
        }
      }
    }
  }

  // The group at sorted position p (exactly one lane-slot holds rank p).
  __device__ __forceinline__ uint32_t group_at(uint32_t p) const {
    if (!sorted) return p;
    uint32_t group = 0;
#pragma unroll
    for (uint32_t j = 0; j < kMaxPerLane; ++j) {
      const uint32_t hit = __ballot_sync(0xffffffffu, rank[j] == p);
      if (hit != 0) group = 32 * j + __ffs(hit) - 1;
    }
    return group;
  }

  // This CTA's next tile: its group and its index inside the group; false when none is left.
  __device__ __forceinline__ bool next(uint32_t& group, uint32_t& local) {
    const uint32_t forward = round * gridDim.x + blockIdx.x;
    const uint32_t backward = round * gridDim.x + gridDim.x - 1 - blockIdx.x;
    const uint32_t t = (round & 1) ? backward : forward;
    if (t >= num_tiles) return false;  // later rounds only hold larger indices
    ++round;
    group = group_at(t / tiles_per_group);
    local = t % tiles_per_group;
    return true;
  }
};

// A k-grouped tile: output block (m0, n0) of group `group`, whose reduction runs over rows
// [row_start, row_end) of A and B.
struct KGroupedTile {
  uint32_t group;
  uint32_t m0, n0;
  uint32_t row_start, row_end;
};

// Every group has the same M x N output, so the tile count is known on the host; empty groups
// still get their tiles (the epilogue writes C or zeros). Rows of group g are [offs[g-1],
// offs[g]), clamped so malformed offsets cannot reach outside A and B.
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
struct KGroupedScheduler {
  const int32_t* offs;
  uint32_t num_tokens, num_m_blocks;
  KGroupedTileOrder<> order;

  __device__ __forceinline__ static void group_rows(const int32_t* offs, uint32_t num_tokens,
                                                    uint32_t g, uint32_t& start, uint32_t& end) {
    const int32_t lo = g == 0 ? 0 : __ldg(offs + g - 1);
    const int32_t hi = __ldg(offs + g);
    start = min(static_cast<uint32_t>(max(lo, 0)), num_tokens);
    end = max(min(static_cast<uint32_t>(max(hi, 0)), num_tokens), start);
  }

  __device__ __forceinline__ KGroupedScheduler(const int32_t* offs_, uint32_t m, uint32_t n,
                                               uint32_t num_tokens_, uint32_t num_groups)
      : offs(offs_),
        num_tokens(num_tokens_),
        num_m_blocks((m + BLOCK_M - 1) / BLOCK_M),
        order(num_groups, num_m_blocks * ((n + BLOCK_N - 1) / BLOCK_N), [&](uint32_t g) {
          uint32_t start, end;
          group_rows(offs_, num_tokens_, g, start, end);
          return end - start;
        }) {}

  // Whole warps, every lane (the order is warp-cooperative).
  __device__ __forceinline__ bool next(KGroupedTile& tile) {
    uint32_t g, local;
    if (!order.next(g, local)) return false;
    tile.group = g;
    tile.m0 = (local % num_m_blocks) * BLOCK_M;
    tile.n0 = (local / num_m_blocks) * BLOCK_N;
    group_rows(offs, num_tokens, g, tile.row_start, tile.row_end);
    return true;
  }
};

}  // namespace moegemm
