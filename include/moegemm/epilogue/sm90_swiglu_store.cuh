// SwiGLU epilogues of the fused MoE layer's first GEMM: the accumulators hold gate and up
// columns, D one column per (gate, up) pair, so D has half the tile's columns.
//
// Weight rows of w13 come in the prepared order of moe/weights (python/moegemm/moe/weights.py):
// every 16 rows are 8 gate rows then the 8 up rows of the same intermediate columns, so output
// column c of the tile's half is gate row 16 (c / 8) + c % 8 and up row 16 (c / 8) + 8 + c % 8.
// In both accumulator layouts a thread holds matching gate and up values itself:
//   unswapped (wgmma m64 x N, weights on N): slices j (8 columns) alternate gate (j even) and
//     up (j odd) at the same row and column in slice, so pairs 2 j2, 2 j2 + 1 give output
//     columns 8 j2 + 2 (t % 4) + {0, 1} of rows r, r + 8;
//   swapped (weights on M, tokens on N): each thread's rows r and r + 8 (r = 16 (t / 32) +
//     (t % 32) / 4) are a gate row and its up row: output column 8 (t / 32) + (t % 32) / 4 of
//     the warpgroup's 32, for token pairs 8 j + 2 (t % 4) + {0, 1}.
// Bias (FP32, the prepared order, per group) is added to gate and up before the activation.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/epilogue/functors.cuh>

namespace moegemm::sm90 {

// One m64 x N accumulator block (unswapped), first row row0, first weight row col0 (a multiple
// of 16): rows below m, output columns below n_out = N / 2, D with row stride ldd.
template <int N, uint32_t kAct>
__device__ __forceinline__ void store_swiglu(const float* acc, __nv_bfloat16* d, uint32_t ldd,
                                             uint32_t m, uint32_t n_out, uint32_t row0,
                                             uint32_t col0, const float* bias) {
  static_assert(N % 16 == 0, "whole gate/up slice pairs");
  const uint32_t t = threadIdx.x % 128;
  const uint32_t r = row0 + 16 * (t / 32) + (t % 32) / 4;
  const uint32_t in_slice = 2 * (t % 4);
#pragma unroll
  for (int j2 = 0; j2 < N / 16; ++j2) {
    const uint32_t col = col0 / 2 + 8 * j2 + in_slice;  // n_out % 8 == 0: pairs in or out
    if (col >= n_out) continue;
    float bg0 = 0.0f, bg1 = 0.0f, bu0 = 0.0f, bu1 = 0.0f;
    if (bias != nullptr) {
      const uint32_t gate_row = col0 + 16 * j2 + in_slice;
      const float2 bg = *reinterpret_cast<const float2*>(bias + gate_row);
      const float2 bu = *reinterpret_cast<const float2*>(bias + gate_row + 8);
      bg0 = bg.x, bg1 = bg.y, bu0 = bu.x, bu1 = bu.y;
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t row = r + 8 * half;
      if (row >= m) continue;
      const float* g = acc + 4 * (2 * j2) + 2 * half;
      const float* u = acc + 4 * (2 * j2 + 1) + 2 * half;
      const float lo = SwiGlu<kAct>::apply(g[0] + bg0, u[0] + bu0);
      const float hi = SwiGlu<kAct>::apply(g[1] + bg1, u[1] + bu1);
      *reinterpret_cast<__nv_bfloat162*>(d + static_cast<uint64_t>(row) * ldd + col) =
          __floats2bfloat162_rn(lo, hi);
    }
  }
}

// One warpgroup's swapped accumulators acc[BLOCK_M / 2] (weight rows n0 + 0..63, n0 a multiple
// of 64; tokens row0 + 0..BLOCK_M-1): D[token, n0 / 2 + 0..31], tokens below row_end, output
// columns below n_out. Lanes t and t ^ 4 hold neighbouring output columns of the same tokens:
// one shuffle makes each store two adjacent BF16 columns of one token row.
template <uint32_t BLOCK_M, uint32_t kAct>
__device__ __forceinline__ void store_swiglu_transposed(const float* acc, __nv_bfloat16* d,
                                                        uint32_t ldd, uint32_t row0,
                                                        uint32_t row_end, uint32_t n0,
                                                        uint32_t n_out, const float* bias) {
  const uint32_t t = threadIdx.x % 128;
  const uint32_t lane_row = (t % 32) / 4;
  const bool even = lane_row % 2 == 0;
  const uint32_t gate_row = n0 + 16 * (t / 32) + lane_row;  // its up row is gate_row + 8
  const uint32_t col = n0 / 2 + 8 * (t / 32) + lane_row;
  // A warpgroup may reach past N (2I need not be a multiple of 64): no bias read there.
  const bool in_n = col < n_out;  // with 16-row pairs, the same as gate_row < N
  const float bg = bias != nullptr && in_n ? bias[gate_row] : 0.0f;
  const float bu = bias != nullptr && in_n ? bias[gate_row + 8] : 0.0f;
#pragma unroll
  for (uint32_t j = 0; j < BLOCK_M / 8; ++j) {
    // Tokens 8 j + 2 (t % 4) + e, e = 0, 1: this lane's output column for both.
    const float v0 = SwiGlu<kAct>::apply(acc[4 * j] + bg, acc[4 * j + 2] + bu);
    const float v1 = SwiGlu<kAct>::apply(acc[4 * j + 1] + bg, acc[4 * j + 3] + bu);
    // Even columns keep token e = 0 and take the odd neighbour's; odd ones keep e = 1.
    const float other = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
    const uint32_t token = row0 + 8 * j + 2 * (t % 4) + (even ? 0 : 1);
    const uint32_t c = even ? col : col - 1;
    if (token < row_end && c < n_out) {
      *reinterpret_cast<__nv_bfloat162*>(d + static_cast<uint64_t>(token) * ldd + c) =
          even ? __floats2bfloat162_rn(v0, other) : __floats2bfloat162_rn(other, v1);
    }
  }
}

}  // namespace moegemm::sm90
