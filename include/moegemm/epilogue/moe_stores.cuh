// The fused MoE layer's epilogue stores, for every kernel built with a Config::kMoeEpilogue
// (BF16 and FP8 x FP4, both orientations): SwiGLU (epilogue/sm90_swiglu_store.cuh, D with
// N / 2 columns) or RowScale through the register or swapped stores. The BF16 unswapped kernel
// also stages them for TMA stores (store_swiglu_tma, store_accumulators_tma with RowScaleInN)
// where a warpgroup's rows all lie inside the group; these are its register fallback. Params is the kernel's
// parameter struct: d, ldd, n, bias (FP32 [G, n] or nullptr), row_scale.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_register_store.cuh>
#include <moegemm/epilogue/sm90_swap_ab_store.cuh>
#include <moegemm/epilogue/sm90_swiglu_store.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm::sm90 {

// The tile's group's bias row, nullptr when the call has none.
template <typename Params>
__device__ __forceinline__ const float* group_bias(const Params& params, const Tile& tile) {
  return params.bias != nullptr ? params.bias + uint64_t{tile.group} * params.n : nullptr;
}

// One unswapped m64 x N accumulator block whose first row is row0.
template <int N, uint32_t kMoe, typename Params>
__device__ __forceinline__ void store_moe_block(const float* acc, const Params& params,
                                                const Tile& tile, uint32_t row0) {
  static_assert(kMoe != kMoeNone, "a MoE epilogue");
  auto* d = static_cast<__nv_bfloat16*>(params.d);
  if constexpr (kMoe == kMoeRowScale) {
    store_accumulators<N, __nv_bfloat16>(acc, d, params.ldd, tile.row_end, params.n, row0,
                                         tile.n_block * N,
                                         RowScale{group_bias(params, tile), params.row_scale});
  } else {
    store_swiglu<N, kMoe>(acc, d, params.ldd, tile.row_end, params.n / 2, row0, tile.n_block * N,
                          group_bias(params, tile));
  }
}

// One warpgroup's swapped accumulators (weight rows n0 + 0..63, the tile's tokens).
template <uint32_t BLOCK_M, uint32_t kMoe, typename Params>
__device__ __forceinline__ void store_moe_transposed(const float* acc, const Params& params,
                                                     const Tile& tile, uint32_t n0) {
  static_assert(kMoe != kMoeNone, "a MoE epilogue");
  auto* d = static_cast<__nv_bfloat16*>(params.d);
  if constexpr (kMoe == kMoeRowScale) {
    store_transposed<BLOCK_M>(acc, d, params.ldd, tile.row0, tile.row_end, n0, params.n,
                              RowScale{group_bias(params, tile), params.row_scale});
  } else {
    store_swiglu_transposed<BLOCK_M, kMoe>(acc, d, params.ldd, tile.row0, tile.row_end, n0,
                                           params.n / 2, group_bias(params, tile));
  }
}

}  // namespace moegemm::sm90
