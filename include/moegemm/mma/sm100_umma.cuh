// The MMA policy of the SM100 BF16 kernels: one k-block (64 elements of K, one 128-byte swizzle
// atom per row) is four tcgen05.mma kind::f16 of M = 128 x N x 16, issued by one thread, both
// operands read from shared memory through descriptors (mma/sm100_umma_desc.h), the FP32
// accumulator in tensor memory. Which slab is the MMA's A and which its B is the kernel's
// choice (swap-AB puts the weights' slab on the M side).
// UmmaBf16MnMajor: the k-grouped GEMM's operands, both MN-major (the reduction runs down the
// rows of A [T, M] and B [T, N]): the instruction descriptor's major bits set, MN-major
// descriptors (mma/sm100_umma_desc.h), and a k-block that may stop after fewer 16-row slices
// (a group's last k-block).
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

// kChunkBytes: the bytes of one 64-wide MN chunk of a slab (BLOCK_K rows of 128 bytes); A's
// chunks hold the MMA's M side, B's its N side.
template <uint32_t kUmmaM, uint32_t kUmmaN, uint32_t BLOCK_K, uint32_t kChunkBytes>
struct UmmaBf16MnMajor {
  static_assert(umma_bf16_shape_ok(kUmmaM, kUmmaN),
                "cta_group::1 kind::f16 with M = 128: N a multiple of 16 in [16, 256]");
  static_assert(kUmmaM % 64 == 0 && kUmmaN % 64 == 0, "MN-major slabs are 64-wide chunks");
  static_assert(BLOCK_K % kUmmaKBf16 == 0 && kChunkBytes == BLOCK_K * kSwizzleBytes,
                "a chunk is BLOCK_K rows of one 128-byte swizzle row each");
  static constexpr uint32_t kIdesc = umma_bf16_idesc(kUmmaM, kUmmaN, /*mn_major=*/true);
  static constexpr uint32_t kKSteps = BLOCK_K / kUmmaKBf16;
  static constexpr uint32_t kAccumCols = kUmmaN;
  // Leading byte offsets: the next 64-wide chunk, none for an operand of one chunk.
  static constexpr uint32_t kChunkStrideA = kUmmaM > 64 ? kChunkBytes : 0;
  static constexpr uint32_t kChunkStrideB = kUmmaN > 64 ? kChunkBytes : 0;

  // One thread. The first `k_steps` (1..kKSteps) 16-row slices of the stage; `accumulate`
  // false for the tile's first k-block.
  __device__ __forceinline__ static void k_block(uint32_t d_tmem, uint32_t a_smem,
                                                 uint32_t b_smem, bool accumulate,
                                                 uint32_t k_steps) {
#pragma unroll
    for (uint32_t k = 0; k < kKSteps; ++k) {
      if (k < k_steps) {
        umma_f16_ss(d_tmem, umma_smem_desc_bf16_mn_k_slice(a_smem, k, kChunkStrideA),
                    umma_smem_desc_bf16_mn_k_slice(b_smem, k, kChunkStrideB), kIdesc,
                    (accumulate || k > 0) ? 1 : 0);
      }
    }
  }
};

}  // namespace moegemm::sm100
