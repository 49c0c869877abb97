// Encoders of the descriptors of the SM100 FP8 x FP4 kernel (kind::mxf8f6f4.block_scale), as
// constexpr functions that compile for the host too: tests/compile/test_compile_sm100_fp8_fp4.py prints
// them next to CuTe's (cute::UMMA::make_instr_desc_block_scaled, make_umma_desc, the
// SmemDescriptor bit fields) and compares them.
//
// Instruction descriptor, block-scaled (32 bits; PTX ISA "Instruction descriptor"):
//   [4,6)   B scale-factor id: which byte of B's 32-bit scale cells this MMA reads
//   [7,10)  A format   [10,13) B format: 0 = E4M3, 5 = E2M1 (unpacked in shared memory: 16
//           codes in 16 bytes. CuTe's packed float_e2m1_t encodes as 1, which mxf8f6f4 reads as
//           E5M2: the wrong type; CuTe's float_e2m1_unpacksmem_t is 5)
//   [13] [14] negate A/B (0)   [15] [16] A/B major (0 = K-major)
//   [17,23) N >> 3   [23] scale format (1 = UE8M0)   [24,29) M >> 4
//   [29,31) A scale-factor id   [31] K size (0: K = 32 for mxf8f6f4)
// Operand descriptors: E4M3 and unpacked E2M1 are one byte an element in shared memory, so a
// k-block of 128 elements is one 128-byte swizzle atom row: the BF16 kernel's SW128 K-major
// descriptor (sm100_umma_desc.h); the k-th MMA (K = 32, 32 bytes) starts 32 k bytes further.
// Scale descriptor (tcgen05.cp source): 32 rows of 16 bytes, no swizzle, K-major core matrices
//   of 8 rows x 16 bytes: stride byte offset 128 (8 rows to the next 8), leading byte offset 0
//   (one core matrix along K), version 1, layout 0 (SWIZZLE_NONE).
// Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#include <moegemm/mma/sm100_umma_desc.h>

namespace moegemm::sm100 {

constexpr uint32_t kMxFormatE4M3 = 0;
constexpr uint32_t kMxFormatE2M1 = 5;
constexpr uint32_t kUmmaKMx = 32;  // K of one kind::mxf8f6f4 MMA (bytes of one row slice)
constexpr uint32_t kMxScaleBlock = 32;

// cta_group::1, M = 128 (lane i = accumulator row i), N a multiple of 16 in [16, 256].
MOEGEMM_UMMA_HD constexpr bool umma_mx_shape_ok(uint32_t m, uint32_t n) {
  return m == 128 && n % 16 == 0 && n >= 16 && n <= 256;
}

MOEGEMM_UMMA_HD constexpr uint32_t umma_mx_idesc(uint32_t m, uint32_t n, uint32_t a_format,
                                                 uint32_t b_format, uint32_t sf_id) {
  return ((sf_id & 3u) << 4)     // B scale-factor id
         | (a_format << 7)       // A format
         | (b_format << 10)      // B format
         | (0u << 15)            // A K-major
         | (0u << 16)            // B K-major
         | ((n >> 3) << 17)      // N
         | (1u << 23)            // UE8M0 scales
         | ((m >> 4) << 24)      // M
         | ((sf_id & 3u) << 29); // A scale-factor id
}

MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_mx_k_slice(uint32_t smem_addr, uint32_t k) {
  return umma_smem_desc_sw128_kmajor(smem_addr + k * kUmmaKMx);
}

MOEGEMM_UMMA_HD constexpr uint64_t umma_sf_desc_base() {
  return (uint64_t{0} << 16)            // LBO 0: one core matrix along K
         | (uint64_t{128 >> 4} << 32)   // SBO 128 B: the next 8 rows
         | (uint64_t{1} << 46)          // version 1
         | (uint64_t{0} << 61);         // SWIZZLE_NONE
}

MOEGEMM_UMMA_HD constexpr uint64_t umma_sf_desc(uint32_t smem_addr) {
  return umma_sf_desc_base() | uint64_t{(smem_addr >> 4) & 0x3fffu};
}

// Tensor-memory columns: two FP32 accumulators of `accum_cols`, then 4 columns of A's scales
// and 4 of B's (one k-block: 128 rows as 32 lanes x 4 columns, 4 bytes = 4 x 32 of K a cell),
// as a power of two >= 32 (0 when over 512).
MOEGEMM_UMMA_HD constexpr uint32_t tmem_cols_mx(uint32_t accum_cols, uint32_t buffers) {
  return tmem_cols_for(accum_cols * buffers + 8, 1);
}

}  // namespace moegemm::sm100
