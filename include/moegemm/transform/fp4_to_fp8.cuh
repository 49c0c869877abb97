// E2M1 (MXFP4 codes) -> E4M3 bytes with the block scale folded in, by an 8-entry byte table.
//
// A table holds, for one exponent offset o in [0, kNumOffsets), the E4M3 bytes of
// v * 2^(6 - o) for the eight E2M1 magnitudes v in {0, 0.5, 1, 1.5, 2, 3, 4, 6}: every one is
// exact in E4M3 for 6 - o in [-8, 6] (0.5 * 2^-8 = 2^-9 is E4M3's smallest subnormal, 6 * 2^6 =
// 384 is below 448 and never the NaN mantissa), so code 0 stays 0 and the subnormal 0.5 stays
// exact, which an add to the exponent field would not give. A 32-block of scale byte s is
// converted with the table of o = base - s, base being the largest scale of the tile's k-block
// (pipeline/fp4_expand_transform.cuh); the MMA's result is then scaled by 2^(base - 133) at the
// per-128-K promotion.
//
// The operand layout: the OCP/gpt-oss checkpoint's, 8 codes per little-endian 32-bit word, code
// j in nibble j (sign in its bit 3); the prepared layout has its own conversion
// (transform/fp4_table.cuh). Per word: two PRMT table lookups (selectors masked with 0x7777: PTX
// prmt reads a selector nibble's bit 3 as "replicate the sign") plus the sign gather, a PRMT
// spread and 4 logic ops.
//
// __host__ __device__ so that tests/compile/test_fp4_convert_host.py can run the exact device code on
// the CPU (prmt emulated there).
#pragma once

#include <stdint.h>

namespace moegemm::fp4 {

constexpr uint32_t kNumOffsets = 15;  // exponent offsets a table covers: 6 - o in [-8, 6]
constexpr uint32_t kNanWord = 0x7F7F7F7Fu;  // four E4M3 NaNs (a scale byte of 0xFF)

// PTX prmt.b32 in its default mode: output byte i is byte (c >> 4i) & 7 of {b:a}, sign-replicated
// when bit 3 of that selector nibble is set.
__host__ __device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (c >> (4 * i)) & 0xF;
    uint32_t byte = static_cast<uint32_t>(bytes >> (8 * (sel & 7))) & 0xFF;
    if (sel & 8) byte = (byte & 0x80) ? 0xFF : 0x00;
    d |= byte << (8 * i);
  }
  return d;
#endif
}

// The E4M3 byte of v * 2^e for v = m * 2^-1 (m in {0..12}), when exact; computed from the
// fields so host and device agree without a conversion intrinsic.
__host__ __device__ constexpr uint32_t e4m3_of_half_units(uint32_t m, int e) {
  if (m == 0) return 0;
  // m * 2^(e-1) = 1.f * 2^x with the leading bit of m.
  int top = 0;
  while ((m >> (top + 1)) != 0) ++top;
  const int x = top + e - 1;  // unbiased exponent
  const uint32_t frac = m & ((1u << top) - 1);  // the bits below the leading one
  if (x >= -6) {
    // Normal: 3 mantissa bits (m has at most 2 below its leading bit: 3 = 11b, 6 = 110b).
    const uint32_t mant = top >= 3 ? (frac >> (top - 3)) : (frac << (3 - top));
    return (static_cast<uint32_t>(x + 7) << 3) | mant;
  }
  // Subnormal: value / 2^-9 in the 3 mantissa bits.
  const int shift = e - 1 + 9;  // m * 2^(e-1) / 2^-9 = m << shift
  return shift >= 0 ? (m << shift) : (m >> -shift);
}

// The table of offset o: bytes 0-3 (word lo) for codes 0-3, bytes 4-7 (word hi) for codes 4-7.
__host__ __device__ constexpr void table_words(uint32_t o, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kHalfUnits[8] = {0, 1, 2, 3, 4, 6, 8, 12};  // 0, .5, 1, 1.5, 2, 3, 4, 6
  const int e = 6 - static_cast<int>(o);
  lo = hi = 0;
  for (uint32_t j = 0; j < 4; ++j) {
    lo |= e4m3_of_half_units(kHalfUnits[j], e) << (8 * j);
    hi |= e4m3_of_half_units(kHalfUnits[4 + j], e) << (8 * j);
  }
}

// 8 codes (one word) -> 8 E4M3 bytes (two words), raw checkpoint layout.
__host__ __device__ __forceinline__ void convert_raw(uint32_t w, uint32_t lo, uint32_t hi,
                                                     uint32_t& out0, uint32_t& out1) {
  const uint32_t mag0 = prmt(lo, hi, w & 0x7777u);
  const uint32_t mag1 = prmt(lo, hi, (w >> 16) & 0x7777u);
  // Spread the code bytes so each code's sign bit lands in its output byte: codes 2i+1 already
  // at bit 7 of the byte, codes 2i at bit 3 (moved up by 4).
  const uint32_t y0 = prmt(w, 0, 0x1100u);
  const uint32_t y1 = prmt(w, 0, 0x3322u);
  out0 = mag0 | (y0 & 0x80008000u) | ((y0 << 4) & 0x00800080u);
  out1 = mag1 | (y1 & 0x80008000u) | ((y1 << 4) & 0x00800080u);
}

// Half `h` (codes 4h..4h+3) of a word's conversion: out1 of convert_raw() for h = 1, out0 for
// 0, without computing the other (the register-operand MMA needs one register per 4 codes).
__host__ __device__ __forceinline__ uint32_t convert_raw_half(uint32_t w, uint32_t lo,
                                                              uint32_t hi, uint32_t h) {
  const uint32_t mag = prmt(lo, hi, (w >> (16 * h)) & 0x7777u);
  const uint32_t y = prmt(w, 0, 0x1100u + 0x2222u * h);
  return mag | (y & 0x80008000u) | ((y << 4) & 0x00800080u);
}

}  // namespace moegemm::fp4
