// The fused MoE layer's last launch: each token's top_k expert rows (the second GEMM's output,
// routing weights already applied) summed in FP32 in choice order, written as BF16.
//
// The sum and its order: sum_choices (moe/choice_sum.cuh, shared with ep/combine.cuh). A
// dropped slot (slot_row -1) adds nothing: a token with every slot dropped gets zeros. The
// order of the sum is fixed, so the result is the same on every run and every grid.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/common/moe_params.h>
#include <moegemm/moe/choice_sum.cuh>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::moe {

template <uint32_t kThreads>
__device__ __forceinline__ void combine(const MoeCombineParams& p) {
  const uint32_t vectors = p.hidden / 8;
  const uint4* y = static_cast<const uint4*>(p.y);
  sum_choices<kThreads>(p, vectors, [&](uint32_t slot, uint32_t v, uint4& packed) {
    const int32_t row = p.slot_row[slot];
    if (row < 0) return false;
    packed = y[static_cast<uint64_t>(row) * vectors + v];
    return true;
  });
}

template <uint32_t kThreads>
__global__ void __launch_bounds__(kThreads) moe_combine_kernel(
    const __grid_constant__ MoeCombineParams params) {
  // Under PDL the previous kernel may still run: its writes are visible only after the wait.
  pdl_wait();
  pdl_launch_dependents();
  combine<kThreads>(params);
}

}  // namespace moegemm::moe
