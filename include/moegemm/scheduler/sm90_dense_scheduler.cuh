// Persistent tile scheduler for one dense GEMM: CTA b takes tiles b, b + gridDim.x, ...
// Tiles are rasterised in stripes of kStripeM m-blocks, n-blocks inner, so the CTAs running at
// once share a few A row-blocks and sweep B together: both stay resident in L2.
#pragma once

#include <stdint.h>

namespace moegemm::sm90 {

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kStripeM = 8>
struct DenseTileScheduler {
  uint32_t num_m_blocks;
  uint32_t num_n_blocks;
  uint32_t num_tiles;
  uint32_t tile_idx;

  __device__ __forceinline__ DenseTileScheduler(uint32_t m, uint32_t n)
      : num_m_blocks((m + BLOCK_M - 1) / BLOCK_M),
        num_n_blocks((n + BLOCK_N - 1) / BLOCK_N),
        num_tiles(num_m_blocks * num_n_blocks),
        tile_idx(blockIdx.x) {}

  // Returns false when this CTA has no tile left; otherwise the tile's block coordinates.
  __device__ __forceinline__ bool next(uint32_t& m_block, uint32_t& n_block) {
    if (tile_idx >= num_tiles) return false;
    const uint32_t tiles_per_stripe = kStripeM * num_n_blocks;
    const uint32_t stripe = tile_idx / tiles_per_stripe;
    const uint32_t first_m = stripe * kStripeM;
    const uint32_t stripe_m = min(kStripeM, num_m_blocks - first_m);
    const uint32_t in_stripe = tile_idx - stripe * tiles_per_stripe;
    m_block = first_m + in_stripe % stripe_m;
    n_block = in_stripe / stripe_m;
    tile_idx += gridDim.x;
    return true;
  }
};

}  // namespace moegemm::sm90
