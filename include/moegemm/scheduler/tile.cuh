// What the persistent tile schedulers of the dense and m-grouped GEMMs hand out. CTA b visits
// tiles b, b + gridDim.x, ...; every role of the CTA (producer, math warpgroups) runs its own
// copy of the scheduler over the same sequence, so they agree without talking. Group sizes are
// read on the device: no host sync, and a CUDA graph replays with new sizes.
//
// A tile names the first A/D row it covers (`row0`, absolute), the bound its stores must stay
// below (`row_end`, so rows of other groups and padding are never written), its n-block and the
// group whose B it multiplies.
#pragma once

#include <stdint.h>

#include <type_traits>
#include <utility>

namespace moegemm {

struct Tile {
  uint32_t row0;
  uint32_t row_end;
  uint32_t n_block;
  uint32_t group;
};

// A part of a tile split along K (scheduler/tail_split_scheduler.cuh): part `part` of `parts`
// (at most 4) runs k-blocks [part K / parts, (part + 1) K / parts) of the tile's K k-blocks;
// the split round's tile `tile` of `tiles` keeps part p's sums in workspace slot p tiles + tile.
// One part (parts = 1) is the whole tile. One word, uniform in the CTA: every role carries its
// work through its loop (the producer in the 40 registers it keeps), and a divisor of 1 to 4
// keeps the k-block arithmetic on the uniform datapath (a division by a run-time value would
// move it, and the walk's state with it, into vector registers the math warps lack).
struct SplitTile : Tile {
  uint32_t split;  // part | parts << 4 | tile << 8 | tiles << 20

  __device__ __forceinline__ uint32_t part() const { return split & 0xFu; }
  __device__ __forceinline__ uint32_t parts() const { return (split >> 4) & 0xFu; }
  __device__ __forceinline__ uint32_t round_tile() const { return (split >> 8) & 0xFFFu; }
  __device__ __forceinline__ uint32_t round_tiles() const { return split >> 20; }
};

// x / d for d in 1..4, by constants.
__device__ __forceinline__ uint32_t div_by_parts(uint32_t x, uint32_t d) {
  return d == 3 ? __umulhi(x, 0xAAAAAAABu) >> 1 : x >> (d == 4 ? 2 : d == 2 ? 1 : 0);
}

// The first k-block and the k-blocks a tile's work runs of the problem's `k_blocks` (any work
// but a split tile's part starts at the first).
template <typename Work>
__device__ __forceinline__ uint32_t first_k_block(const Work&, uint32_t) {
  return 0;
}
__device__ __forceinline__ uint32_t first_k_block(const SplitTile& tile, uint32_t k_blocks) {
  return div_by_parts(tile.part() * k_blocks, tile.parts());
}
__device__ __forceinline__ uint32_t k_blocks_of(uint32_t k_blocks, const Tile&) {
  return k_blocks;
}
__device__ __forceinline__ uint32_t k_blocks_of(uint32_t k_blocks, const SplitTile& tile) {
  return div_by_parts((tile.part() + 1) * k_blocks, tile.parts()) -
         first_k_block(tile, k_blocks);
}

// A scheduler that splits tiles along K (Sched::kSplitsK: its Work is a SplitTile).
template <typename Sched, typename = void>
struct splits_k : std::false_type {};
template <typename Sched>
struct splits_k<Sched, std::enable_if_t<Sched::kSplitsK>> : std::true_type {};

// A scheduler that can start reading what its next next() needs early (prefetch(), e.g. between
// a tile's mainloop and its stores); the others are called as they are.
template <typename Sched, typename = void>
struct has_prefetch : std::false_type {};
template <typename Sched>
struct has_prefetch<Sched, std::void_t<decltype(std::declval<Sched&>().prefetch())>>
    : std::true_type {};

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

}  // namespace moegemm
