// The MMA policy of the SM100 FP8 x FP4 kernel: one k-block (128 elements of K, one 128-byte
// swizzle atom row of E4M3 or unpacked E2M1) is two tcgen05.cp of its scales (A's and B's 128
// rows, one 32-bit cell a row: the scales of its four 32-blocks) into tensor memory, then four
// tcgen05.mma kind::mxf8f6f4.block_scale of 128 x N x 32, the k-th reading byte k of each
// scale cell (its scale-factor id). One thread issues all of it (in issue order).
// Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#include <moegemm/mma/sm100_umma_mx_desc.h>
#include <moegemm/ptx/tcgen05.cuh>
#include <moegemm/ptx/tcgen05_block_scale.cuh>

namespace moegemm::sm100 {

template <uint32_t kUmmaM, uint32_t kUmmaN, uint32_t BLOCK_K, uint32_t kFormatA,
          uint32_t kFormatB>
struct UmmaMxf8f6f4 {
  static_assert(umma_mx_shape_ok(kUmmaM, kUmmaN), "cta_group::1, M = 128, N % 16 == 0");
  static_assert(BLOCK_K == kSwizzleBytes, "one 128-byte swizzle atom row of 8-bit elements");
  static constexpr uint32_t kKSteps = BLOCK_K / kUmmaKMx;
  static_assert(kKSteps == 4, "four 32-blocks: the four bytes of a scale cell");
  static constexpr uint32_t kAccumCols = kUmmaN;
  static constexpr uint32_t kScaleCols = 4;  // per operand: 128 rows as 32 lanes x 4 columns

  __host__ __device__ static constexpr uint32_t idesc(uint32_t k) {
    return umma_mx_idesc(kUmmaM, kUmmaN, kFormatA, kFormatB, k);
  }

  // One thread. sfa/sfb_smem: 32 rows of 16 bytes each (word 4 i + j = row 32 j + i).
  __device__ __forceinline__ static void k_block(uint32_t d_tmem, uint32_t a_smem,
                                                 uint32_t b_smem, uint32_t sfa_smem,
                                                 uint32_t sfb_smem, uint32_t sfa_tmem,
                                                 uint32_t sfb_tmem, bool accumulate) {
    tmem_cp_32x128b_warpx4(sfa_tmem, umma_sf_desc(sfa_smem));
    tmem_cp_32x128b_warpx4(sfb_tmem, umma_sf_desc(sfb_smem));
#pragma unroll
    for (uint32_t k = 0; k < kKSteps; ++k) {
      umma_mxf8f6f4_ss(d_tmem, umma_smem_desc_mx_k_slice(a_smem, k),
                       umma_smem_desc_mx_k_slice(b_smem, k), idesc(k), sfa_tmem, sfb_tmem,
                       (accumulate || k > 0) ? 1 : 0);
    }
  }
};

}  // namespace moegemm::sm100
