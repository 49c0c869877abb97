// The grouped walk in stripes: which (m-block, n-block) of one group a tile index names.
// Host-and-device, free of CUDA headers, so a CPU test can compile it with the host compiler
// and check every tile of every group shape is named exactly once (tests/unit/test_stripe_walk.py).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEGEMM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MOEGEMM_HOST_DEVICE inline
#endif

namespace moegemm {

// A group of m_blocks x n_blocks tiles is cut into ceil(m_blocks / kMaxStripe) stripes of
// m-blocks whose widths differ by at most one (the wider ones first): a fixed width would leave
// a last stripe of one or two m-blocks, whose tiles all read the group's whole B for that few
// rows. Inside a stripe m-blocks vary fastest, so the CTAs running together share each n-block
// of B and hold at most kMaxStripe m-blocks of A.
template <uint32_t kMaxStripe>
MOEGEMM_HOST_DEVICE void stripe_walk_tile(uint32_t local, uint32_t m_blocks, uint32_t n_blocks,
                                          uint32_t& m_block, uint32_t& n_block) {
  static_assert(kMaxStripe > 0, "a stripe holds at least one m-block");
  const uint32_t num_stripes = (m_blocks + kMaxStripe - 1) / kMaxStripe;
  const uint32_t narrow = m_blocks / num_stripes;               // >= 1: num_stripes <= m_blocks
  const uint32_t num_wide = m_blocks - narrow * num_stripes;    // stripes of narrow + 1
  const uint32_t wide_tiles = num_wide * (narrow + 1) * n_blocks;
  uint32_t width, first_m, in_stripe;
  if (local < wide_tiles) {
    width = narrow + 1;
    const uint32_t stripe = local / (width * n_blocks);
    first_m = stripe * width;
    in_stripe = local - stripe * width * n_blocks;
  } else {
    width = narrow;
    const uint32_t rest = local - wide_tiles;
    const uint32_t stripe = rest / (width * n_blocks);
    first_m = num_wide * (narrow + 1) + stripe * width;
    in_stripe = rest - stripe * width * n_blocks;
  }
  m_block = first_m + in_stripe % width;
  n_block = in_stripe / width;
}

}  // namespace moegemm
