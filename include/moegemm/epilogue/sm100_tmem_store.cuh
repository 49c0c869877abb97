// Epilogue stores of the SM100 kernels: an accumulator in tensor memory (FP32, lane = the MMA's
// M row, column = its N) read by the epilogue warpgroup with tcgen05.ld 32x32b (warp q of the
// warpgroup may only touch lanes [32 q, 32 q + 32): its quadrant), 16 columns at a time, and
// stored to global memory from registers.
//   store_tmem_rows:       unswapped tiles; lane = an output row, columns = output columns.
//                          Eight columns per 16-byte (BF16) or two 16-byte (FP32) stores, the
//                          epilogue functor (epilogue/functors.cuh) on each pair first.
//   store_tmem_transposed: swap-AB tiles; lane = an output column (a weight row), columns =
//                          output rows (tokens). A warp's 32 lanes store 32 consecutive
//                          columns of one row (64 bytes of BF16); chunks of tokens that lie
//                          wholly past the tile's row bound are neither loaded nor stored.
//   store_tmem_transposed_moe: the same for the fused MoE layer's epilogues (functors.cuh):
//                          RowScale, or SwiGLU on w13's interleaved rows (rows 16 p + i, i < 8,
//                          are gates, 16 p + 8 + i their ups; D has N / 2 columns, gate row
//                          16 p + i writing column 8 p + i). Lane l and lane l ^ 8 hold a gate
//                          and its up for the same tokens: one shuffle pairs them.
//   store_tmem_tile:       an m-grouped tile of the BF16 and FP8 x FP4 kernels: one of the
//                          three above, as the composition's orientation and epilogue say.
// Rows at or past `row_end` (another group, padding, the tensor's end) and columns at or past N
// are never written. Compiled and statically checked, not run on hardware.
#pragma once

#include <cuda_bf16.h>

#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/ptx/tcgen05.cuh>

namespace moegemm::sm100 {

template <typename OutT>
__device__ __forceinline__ void store_8(OutT* dst, const float (&v)[8]) {
  if constexpr (std::is_same_v<OutT, float>) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    static_assert(std::is_same_v<OutT, __nv_bfloat16>, "BF16 or FP32 out");
    uint4 packed;
    uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
    for (uint32_t i = 0; i < 4; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      words[i] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    *reinterpret_cast<uint4*>(dst) = packed;
  }
}

// Called by all 32 lanes of an epilogue warp; `quadrant` = the warp's index in its warpgroup.
template <uint32_t BLOCK_N, typename OutT, typename Functor>
__device__ __forceinline__ void store_tmem_rows(uint32_t tmem_acc, uint32_t quadrant,
                                                uint32_t row0, uint32_t row_end, uint32_t col0,
                                                uint32_t n, OutT* d, uint32_t ldd,
                                                const Functor& functor) {
  static_assert(BLOCK_N % 16 == 0, "16 columns per tensor-memory load");
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t row = row0 + quadrant * 32 + lane;
  const uint32_t lane_addr = tmem_acc + ((quadrant * 32) << 16);
#pragma unroll 1
  for (uint32_t c = 0; c < BLOCK_N / 16; ++c) {
    uint32_t raw[16];
    tmem_load_32x32b_x16(lane_addr + c * 16, raw);
    tmem_load_wait();
    if (row >= row_end) continue;
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      const uint32_t col = col0 + c * 16 + h * 8;
      if (col >= n) continue;  // N % 8 == 0: eight columns are all in or all out
      float v[8];
#pragma unroll
      for (uint32_t i = 0; i < 8; i += 2) {
        v[i] = __uint_as_float(raw[h * 8 + i]);
        v[i + 1] = __uint_as_float(raw[h * 8 + i + 1]);
        functor(v[i], v[i + 1], row, col + i);
      }
      store_8(d + static_cast<uint64_t>(row) * ldd + col, v);
    }
  }
}

// A swapped accumulator (weight rows on the lanes, tokens on the columns), 16 tokens at a time:
// one tcgen05.ld 32x32b.x16 of lane `quadrant * 32 + lane` (this lane's weight row), then
// store(first token, raw), up to the first chunk at or past row_end (uniform in the warp).
template <uint32_t BLOCK_M, typename Store>
__device__ __forceinline__ void for_each_token_chunk(uint32_t tmem_acc, uint32_t quadrant,
                                                     uint32_t row0, uint32_t row_end,
                                                     Store store) {
  static_assert(BLOCK_M % 16 == 0, "16 tokens per tensor-memory load");
  const uint32_t lane_addr = tmem_acc + ((quadrant * 32) << 16);
#pragma unroll 1
  for (uint32_t c = 0; c < BLOCK_M / 16; ++c) {
    if (row0 + c * 16 >= row_end) break;  // uniform in the warp
    uint32_t raw[16];
    tmem_load_32x32b_x16(lane_addr + c * 16, raw);
    tmem_load_wait();
    store(row0 + c * 16, raw);
  }
}

template <uint32_t BLOCK_M, typename OutT>
__device__ __forceinline__ void store_tmem_transposed(uint32_t tmem_acc, uint32_t quadrant,
                                                      uint32_t row0, uint32_t row_end,
                                                      uint32_t col0, uint32_t n, OutT* d,
                                                      uint32_t ldd) {
  const uint32_t col = col0 + quadrant * 32 + threadIdx.x % 32;
  for_each_token_chunk<BLOCK_M>(
      tmem_acc, quadrant, row0, row_end, [&](uint32_t first, const uint32_t(&raw)[16]) {
        if (col >= n) return;
#pragma unroll
        for (uint32_t j = 0; j < 16; ++j) {
          const uint32_t row = first + j;
          if (row < row_end)
            d[static_cast<uint64_t>(row) * ldd + col] = OutT(__uint_as_float(raw[j]));
        }
      });
}

// bias: the tile's group's FP32 bias row (weight rows, kernel order) or nullptr; row_scale: the
// per-token factor of RowScale or nullptr.
template <uint32_t BLOCK_M, uint32_t kMoe>
__device__ __forceinline__ void store_tmem_transposed_moe(
    uint32_t tmem_acc, uint32_t quadrant, uint32_t row0, uint32_t row_end, uint32_t col0,
    uint32_t n, __nv_bfloat16* d, uint32_t ldd, const float* bias, const float* row_scale) {
  static_assert(kMoe == kMoeRowScale || kMoe == kMoeSwiGluSilu || kMoe == kMoeSwiGluOai,
                "a MoE epilogue");
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t w = col0 + quadrant * 32 + lane;  // this lane's weight row
  const bool in_n = w < n;  // n % 16 == 0 for SwiGLU: a gate and its up are both in or out
  const float b = bias != nullptr && in_n ? bias[w] : 0.0f;
  for_each_token_chunk<BLOCK_M>(
      tmem_acc, quadrant, row0, row_end, [&](uint32_t first, const uint32_t(&raw)[16]) {
#pragma unroll
        for (uint32_t j = 0; j < 16; ++j) {
          const uint32_t row = first + j;
          const float x = __uint_as_float(raw[j]) + b;
          if constexpr (kMoe == kMoeRowScale) {
            const float s = row_scale != nullptr && row < row_end ? row_scale[row] : 1.0f;
            if (row < row_end && in_n)
              d[static_cast<uint64_t>(row) * ldd + w] = __float2bfloat16(x * s);
          } else {
            const float up = __shfl_xor_sync(0xffffffffu, x, 8);  // every lane: a warp shuffle
            const bool gate = (lane & 8) == 0;
            const uint32_t col = w / 16 * 8 + w % 8;
            if (gate && row < row_end && in_n)
              d[static_cast<uint64_t>(row) * ldd + col] =
                  __float2bfloat16(SwiGlu<kMoe>::apply(x, up));
          }
        }
      });
}

// One accumulator of an m-grouped kernel's tile (scheduler/tile.cuh: rows [row0, row_end) of
// group `group`, n-block n_block) as the composition stores it: the fused MoE layer's epilogue
// (kMoe, swapped tiles: the group's bias row of Params::bias, Params::row_scale), swapped tiles,
// or unswapped ones through `functor`. Params: d, ldd, n, bias, row_scale as the BF16 and the
// FP8 x FP4 parameter structs name them.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, bool kSwapAB, uint32_t kMoe, typename OutT,
          typename Params, typename TileT, typename Functor>
__device__ __forceinline__ void store_tmem_tile(const Params& params, uint32_t tmem_acc,
                                                const TileT& tile, uint32_t quadrant,
                                                const Functor& functor) {
  OutT* d = static_cast<OutT*>(params.d);
  const uint32_t col0 = tile.n_block * BLOCK_N;
  if constexpr (kMoe != kMoeNone) {
    const float* bias =
        params.bias != nullptr ? params.bias + uint64_t{tile.group} * params.n : nullptr;
    store_tmem_transposed_moe<BLOCK_M, kMoe>(tmem_acc, quadrant, tile.row0, tile.row_end, col0,
                                             params.n, d, params.ldd, bias, params.row_scale);
  } else if constexpr (kSwapAB) {
    store_tmem_transposed<BLOCK_M, OutT>(tmem_acc, quadrant, tile.row0, tile.row_end, col0,
                                         params.n, d, params.ldd);
  } else {
    store_tmem_rows<BLOCK_N, OutT>(tmem_acc, quadrant, tile.row0, tile.row_end, col0, params.n, d,
                                   params.ldd, functor);
  }
}

}  // namespace moegemm::sm100
