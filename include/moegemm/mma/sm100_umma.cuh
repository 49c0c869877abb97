// The MMA policy of the SM100 BF16 kernels: one k-block (64 elements of K, one 128-byte swizzle
// atom per row) is four tcgen05.mma kind::f16 of M = 128 x N x 16, issued by one thread, both
// operands read from shared memory through descriptors (mma/sm100_umma_desc.h), the FP32
// accumulator in tensor memory. Which slab is the MMA's A and which its B is the kernel's
// choice (swap-AB puts the weights' slab on the M side).
// Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#include <moegemm/mma/sm100_umma_desc.h>
#include <moegemm/ptx/tcgen05.cuh>

namespace moegemm::sm100 {

template <uint32_t kUmmaM, uint32_t kUmmaN, uint32_t BLOCK_K>
struct UmmaBf16 {
  static_assert(umma_bf16_shape_ok(kUmmaM, kUmmaN),
                "cta_group::1 kind::f16 with M = 128: N a multiple of 16 in [16, 256]");
  static_assert(BLOCK_K * 2 == kSwizzleBytes, "one 128-byte swizzle atom of BF16 per row");
  static constexpr uint32_t kIdesc = umma_bf16_idesc(kUmmaM, kUmmaN);
  static constexpr uint32_t kKSteps = BLOCK_K / kUmmaKBf16;
  // FP32 accumulator columns in tensor memory (one per N).
  static constexpr uint32_t kAccumCols = kUmmaN;

  // One thread. `accumulate` false for the tile's first k-block: its first MMA overwrites D.
  __device__ __forceinline__ static void k_block(uint32_t d_tmem, uint32_t a_smem,
                                                 uint32_t b_smem, bool accumulate) {
#pragma unroll
    for (uint32_t k = 0; k < kKSteps; ++k) {
      umma_f16_ss(d_tmem, umma_smem_desc_bf16_k_slice(a_smem, k),
                  umma_smem_desc_bf16_k_slice(b_smem, k), kIdesc, (accumulate || k > 0) ? 1 : 0);
    }
  }
};

}  // namespace moegemm::sm100
