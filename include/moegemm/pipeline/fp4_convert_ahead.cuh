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
// 16-byte loads of codes, one 8-byte load of its rows' offsets words, the quad's tables shared
// through the warp's slot (fp4::share_quad_tables), then its 16 words of 4
// E4M3 bytes (each row's 4-byte pieces 16 bytes apart, the wgmma fragment's order) go through
// the warp's slot of shared memory, 4-byte stores in, 16-byte loads out, so that each lane
// stores whole 16-byte chunks (a quad writes 64 contiguous bytes of a row). The slot holds the
// warp's 8 rows x 2 of 128 bytes at a row stride of 144: the stores are free of bank
// conflicts, the loads 2-way, and every address is a per-lane base plus an immediate.
// Publication, once a claim: every lane fences its stores for the async proxy, the warp meets,
// then lane j raises the flag of the claim's unit j with a release add at GPU scope.
// A unit the preparation flagged (scales spanning more than the table's window) converts with
// its offsets clamped into the window and its factor reads 0 (the MMA policy): the caller routes
// weights with flagged blocks to the transform kernel, whose exact passes cover them.
#pragma once

#include <stdint.h>

#include <moegemm/ptx/global.cuh>
#include <moegemm/ptx/smem.cuh>
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
  // A warp's transpose slot: rows r and r + 8 (halves h) of its 8 quads, 128 bytes a row at a
  // stride of 144 (9 chunks of 16 bytes).
  static constexpr uint32_t kRowStride = 144;
  static constexpr uint32_t kHalfBytes = 8 * kRowStride;
  // Per warp the transpose slot; its first bytes also hold the quads' shared tables
  // (fp4::share_quad_tables), read before the step's transposed stores.
  static constexpr uint32_t kWarpBytes = 2 * kHalfBytes;
  static_assert(fp4::kWarpTableBytes <= kWarpBytes, "the tables fit in the slot");
  static constexpr uint32_t kScratchBytes = 4 * kWarpBytes;  // four warps

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
  __device__ __forceinline__ static void run(const Params& params, uint32_t t, uint8_t* scratch) {
    const uint32_t k_blocks = (params.k + 127) / 128;
    const uint32_t blocks = params.n / 64;  // N % 64 == 0 (prepared layout)
    const uint32_t units = num_units(params);
    const uint64_t kp = uint64_t{k_blocks} * 128;
    const uint32_t lane = t % 32;
    // This lane's row of the slot: its pieces go to chunk c at byte 4 (lane % 4), its chunks
    // come from chunk lane % 4 (and 4 on).
    const uint32_t warp_scratch = smem_u32(scratch) + (t / 32) * kWarpBytes;
    const uint32_t slot = warp_scratch + (lane / 4) * kRowStride;
    const uint32_t put = slot + 4 * (lane % 4), get = slot + 16 * (lane % 4);
    const fp4::QuadTableLane tables = fp4::quad_table_lane(warp_scratch, lane);
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
        // Quarter q: the codes of transform thread 32 q + lane, the offsets words of its rows,
        // and the copy's row 16 q + lane / 4 (and 8 on); pointers stepped a quarter at a time.
        const uint8_t* codes = unit_codes + 16 * lane;
        const uint8_t* words = unit_words + 8 * (lane / 4);
        uint8_t* dst = params.w8 +
                       (uint64_t{unit.group} * params.n + 64 * unit.block + lane / 4) * kp +
                       unit.kb * 128 + 16 * (lane % 4);
#pragma unroll 1
        for (uint32_t q = 0; q < 4; ++q) {
          const uint4 c0 = __ldg(reinterpret_cast<const uint4*>(codes));
          const uint4 c1 = __ldg(reinterpret_cast<const uint4*>(codes + kBlockBytes / 2));
          const uint2 ow = __ldg(reinterpret_cast<const uint2*>(words));
          const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
          uint32_t a[16];
          fp4::convert_k_block(w, fp4::share_quad_tables(ow.x, ow.y, tables), a);
          __syncwarp();  // the quad has read its tables before the slot takes the pieces
          // a[2 c + h] is row r + 8 h at bytes 16 c + 4 (lane % 4) of the k-block (chunk c).
#pragma unroll
          for (uint32_t i = 0; i < 16; ++i) sts32(put + (i % 2) * kHalfBytes + 16 * (i / 2), a[i]);
          __syncwarp();
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
#pragma unroll
            for (uint32_t p = 0; p < 2; ++p)
              *reinterpret_cast<uint4*>(dst + h * 8 * kp + 64 * p) =
                  lds128(get + h * kHalfBytes + 64 * p);
          }
          codes += 512;
          words += 64;
          dst += 16 * kp;
          __syncwarp();  // the slot is read before the next quarter's stores
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
