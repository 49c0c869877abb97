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
#include <moegemm/epilogue/sm90_register_store.cuh>  // pack_bf16x2
#include <moegemm/epilogue/sm90_tma_store.cuh>        // TmaStoreLayout
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/global.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/ptx/tma.cuh>

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

// kAtomsM unswapped m64 x BLOCK_N accumulator blocks (rows row0 + 64 a, weight rows col0 + ..,
// col0 a multiple of 16) through the TMA-store staging of epilogue/sm90_tma_store.cuh: each
// block becomes m64 x BLOCK_N / 2 BF16 outputs, staged swizzled in `smem_buf` and written by
// TMA stores of kStoreCols columns (the D map has n_out columns and clips the N tail). The
// same three steps and named barrier as store_accumulators_tma. Every row must lie inside the
// tile's group (the caller's rule): rows of another group would be overwritten.
// A thread's output slices 2 jj and 2 jj + 1 (SwiGLU of accumulator slices 4 jj .. 4 jj + 3)
// sit in the registers stmatrix x4 takes for a 16 x 16 block, as in the plain path.
template <uint32_t BLOCK_N, uint32_t kStoreCols, uint32_t kAtomsM, uint32_t kAct>
__device__ __forceinline__ void store_swiglu_tma(const float (*acc)[BLOCK_N / 2],
                                                 uint8_t* smem_buf, const void* tma_d,
                                                 uint32_t row0, uint32_t col0, uint32_t n_out,
                                                 const float* bias, uint32_t barrier_id) {
  constexpr uint32_t kOutCols = BLOCK_N / 2;
  static_assert(kOutCols % 16 == 0, "whole 16-column stmatrix blocks of outputs");
  using L = TmaStoreLayout<kOutCols, kStoreCols>;
  const uint32_t t = threadIdx.x % 128;
  if (t == 0) tma_store_wait_read();
  named_barrier_sync(barrier_id, 128);

  const uint32_t lane = t % 32;
  const uint32_t row = 16 * (t / 32) + (lane % 8) + 8 * ((lane / 8) % 2);
  const uint32_t col_in_16 = 8 * (lane / 16);
  const uint32_t in_slice = 2 * (t % 4);
  const uint32_t out0 = col0 / 2;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_buf));
#pragma unroll
  for (uint32_t jj = 0; jj < kOutCols / 16; ++jj) {
    // Bias of this thread's two output slices (gate and up rows), zero past n_out.
    float bg[2][2] = {}, bu[2][2] = {};
#pragma unroll
    for (uint32_t s = 0; s < 2; ++s) {
      const uint32_t j2 = 2 * jj + s;
      if (bias != nullptr && out0 + 8 * j2 + in_slice < n_out) {
        const uint32_t gate_row = col0 + 16 * j2 + in_slice;
        const float2 g = *reinterpret_cast<const float2*>(bias + gate_row);
        const float2 u = *reinterpret_cast<const float2*>(bias + gate_row + 8);
        bg[s][0] = g.x, bg[s][1] = g.y, bu[s][0] = u.x, bu[s][1] = u.y;
      }
    }
#pragma unroll
    for (uint32_t a = 0; a < kAtomsM; ++a) {
      float v[8];  // v[4 s + 2 h + e]: output slice 2 jj + s, row r + 8 h, column e of the pair
#pragma unroll
      for (uint32_t s = 0; s < 2; ++s)
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h)
#pragma unroll
          for (uint32_t e = 0; e < 2; ++e) {
            const uint32_t j2 = 2 * jj + s;
            v[4 * s + 2 * h + e] = SwiGlu<kAct>::apply(acc[a][8 * j2 + 2 * h + e] + bg[s][e],
                                                       acc[a][8 * j2 + 4 + 2 * h + e] + bu[s][e]);
          }
      stmatrix_x4(smem_base + a * L::kAtomBytes + L::offset(row, 16 * jj + col_in_16),
                  pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                  pack_bf16x2(v[6], v[7]));
    }
  }
  issue_staged_stores<L, kStoreCols, kAtomsM>(smem_buf, tma_d, row0, out0, barrier_id);
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
  // Two passes, as store_transposed: every column value first, then the predicated stores.
  constexpr uint32_t kSteps = BLOCK_M / 8;
  uint32_t packed[kSteps];
#pragma unroll
  for (uint32_t j = 0; j < kSteps; ++j) {
    // Tokens 8 j + 2 (t % 4) + e, e = 0, 1: this lane's output column for both.
    const float v0 = SwiGlu<kAct>::apply(acc[4 * j] + bg, acc[4 * j + 2] + bu);
    const float v1 = SwiGlu<kAct>::apply(acc[4 * j + 1] + bg, acc[4 * j + 3] + bu);
    // Even columns keep token e = 0 and take the odd neighbour's; odd ones keep e = 1.
    const float other = __shfl_xor_sync(0xffffffffu, even ? v1 : v0, 4);
    const __nv_bfloat162 pair =
        even ? __floats2bfloat162_rn(v0, other) : __floats2bfloat162_rn(other, v1);
    packed[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  const uint32_t token0 = row0 + 2 * (t % 4) + (even ? 0 : 1);
  const uint32_t c = even ? col : col - 1;
  __nv_bfloat16* row = d + static_cast<uint64_t>(token0) * ldd + c;
#pragma unroll
  for (uint32_t j = 0; j < kSteps; ++j) {
    store_b32_if(row, packed[j], token0 + 8 * j < row_end && c < n_out);
    row += static_cast<uint64_t>(8) * ldd;
  }
}

}  // namespace moegemm::sm90
