// Encoders of the two descriptors a tcgen05.mma reads, as constexpr functions that compile for
// the host too: tests/compile/test_compile_sm100.py builds a host program that prints these next to
// CuTe's own constexpr encoders (cute::UMMA::make_instr_desc, make_umma_desc) for every config
// the SM100 heuristics emit, and compares them.
//
// Instruction descriptor, kind::f16 (32 bits; PTX ISA "Instruction descriptor"):
//   [4,6) D format (1 = F32)   [7,10) A format (1 = BF16)   [10,13) B format (1 = BF16)
//   [13] [14] negate A/B (0)   [15] [16] A/B major (0 = K-major, 1 = MN-major)
//   [17,23) N >> 3             [24,29) M >> 4
// Shared-memory descriptor, K-major operand in 128-byte swizzle atoms (64 bits):
//   [0,14)  start address >> 4          [16,30) leading byte offset >> 4 (1: unused when
//                                               swizzled, CuTe's canonical value)
//   [32,46) stride byte offset >> 4 (1024 B: from one 8-row swizzle atom to the next)
//   [46,48) version (1 on SM100)        [49,52) base offset (0: atoms 1024-byte aligned)
//   [61,64) layout (2 = SWIZZLE_128B)
// Advancing K inside the atom: the hardware applies the swizzle to the address it forms, so
// the k-th 16-element (32-byte) slice starts 32 * k bytes further: start address + 2 * k.
// Shared-memory descriptor, MN-major operand in 128-byte swizzle atoms (the k-grouped GEMM's A
// and B: each 128-byte row is 64 consecutive M or N elements of one k; CuTe's canonical form
// ((8 x 8 elements, chunks), (8 rows, k groups)) : ((.., LBO), (128 B, SBO))):
//   [16,30) leading byte offset >> 4: from one 64-wide MN chunk to the next (the chunk's bytes,
//           BLOCK_K rows x 128 B, as TMA lands one 64-column box after another; 0 when the
//           operand is one chunk wide)
//   [32,46) stride byte offset >> 4: from 8 k-rows to the next 8 (1024 B, one swizzle atom)
//   the other fields as K-major. Advancing K: a 16-row slice is two whole atoms, so the k-th
//   slice starts 16 x 128 = 2048 bytes further (start address + 128 x k), base offset still 0.
// Compiled and statically checked, not run on hardware.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define MOEGEMM_UMMA_HD __host__ __device__
#else
#define MOEGEMM_UMMA_HD
#endif

namespace moegemm::sm100 {

// UMMA K of kind::f16: 16 elements (32 bytes of BF16) per instruction.
constexpr uint32_t kUmmaKBf16 = 16;
// One swizzle atom row: 128 bytes of K.
constexpr uint32_t kSwizzleBytes = 128;
constexpr uint32_t kSwizzleAtomBytes = 8 * kSwizzleBytes;

// Whether (m, n) is a kind::f16 shape of one CTA (cta_group::1) with M = 128, the shape the
// kernels use (lane i of tensor memory = row i of the accumulator).
MOEGEMM_UMMA_HD constexpr bool umma_bf16_shape_ok(uint32_t m, uint32_t n) {
  return m == 128 && n % 16 == 0 && n >= 16 && n <= 256;
}

MOEGEMM_UMMA_HD constexpr uint32_t umma_bf16_idesc(uint32_t m, uint32_t n,
                                                   bool mn_major = false) {
  const uint32_t major = mn_major ? 1u : 0u;
  return (1u << 4)             // D: F32
         | (1u << 7)           // A: BF16
         | (1u << 10)          // B: BF16
         | (major << 15)       // A K-major (0) or MN-major (1)
         | (major << 16)       // B likewise
         | ((n >> 3) << 17)    // N
         | ((m >> 4) << 24);   // M
}

// Everything but the start address: the same for every stage and k-slice.
MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_sw128_kmajor_base() {
  return (uint64_t{1} << 16)                              // LBO field 1
         | (uint64_t{kSwizzleAtomBytes >> 4} << 32)       // SBO 1024 B
         | (uint64_t{1} << 46)                            // version 1
         | (uint64_t{2} << 61);                           // SWIZZLE_128B
}

MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_sw128_kmajor(uint32_t smem_addr) {
  return umma_smem_desc_sw128_kmajor_base() | uint64_t{(smem_addr >> 4) & 0x3fffu};
}

// The descriptor of the k-th UMMA_K slice of a K-major BF16 slab that starts at `smem_addr`.
MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_bf16_k_slice(uint32_t smem_addr,
                                                                   uint32_t k) {
  return umma_smem_desc_sw128_kmajor(smem_addr + k * kUmmaKBf16 * 2);
}

// MN-major, 128-byte swizzle: everything but the start address. `chunk_bytes` is the distance
// between the operand's 64-wide MN chunks; an operand of one chunk never steps to a next one and
// passes 0, as CuTe's encoder writes it (logical_divide leaves that mode's stride 0).
MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_sw128_mnmajor_base(uint32_t chunk_bytes) {
  return (uint64_t{(chunk_bytes >> 4) & 0x3fffu} << 16)  // LBO: next 64-wide MN chunk
         | (uint64_t{kSwizzleAtomBytes >> 4} << 32)      // SBO: next 8 k-rows, 1024 B
         | (uint64_t{1} << 46)                           // version 1
         | (uint64_t{2} << 61);                          // SWIZZLE_128B
}

// The descriptor of the k-th UMMA_K (16-row) slice of an MN-major BF16 slab at `smem_addr`.
MOEGEMM_UMMA_HD constexpr uint64_t umma_smem_desc_bf16_mn_k_slice(uint32_t smem_addr, uint32_t k,
                                                                  uint32_t chunk_bytes) {
  return umma_smem_desc_sw128_mnmajor_base(chunk_bytes) |
         uint64_t{((smem_addr + k * kUmmaKBf16 * kSwizzleBytes) >> 4) & 0x3fffu};
}

// Tensor-memory columns to allocate for `accum_cols` FP32 columns per accumulator, double
// buffered: a power of two, at least 32, at most 512 (0 when it does not fit).
MOEGEMM_UMMA_HD constexpr uint32_t tmem_cols_for(uint32_t accum_cols, uint32_t buffers) {
  uint32_t cols = 32;
  while (cols < accum_cols * buffers) cols *= 2;
  return cols <= 512 ? cols : 0;
}

}  // namespace moegemm::sm100
