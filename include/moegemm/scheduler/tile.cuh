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
