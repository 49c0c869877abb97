// The fused MoE layer's last launch: each token's top_k expert rows (the second GEMM's output,
// routing weights already applied) summed in FP32 in choice order, written as BF16.
//
// kThreads threads a CTA, 8 columns (one 16-byte vector) a thread; CTAs walk (token, column
// chunk) items grid-stride, so any grid size covers any T. A dropped slot (slot_row -1) adds
// nothing: a token with every slot dropped gets zeros. The order of the sum is fixed, so the
// result is the same on every run and every grid.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/common/moe_params.h>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::moe {

template <uint32_t kThreads>
__device__ __forceinline__ void combine(const MoeCombineParams& p) {
  const uint32_t vectors = p.hidden / 8;
  const uint32_t chunks = (vectors + kThreads - 1) / kThreads;
  const uint4* y = static_cast<const uint4*>(p.y);
  uint4* out = static_cast<uint4*>(p.out);
  for (uint32_t item = blockIdx.x; item < p.num_tokens * chunks; item += gridDim.x) {
    const uint32_t token = item / chunks;
    const uint32_t v = (item % chunks) * kThreads + threadIdx.x;
    if (v >= vectors) continue;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t j = 0; j < p.top_k; ++j) {
      const int32_t row = p.slot_row[token * p.top_k + j];
      if (row < 0) continue;
      const uint4 packed = y[static_cast<uint64_t>(row) * vectors + v];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        acc[2 * i] += f.x;
        acc[2 * i + 1] += f.y;
      }
    }
    uint4 packed;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    out[static_cast<uint64_t>(token) * (p.ldo / 8) + v] = packed;
  }
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
