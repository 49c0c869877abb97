// The converter warpgroup of the FP8 x FP4 convert-ahead kernel (impls/sm90_fp8_fp4_grouped_gemm.cuh
// on prepared weights without a transform ring): every (group, 64-row block, k-block) of the
// prepared codes, a "unit", is converted once a call by the table (transform/fp4_table.cuh, the
// arithmetic of the other kernels) into an E4M3 copy of the weights in global memory, w8
// [G, N, Kp] K-major, which the producer loads by TMA like FP8 weights once the unit's ready flag
// is up. The conversion of a weight tile is then shared by every token tile of its group, where
// the transform kernel converts it once per token tile.
//
// Work split: each converter warp claims kUnitsPerClaim consecutive units at a time, in flag
// order (g, block, kb), from a counter after the flags (ready[units], zero at the launch), and
// claims its next batch before converting this one, whose lines it brings into L2 meanwhile.
// A 64-row block's k-blocks come one after another: a tile (one to three blocks, every k-block)
// is ready once its own blocks are, early in its group's conversion, and the codes read are
// contiguous (each block's k-blocks are 4096 contiguous bytes).
// Claims, not a split by blockIdx: whichever CTAs are resident convert every unit, so a
// producer waiting for a unit sees it come even where some CTAs of the grid wait for an SM
// (another kernel beside this one).
// Per unit, the warp takes its four 16-row quarters q in turn; lane l holds rows
// r = 16 q + l / 4 and r + 8 of the block, as thread 32 q + l of the transform does: two
// 16-byte loads of codes, one 8-byte load of its rows' offsets words, the 16 words of 4 E4M3
// bytes stored as whole 16-byte chunks after a quad transpose (a quad writes 64 contiguous
// bytes of a row).
// Publication, once a claim: every lane fences its stores for the async proxy, the warp meets,
// then lane j raises the flag of the claim's unit j with a release add at GPU scope.
// A unit the preparation flagged (scales spanning more than the table's window) converts with
// its offsets clamped into the window and its factor reads 0 (the MMA policy): the caller routes
// weights with flagged blocks to the transform kernel, whose exact passes cover them.
#pragma once

#include <stdint.h>

#include <moegemm/ptx/global.cuh>
#include <moegemm/transform/fp4_table.cuh>

namespace moegemm {

struct Fp4ConvertAhead {
  static constexpr uint32_t kNumWarpgroups = 1;
  static constexpr uint32_t kUnitsPerClaim = 2;  // 16 K weights a claim: few atomics on one word
  static constexpr uint32_t kReady = 1;          // a unit's flag once its E4M3 copy is written
  // One quarter at a time in 40 registers: the math warpgroups keep 224 (m128n192 without
  // spills).
  static constexpr uint32_t kNumRegs = 40;
  static constexpr uint32_t kBlockBytes = 4096;  // a 64-row block's k-block of codes

  // One unit's address pieces.
  struct Unit {
    uint32_t group, kb, block;
  };

  __device__ __forceinline__ static Unit unit_of(uint32_t u, uint32_t k_blocks, uint32_t blocks) {
    return Unit{u / (k_blocks * blocks), u % k_blocks, (u / k_blocks) % blocks};
  }

  // The units' count and their flags' words: flags [units], then the claim counter.
  template <typename Params>
  __device__ __forceinline__ static uint32_t num_units(const Params& params) {
    return params.num_groups * ((params.k + 127) / 128) * (params.n / 64);
  }

  // The start of unit u's codes and of its offsets words.
  template <typename Params>
  __device__ __forceinline__ static void sources(const Params& params, const Unit& unit,
                                                 uint32_t k_blocks, const uint8_t*& codes,
                                                 const uint8_t*& words) {
    codes = params.codes + unit.group * params.codes_stride_group +
            (uint64_t{unit.block} * k_blocks + unit.kb) * kBlockBytes;
    words = params.sfb + unit.group * params.sfb_stride_group +
            uint64_t{unit.kb} * params.sfb_stride_row + 256 * unit.block;
  }

  // 4 x 4 words across the 4 lanes of a quad: lane q holds m[c] (its bytes 4q.. of chunk c);
  // after it, t[q'] = lane q''s m[q] (all 16 bytes of chunk q). Two exchanges (lanes q ^ 2, then
  // q ^ 1), two words each.
  __device__ __forceinline__ static void quad_transpose(const uint32_t (&m)[4], uint32_t q,
                                                        uint32_t (&t)[4]) {
    const bool q1 = q & 2, q0 = q & 1;
    const uint32_t x0 = __shfl_xor_sync(0xFFFFFFFFu, q1 ? m[0] : m[2], 2);
    const uint32_t x1 = __shfl_xor_sync(0xFFFFFFFFu, q1 ? m[1] : m[3], 2);
    // This lane's rows {q, q ^ 2} at columns 2 q1, 2 q1 + 1: b0 the row with bit 1 clear.
    const uint32_t b00 = q1 ? x0 : m[0], b01 = q1 ? x1 : m[1];
    const uint32_t b10 = q1 ? m[2] : x0, b11 = q1 ? m[3] : x1;
    const uint32_t keep0 = q0 ? b01 : b00, keep1 = q0 ? b11 : b10;
    const uint32_t y0 = __shfl_xor_sync(0xFFFFFFFFu, q0 ? b00 : b01, 1);
    const uint32_t y1 = __shfl_xor_sync(0xFFFFFFFFu, q0 ? b10 : b11, 1);
    t[0] = q0 ? y0 : keep0;
    t[1] = q0 ? keep0 : y0;
    t[2] = q0 ? y1 : keep1;
    t[3] = q0 ? keep1 : y1;
  }

  // The first unit of the warp's next claim (lane 0 claims, every lane learns it).
  __device__ __forceinline__ static uint32_t claim(uint32_t* counter, uint32_t lane) {
    uint32_t first = 0;
    if (lane == 0) first = atomicAdd(counter, kUnitsPerClaim);
    return __shfl_sync(0xFFFFFFFFu, first, 0);
  }

  // The claim's codes (kBlockBytes a unit) and offsets words (256 bytes) into L2: lane l
  // touches the lines l, l + 32 of the codes of the claim.
  template <typename Params>
  __device__ __forceinline__ static void prefetch_claim(const Params& params, uint32_t first,
                                                        uint32_t units, uint32_t k_blocks,
                                                        uint32_t blocks, uint32_t lane) {
#pragma unroll
    for (uint32_t j = 0; j < kUnitsPerClaim; ++j) {
      if (first + j >= units) break;
      const uint8_t *codes, *words;
      sources(params, unit_of(first + j, k_blocks, blocks), k_blocks, codes, words);
      prefetch_l2(codes + 128 * lane);
      if (lane < 2) prefetch_l2(words + 128 * lane);
    }
  }

  template <typename Params>
  __device__ __forceinline__ static void run(const Params& params, uint32_t t) {
    const uint32_t k_blocks = (params.k + 127) / 128;
    const uint32_t blocks = params.n / 64;  // N % 64 == 0 (prepared layout)
    const uint32_t units = num_units(params);
    const uint64_t kp = uint64_t{k_blocks} * 128;
    const uint32_t lane = t % 32;
    uint32_t* counter = params.ready + units;
    uint32_t first = claim(counter, lane);
#pragma unroll 1
    while (first < units) {
      const uint32_t next = claim(counter, lane);
      if (next < units) prefetch_claim(params, next, units, k_blocks, blocks, lane);
#pragma unroll 1
      for (uint32_t j = 0; j < kUnitsPerClaim && first + j < units; ++j) {
        const Unit unit = unit_of(first + j, k_blocks, blocks);
        const uint8_t *unit_codes, *unit_words;
        sources(params, unit, k_blocks, unit_codes, unit_words);
#pragma unroll 1
        for (uint32_t q = 0; q < 4; ++q) {
          const uint32_t th = 32 * q + lane;  // the transform thread whose rows these are
          const uint32_t row = 16 * q + lane / 4;
          const uint8_t* codes = unit_codes + 16 * th;
          const uint4 c0 = __ldg(reinterpret_cast<const uint4*>(codes));
          const uint4 c1 = __ldg(reinterpret_cast<const uint4*>(codes + kBlockBytes / 2));
          const uint2 ow =
              __ldg(reinterpret_cast<const uint2*>(unit_words + 8 * (8 * q + lane / 4)));
          const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
          uint32_t a[16];
          fp4::convert_k_block(w, ow.x, ow.y, a);
          // Whole 16-byte chunks: a quad's 4 words of chunks 4 p .. 4 p + 3 transposed, lane
          // q' then stores chunk 4 p + q' of its row (a quad writes 64 contiguous bytes).
          uint8_t* dst = params.w8 + (uint64_t{unit.group} * params.n + 64 * unit.block + row) * kp +
                         unit.kb * 128 + 16 * (lane % 4);
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
#pragma unroll
            for (uint32_t p = 0; p < 2; ++p) {
              const uint32_t m[4] = {a[8 * p + h], a[8 * p + 2 + h], a[8 * p + 4 + h],
                                     a[8 * p + 6 + h]};
              uint32_t v[4];
              quad_transpose(m, lane % 4, v);
              *reinterpret_cast<uint4*>(dst + h * 8 * kp + 64 * p) =
                  make_uint4(v[0], v[1], v[2], v[3]);
            }
          }
        }
      }
      // The claim's units are whole: publish them.
      fence_proxy_async_global();
      __syncwarp();
      if (lane < kUnitsPerClaim && first + lane < units)
        red_release_gpu_add(params.ready + first + lane, kReady);
      first = next;
    }
  }
};

}  // namespace moegemm
