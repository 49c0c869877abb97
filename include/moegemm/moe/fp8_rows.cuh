// Per-token FP8 quantization of BF16 rows in blocks of 128 columns, as moegemm.quant
// .per_token_cast_to_fp8 defines it (and with its bits): scale = max(amax, 1e-4) * fp32(1 / 448),
// value = E4M3(clamp(x / scale, +-448)) with IEEE division and round-to-nearest-even; with
// kUe8m0 (per_token_cast_to_fp8(..., ue8m0=True), what the SM100 FP8 x FP4 kernel reads as UE8M0
// scales) the scale rounded up to a power of two first. Used by
// the fused MoE layer with MXFP4 experts: the route kernel's gather and the intermediate's
// quantization (moe/quantize_rows.cuh).
//
// One 128-column block is the work of 16 consecutive lanes (a half warp), 8 columns a lane:
// the block's amax is a 4-step xor shuffle inside the half warp. Columns past `cols` (a partial
// last block) read as zero and are not stored.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

namespace moegemm::moe {

constexpr uint32_t kFp8Block = 128;
constexpr float kFp8Max = 448.0f;
constexpr float kFp8AmaxEps = 1e-4f;

// max that keeps a NaN (fmaxf drops it), as torch's amax and clamp do: a block holding a NaN
// gets a NaN scale and NaN codes, as per_token_cast_to_fp8 gives it.
__device__ __forceinline__ float nan_max(float a, float b) {
  return a != a ? a : (b != b ? b : fmaxf(a, b));
}

// The scale of a block of absolute maximum `amax`; with kUe8m0 2^ceil(log2 scale) from the bits
// (quant._ceil_pow2's rule: a NaN scale becomes -0.0, which the SM100 kernel's UE8M0 conversion
// turns into the NaN cell, so a NaN row stays NaN). Host and device: a CPU test checks it.
template <bool kUe8m0>
__host__ __device__ __forceinline__ float block_scale(float amax) {
  const float scale = (amax != amax || amax > kFp8AmaxEps ? amax : kFp8AmaxEps) * (1.0f / kFp8Max);
  if constexpr (!kUe8m0) {
    return scale;
  } else {
    uint32_t bits;
    memcpy(&bits, &scale, sizeof(bits));
    const uint32_t exponent = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
    const uint32_t rounded = exponent << 23;
    float out;
    memcpy(&out, &rounded, sizeof(out));
    return out;
  }
}

// Every lane of the warp calls it (full-mask shuffles); `active` lanes hold a real block.
template <bool kUe8m0 = false>
__device__ __forceinline__ void quantize_block(const __nv_bfloat16* src, uint8_t* dst,
                                               float* scale_out, uint32_t cols, uint32_t block,
                                               bool active) {
  const uint32_t lane16 = threadIdx.x % 16;
  const uint32_t col = block * kFp8Block + 8 * lane16;
  const bool in = active && col < cols;  // cols % 8 == 0: 8 columns all in or all out
  float v[8];
  if (in) {
    const uint4 packed = *reinterpret_cast<const uint4*>(src + col);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.0f;
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = nan_max(amax, fabsf(v[i]));
#pragma unroll
  for (uint32_t d = 1; d < 16; d *= 2) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, d));
  const float scale = block_scale<kUe8m0>(amax);
  if (!in) return;
  uint32_t word[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float q = __fdiv_rn(v[i], scale);
    q = q > kFp8Max ? kFp8Max : (q < -kFp8Max ? -kFp8Max : q);  // a NaN stays NaN
    const __nv_fp8_e4m3 e(q);
    word[i / 4] |= uint32_t{*reinterpret_cast<const uint8_t*>(&e)} << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(dst + col) = make_uint2(word[0], word[1]);
  if (lane16 == 0) *scale_out = scale;
}

}  // namespace moegemm::moe
