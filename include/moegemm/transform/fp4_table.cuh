// E2M1 codes -> E4M3 bytes by an 8-entry table per (weight row, 32-block), for the prepared MXFP4
// layout (python/moegemm/api/mxfp4_weights.py, "the prepared layout"): the decode kernel's
// register operands (mma/sm90_fp4_table_mma.cuh) and the prefill kernel's shared-memory tile
// (pipeline/fp4_table_transform.cuh).
//
// Offsets. A 32-block of scale byte s whose 64-row block's largest byte in the 128 of K is `top`
// is converted with offset e = s - top + 12 in [1, 12]; the table of e holds the E4M3 bytes of
// v * 2^(e - 6) for the eight magnitudes v in {0, 0.5, 1, 1.5, 2, 3, 4, 6}:
//   lo (codes 0-3) = e * 0x08080800 + 0x0C080000,  hi (codes 4-7) = e * 0x08080808 + 0x1C181410,
// two IMADs, exact for e in [1, 12] (code 1 lands on exponent field e >= 1, a normal; code 7 on
// 0x7C at most, never the NaN 0x7F; code 0 stays 0). The MMA result is scaled by
// 2^(top - 133) at the promotion: v 2^(e - 6) 2^(top - 133) = v 2^(s - 127).
//
// Words. One 32-bit word holds 8 codes of one wgmma A fragment: the magnitudes (bits 0-2) of
// row r's 4 codes (k quad) in nibbles 0-3 and of row r + 8's 4 codes in nibbles 4-7; nibble n's
// bit 3 carries the sign of row r's code n / 2 (n even) or row r + 8's code (n - 1) / 2 (n
// odd), so row r's signs sit at bits 8j + 3 and row r + 8's at 8j + 7. Per word:
//   m = w & 0x77777777                     (prmt reads a selector nibble's bit 3 as "replicate")
//   row r   = prmt(lo_r,  hi_r,  m)       | ((w << 4) & 0x80808080)
//   row r+8 = prmt(lo_r8, hi_r8, m >> 16) |  (w       & 0x80808080)
// __host__ __device__ so tests/compile/test_fp4_convert_host.py runs this exact code on the CPU.
#pragma once

#include <stdint.h>

#include <moegemm/ptx/smem.cuh>
#include <moegemm/transform/fp4_to_fp8.cuh>

namespace moegemm::fp4 {

constexpr uint32_t kTableLoStep = 0x08080800u, kTableLoBase = 0x0C080000u;
constexpr uint32_t kTableHiStep = 0x08080808u, kTableHiBase = 0x1C181410u;
constexpr uint32_t kMinOffset = 1, kMaxOffset = 12;  // the exact window of e
constexpr uint32_t kSignMask = 0x80808080u, kMagnitudeMask = 0x77777777u;

struct Table {
  uint32_t lo, hi;
};

__host__ __device__ __forceinline__ Table table_of_offset(uint32_t e) {
  return Table{e * kTableLoStep + kTableLoBase, e * kTableHiStep + kTableHiBase};
}

// x >> s (0 < s < 32) on the FMA pipe (IMAD.HI), which the conversion leaves idle, instead of
// the integer pipe's SHF, which it saturates.
template <uint32_t kShift>
__host__ __device__ __forceinline__ uint32_t shift_right(uint32_t x) {
  static_assert(kShift > 0 && kShift < 32, "a shift inside the word");
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(x), "n"(1u << (32 - kShift)));
  return d;
#else
  return x >> kShift;
#endif
}

// The offsets word of one (row, 128 of K): bits 16-31 the offsets e_j of its 32-blocks
// (nibble j at bits 16 + 4j), bits 0-15 the high half of the float 2^(top - 133) (its low half
// is zero), whose sign bit (15) is the preparation's exact-path flag.
constexpr uint32_t kExactFlag = 0x8000u;

template <uint32_t kBlock>
__host__ __device__ __forceinline__ uint32_t offset_of(uint32_t word) {
  if constexpr (kBlock == 3) {
    return shift_right<28>(word);
  } else {
    return shift_right<16 + 4 * kBlock>(word) & 0xF;
  }
}

__host__ __device__ __forceinline__ float row_scale_of(uint32_t word) {
  const uint32_t bits = word << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}

// The exact path's factor of 32-block `block` of a raw scale word (the offsets tensor's second
// plane): 2^(s - 133), 0 where the block lies past K (block >= valid_blocks).
__host__ __device__ __forceinline__ float exact_scale(uint32_t word, uint32_t block,
                                                      uint32_t valid_blocks) {
  const int s = static_cast<int>((word >> (8 * block)) & 0xFF);
  return block < valid_blocks ? ldexpf(1.0f, s - 133) : 0.0f;
}

// magnitudes | (signs & kSignMask) as one LOP3: left to itself ptxas splits it in two where the
// prefill transform's exact passes share the masked sign terms with its first pass.
__host__ __device__ __forceinline__ uint32_t or_signs(uint32_t magnitudes, uint32_t signs) {
#if defined(__CUDA_ARCH__)
  uint32_t d;  // lut 0xEA = (a & b) | c
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(signs), "n"(kSignMask), "r"(magnitudes));
  return d;
#else
  return magnitudes | (signs & kSignMask);
#endif
}

// One prepared word -> the two A registers of rows r (first) and r + 8 (second).
__host__ __device__ __forceinline__ void convert_word(uint32_t w, const Table& row_r,
                                                      const Table& row_r8, uint32_t& out_r,
                                                      uint32_t& out_r8) {
  const uint32_t m = w & kMagnitudeMask;
  out_r = or_signs(prmt(row_r.lo, row_r.hi, m), w << 4);
  out_r8 = or_signs(prmt(row_r8.lo, row_r8.hi, shift_right<16>(m)), w);
}

// The tables of one thread's rows in one k-block: tables[h][j] of row r + 8 h, 32-block j.
struct RowTables {
  Table t[2][4];
};

__host__ __device__ __forceinline__ RowTables tables_of(uint32_t ow_r, uint32_t ow_r8) {
  return RowTables{{{table_of_offset(offset_of<0>(ow_r)), table_of_offset(offset_of<1>(ow_r)),
                     table_of_offset(offset_of<2>(ow_r)), table_of_offset(offset_of<3>(ow_r))},
                    {table_of_offset(offset_of<0>(ow_r8)), table_of_offset(offset_of<1>(ow_r8)),
                     table_of_offset(offset_of<2>(ow_r8)), table_of_offset(offset_of<3>(ow_r8))}}};
}

// The 16 A registers of one thread's k-block (4 k32 steps x {row r, row r + 8} x two k quads:
// register 4 j + 2 q + h, the wgmma m64 x N x 32 RS fragment of step j) from its 8 words
// (word 2 j + q) and its rows' tables.
__host__ __device__ __forceinline__ void convert_k_block(const uint32_t (&w)[8],
                                                         const RowTables& tab,
                                                         uint32_t (&a)[16]) {
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    convert_word(w[2 * j], tab.t[0][j], tab.t[1][j], a[4 * j], a[4 * j + 1]);
    convert_word(w[2 * j + 1], tab.t[0][j], tab.t[1][j], a[4 * j + 2], a[4 * j + 3]);
  }
}

// As above from the offsets words of rows r and r + 8 (each thread builds its own 8 tables).
__host__ __device__ __forceinline__ void convert_k_block(const uint32_t (&w)[8], uint32_t ow_r,
                                                         uint32_t ow_r8, uint32_t (&a)[16]) {
  convert_k_block(w, tables_of(ow_r, ow_r8), a);
}

// The tables shared by a quad. The four lanes of a quad (lane % 4) hold the same rows r, r + 8
// in every layout above, so each builds only the two of its 32-block lane % 4 into the warp's
// scratch and the quad loads its eight back: 15 instructions a k-block instead of 30. A quad's
// 64 bytes sit 80 bytes apart (kQuadTableStride), so the warp's eight quads' j-th 16 bytes fall
// on eight different groups of four banks and each LDS.128 is one wavefront.
constexpr uint32_t kQuadTableStride = 80;
constexpr uint32_t kWarpTableBytes = 8 * kQuadTableStride;

// Where lane `lane` of a warp whose scratch starts at `warp_tables` (16-byte aligned) keeps its
// tables: slot (its 16 bytes), quad (its quad's 64), offset_mul (mul.hi by it brings 32-block
// lane % 4's offset down to bits 0-3).
struct QuadTableLane {
  uint32_t slot, quad, offset_mul;
};

__host__ __device__ __forceinline__ QuadTableLane quad_table_lane(uint32_t warp_tables,
                                                                  uint32_t lane) {
  const uint32_t quad = warp_tables + (lane / 4) * kQuadTableStride;
  return QuadTableLane{quad + 16 * (lane % 4), quad, 1u << (16 - 4 * (lane % 4))};
}

// Every lane of the warp: the 8 tables of its rows from their offsets words. The first
// __syncwarp keeps a lane from overwriting its slot before its quad has read the last tables.
__device__ __forceinline__ RowTables share_quad_tables(uint32_t ow_r, uint32_t ow_r8,
                                                       const QuadTableLane& at) {
  const Table tr = table_of_offset(__umulhi(ow_r, at.offset_mul) & 0xF);
  const Table tr8 = table_of_offset(__umulhi(ow_r8, at.offset_mul) & 0xF);
  __syncwarp();
  sts128(at.slot, make_uint4(tr.lo, tr.hi, tr8.lo, tr8.hi));
  __syncwarp();
  RowTables tab;
#pragma unroll
  for (uint32_t j = 0; j < 4; ++j) {
    const uint4 v = lds128(at.quad + 16 * j);
    tab.t[0][j] = Table{v.x, v.y};
    tab.t[1][j] = Table{v.z, v.w};
  }
  return tab;
}

}  // namespace moegemm::fp4
