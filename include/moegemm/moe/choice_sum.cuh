// The combine order of the fused MoE layer, shared by its combine (moe/combine.cuh) and the
// expert-parallel one (ep/combine.cuh), so that both give the same bits for the same rows: each
// token's out[t] = the sum over its choices j = 0..top_k-1 of their BF16 expert rows, in FP32
// in choice order, rounded to BF16 once. A dropped choice adds nothing (a token with every
// choice dropped gets zeros).
//
// kThreads threads a CTA, 8 columns (one 16-byte vector) a thread; CTAs walk (token, column
// chunk) items grid-stride, so any grid size covers any T, and the sum's order does not depend
// on the grid.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace moegemm::moe {

// Params: num_tokens, top_k, out and ldo, as MoeCombineParams and EpCombineParams name them;
// rows of `vectors` (hidden / 8) 16-byte vectors. load_choice(slot, v, packed): false for a
// dropped slot (slot = token * top_k + j), else vector v of the slot's row in `packed`.
template <uint32_t kThreads, typename Params, typename LoadChoice>
__device__ __forceinline__ void sum_choices(const Params& p, uint32_t vectors,
                                            LoadChoice load_choice) {
  const uint32_t chunks = (vectors + kThreads - 1) / kThreads;
  uint4* out = static_cast<uint4*>(p.out);
  for (uint32_t item = blockIdx.x; item < p.num_tokens * chunks; item += gridDim.x) {
    const uint32_t token = item / chunks;
    const uint32_t v = (item % chunks) * kThreads + threadIdx.x;
    if (v >= vectors) continue;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t j = 0; j < p.top_k; ++j) {
      uint4 packed;
      if (!load_choice(token * p.top_k + j, v, packed)) continue;
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

}  // namespace moegemm::moe
