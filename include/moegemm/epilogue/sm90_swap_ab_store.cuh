// Register-store epilogue of the swap-AB kernel: its accumulators are D transposed (weight rows
// on the wgmma's M side, tokens on N), so each thread's values are turned back into token rows.
//
// Thread t holds weight rows r, r + 8 (r = 16 (t / 32) + (t % 32) / 4) for token pairs
// 8 j + 2 (t % 4) + {0, 1}. Lanes t and t ^ 4 hold neighbouring weight rows, so one shuffle
// turns each pair of values into two adjacent BF16 columns of one token row: 4-byte stores,
// bounds-checked against the group's rows and N. The functor sees each stored pair at its
// (token row, column).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/ptx/global.cuh>

namespace moegemm::sm90 {

// Writes warpgroup accumulators acc[BLOCK_M / 2] (weight rows n0 + 0..63, token columns
// row0 + 0..BLOCK_M-1) into D[token, n] (BF16, row stride ldd), tokens below row_end, n below n.
// Two passes: every pair is shuffled and packed first, then every store issues from its own
// register (one reused register made each pack wait for the previous store to read it).
template <uint32_t BLOCK_M, typename Epilogue>
__device__ __forceinline__ void store_transposed(const float* acc, __nv_bfloat16* d, uint32_t ldd,
                                                 uint32_t row0, uint32_t row_end, uint32_t n0,
                                                 uint32_t n, const Epilogue& epilogue) {
  constexpr uint32_t kSteps = BLOCK_M / 8;
  const uint32_t t = threadIdx.x % 128;
  const uint32_t lane_row = (t % 32) / 4;  // lanes t and t ^ 4 hold rows lane_row and lane_row ^ 1
  const bool even = lane_row % 2 == 0;
  // Even rows keep token c and take the odd neighbour's value for it; odd rows keep c + 1.
  const uint32_t token0 = row0 + 2 * (t % 4) + (even ? 0 : 1);
  const uint32_t col0 = n0 + 16 * (t / 32) + lane_row - (even ? 0 : 1);
  uint32_t packed[kSteps][2];
#pragma unroll
  for (uint32_t j = 0; j < kSteps; ++j) {
#pragma unroll
    for (uint32_t half = 0; half < 2; ++half) {
      const float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
      const float other = __shfl_xor_sync(0xffffffffu, even ? y : x, 4);
      float lo = even ? x : other, hi = even ? other : y;
      if constexpr (!std::is_same_v<Epilogue, Identity>)
        epilogue(lo, hi, token0 + 8 * j, col0 + 8 * half);
      const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
      packed[j][half] = *reinterpret_cast<const uint32_t*>(&pair);
    }
  }
  __nv_bfloat16* row = d + static_cast<uint64_t>(token0) * ldd + col0;
  const bool col_ok[2] = {col0 < n, col0 + 8 < n};
#pragma unroll
  for (uint32_t j = 0; j < kSteps; ++j) {
    const bool row_ok = token0 + 8 * j < row_end;
#pragma unroll
    for (uint32_t half = 0; half < 2; ++half)
      store_b32_if(row + 8 * half, packed[j][half], row_ok && col_ok[half]);
    row += static_cast<uint64_t>(8) * ldd;
  }
}

}  // namespace moegemm::sm90
