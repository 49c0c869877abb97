// The FP8 x FP4 transform stage on prepared weights (python/moegemm/api/mxfp4_weights.py, "the
// prepared layout"): one warpgroup turns each landed k-block of thread-ordered codes (BLOCK_N
// weight rows, 64-row blocks of 4096 bytes) into the E4M3 tile the SS wgmma reads (BLOCK_N rows
// x 128 bytes, 128B swizzle, K-major) by the table conversion of transform/fp4_table.cuh, the
// same arithmetic the decode kernel runs on its register operands.
//
// Work split: one warpgroup, or two where the tile's 64-row blocks pair up (warpgroup w takes
// blocks w, w + 2, ..: the conversion is latency-bound, and a second warp per scheduler nearly
// doubles its rate). Per 64-row block b, thread t converts rows r = 16 (t / 32) + (t % 32) / 4 and
// r + 8 (the decode kernel's fragment rows): two conflict-free LDS.128 of codes, one LDS.64 of
// the two rows' offsets words, 8 tables (built once per quad through the warp's scratch,
// fp4::share_quad_tables), 16 words of 4 E4M3 bytes, each
// stored with one STS.32 at its row's swizzled 16-byte chunk (the 8 rows of a warp's store hit
// 8 distinct chunks: no bank conflict). No vote, barrier or reduction: every thread reads the
// flags of the tile's blocks itself (one broadcast load per block).
//
// Passes (the metadata slab of each out stage, read by the MMA after the stage's full barrier):
//   pass 0         every block's conversion; its factor is one float per 64-row block,
//                  2^(top - 133) from the block's first offsets word (one top per block: the
//                  promotion costs one multiply per block, as a 128 x 128 FP8 weight scale);
//                  blocks the preparation flagged take factor 0 (their bytes stay finite).
//   passes 1..4    only where a block of the tile is flagged (scales spanning more than the
//                  table's window): pass p converts 32-block p - 1 of the flagged blocks at
//                  offset 12, zeros elsewhere, with a factor per weight row (column of D),
//                  2^(s - 133) of that row's own scale byte (the offsets tensor's second plane,
//                  read from global memory by the threads of quad lane 0).
// Metadata: uint32 `more` (another pass of this k-block follows) at byte 0, uint32 per_column
//   at 4, the floats from byte 16: BLOCK_N / 64 block factors, or BLOCK_N column factors.
#pragma once

#include <stdint.h>

#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/transform/fp4_table.cuh>

namespace moegemm {

// What the MMA reads of a pass: the factors in shared memory, one per 64-row block (or per
// weight row with per_column), and whether another pass follows.
struct Fp4TablePassInfo {
  const float* factors;
  uint32_t more;
  uint32_t per_column;

  // acc += tmp * (row scale x the pass's factor of the accumulator's column).
  template <typename Mma, typename Accum>
  __device__ __forceinline__ void promote(Accum& acc, const Accum& tmp, float scale_lo,
                                          float scale_hi) const {
    if (per_column) {
      Mma::promote_columns(acc, tmp, factors, scale_lo, scale_hi);
    } else {
      Mma::promote_blocks(acc, tmp, factors, scale_lo, scale_hi);
    }
  }
};

template <uint32_t BLOCK_N, uint32_t kNumStages_ = 2>
struct Fp4TableTransform {
  static constexpr bool kEnabled = true;
  static constexpr bool kMathReadsInput = true;  // the activations stay in the TMA ring
  static constexpr uint32_t kNumStages = kNumStages_;
  static constexpr uint32_t kNumBlocks = BLOCK_N / 64;
  // Two warpgroups where the blocks pair up: warpgroup w converts blocks w, w + 2, ..
  static constexpr uint32_t kNumWarpgroups = kNumBlocks % 2 == 0 ? 2 : 1;
  static constexpr uint32_t kBlocksPerWG = kNumBlocks / kNumWarpgroups;
  static constexpr uint32_t kBlockBytes = 64 * 128 / 2;  // a 64-row block's codes
  static constexpr uint32_t kTileBytes = BLOCK_N * 128;
  static constexpr uint32_t kInfoBytes = (16 + 4 * BLOCK_N + 1023) / 1024 * 1024;
  static constexpr uint32_t kExactPasses = 4;  // one per 32-block
  // A block's 8 code words and 16 results, the 8 store offsets and the addresses: what ptxas
  // needs without spills; with two warpgroups the math ones keep 160.
  static constexpr uint32_t kNumRegs = kNumWarpgroups == 2 ? 64 : 96;
  // The quads' shared tables (fp4::share_quad_tables) of every transform warp, in whole KiB
  // (the D staging that may follow keeps its alignment).
  static constexpr uint32_t kScratchBytes =
      (kNumWarpgroups * 4 * fp4::kWarpTableBytes + 1023) / 1024 * 1024;
  static_assert(BLOCK_N % 64 == 0 && kNumBlocks <= 4, "64-row blocks, at most 4");
  template <typename InStages>
  using OutStages = StageLayout<kNumStages, kTileBytes, kInfoBytes>;

  __device__ __forceinline__ static void init_scratch(uint8_t*, uint32_t) {}

  template <typename InStages>
  __device__ __forceinline__ static Fp4TablePassInfo pass_info(const StageRef& out) {
    const uint32_t* meta =
        reinterpret_cast<const uint32_t*>(OutStages<InStages>::template slab<1>(out));
    return Fp4TablePassInfo{reinterpret_cast<const float*>(meta + 4), meta[0], meta[1]};
  }

  struct Scales {};  // nothing is read ahead of the passes
  template <typename InStages, typename Params, typename Work>
  __device__ __forceinline__ static void stage_scales(const Params&, const Work&, uint32_t,
                                                      const StageRef&, uint32_t, Scales&) {}

  // This thread's place in a 64-row block: its code bytes, its offsets pair, and where its
  // words go: register 4 j + 2 q + h holds row r + 8 h, 16-byte chunk c = 2 j + q, stored at
  // chunk[c] + 1024 h (rows r and r + 8 share the swizzle phase (r + 8 h) % 8 = lane / 4).
  struct Lane {
    uint32_t code_offset, pair_offset, row;
    uint32_t chunk[8];
  };

  __device__ __forceinline__ static Lane make_lane(uint32_t t) {
    Lane lane;
    const uint32_t lane_idx = t % 32;
    lane.row = 16 * (t / 32) + lane_idx / 4;
    lane.code_offset = 16 * t;
    lane.pair_offset = 8 * (8 * (t / 32) + lane_idx / 4);
#pragma unroll
    for (uint32_t c = 0; c < 8; ++c)
      lane.chunk[c] = lane.row * 128 + ((c ^ (lane_idx / 4)) << 4) + 4 * (t % 4);
    return lane;
  }

  __device__ __forceinline__ static void store_block(uint32_t tile, const Lane& lane,
                                                     const uint32_t (&a)[16]) {
#pragma unroll
    for (uint32_t i = 0; i < 16; ++i)
      sts32(tile + lane.chunk[i / 2] + 1024 * (i % 2), a[i]);
  }

  // One k-block: pass 0 and, where the tile holds a flagged block, the four exact passes, each
  // into an out stage of its own. `emit(body)` is the skeleton's: acquire an out stage, run the
  // body on it, fence and arrive (every thread of every transform warpgroup). `thread` counts
  // over the warpgroups: 0 .. 128 kNumWarpgroups - 1.
  template <typename InStages, typename Params, typename Work, typename Emit>
  __device__ __forceinline__ static void run_k_block(const Params& params, const Work& work,
                                                     uint32_t kb, const StageRef& in,
                                                     uint8_t* scratch, uint32_t& /*parity*/,
                                                     uint32_t thread, const Scales&,
                                                     Emit&& emit) {
    using Out = OutStages<InStages>;
    const uint32_t wg = thread / 128;
    const Lane lane = make_lane(thread % 128);
    const fp4::QuadTableLane tables =
        fp4::quad_table_lane(smem_u32(scratch) + (thread / 32) * fp4::kWarpTableBytes, thread % 32);
    const uint32_t codes = smem_u32(InStages::template slab<1>(in)) + lane.code_offset;
    const uint32_t offsets = smem_u32(InStages::template slab<3>(in));
    // Every load of the k-block first, before the out stage is awaited: their latency hides
    // under that wait, and the blocks' conversions, free of branches, interleave.
    uint32_t flagged = 0;  // the same in every thread: the blocks' first words
#pragma unroll
    for (uint32_t b = 0; b < kNumBlocks; ++b)
      if (lds32(offsets + 256 * b) & fp4::kExactFlag) flagged |= 1u << b;
    uint32_t w[kBlocksPerWG][8];
    uint2 ow[kBlocksPerWG];
#pragma unroll
    for (uint32_t i = 0; i < kBlocksPerWG; ++i) {
      const uint32_t b = wg + i * kNumWarpgroups;
      const uint4 c0 = lds128(codes + b * kBlockBytes);
      const uint4 c1 = lds128(codes + b * kBlockBytes + kBlockBytes / 2);
      ow[i] = lds64(offsets + 256 * b + lane.pair_offset);
      w[i][0] = c0.x, w[i][1] = c0.y, w[i][2] = c0.z, w[i][3] = c0.w;
      w[i][4] = c1.x, w[i][5] = c1.y, w[i][6] = c1.z, w[i][7] = c1.w;
    }
    float factor = 0.0f;  // threads 0 .. kNumBlocks - 1: their block's
    if (thread < kNumBlocks) {
      const uint32_t word = lds32(offsets + 256 * thread);
      factor = (word & fp4::kExactFlag) ? 0.0f : fp4::row_scale_of(word);
    }

    // Pass 0. A flagged block is converted too (its offsets are clamped into the table's
    // window, so its E4M3 bytes are finite) and promoted with factor 0: no zero fill.
    emit([&](const StageRef& out) {
      const uint32_t tile = smem_u32(Out::template slab<0>(out));
      uint32_t* meta = reinterpret_cast<uint32_t*>(Out::template slab<1>(out));
#pragma unroll
      for (uint32_t i = 0; i < kBlocksPerWG; ++i) {
        uint32_t a[16];
        fp4::convert_k_block(w[i], fp4::share_quad_tables(ow[i].x, ow[i].y, tables), a);
        store_block(tile + (wg + i * kNumWarpgroups) * 64 * 128, lane, a);
      }
      if (thread < kNumBlocks) reinterpret_cast<float*>(meta + 4)[thread] = factor;
      if (thread == 0) {
        meta[0] = flagged != 0;
        meta[1] = 0;
      }
    });
    if (flagged == 0) return;

    // The scale bytes of this thread's rows r and r + 8 in each of its blocks (the second
    // plane), for the exact passes.
    const uint32_t k_blocks = (params.k + 127) / 128;
    const uint8_t* plane = params.sfb + uint64_t{work.group} * params.sfb_stride_group +
                           uint64_t{k_blocks + kb} * params.sfb_stride_row +
                           uint64_t{work.n_block} * BLOCK_N * 4;
    const uint32_t valid_blocks = min(4u, params.k / 32 - kb * 4);
    uint2 raw[kBlocksPerWG];
#pragma unroll
    for (uint32_t i = 0; i < kBlocksPerWG; ++i) {
      const uint32_t b = wg + i * kNumWarpgroups;
      raw[i] = (flagged & (1u << b)) ? __ldg(reinterpret_cast<const uint2*>(
                                           plane + 256 * b + lane.pair_offset))
                                     : make_uint2(0, 0);
    }
    const fp4::Table t12 = fp4::table_of_offset(fp4::kMaxOffset);
#pragma unroll 1
    for (uint32_t pass = 0; pass < kExactPasses; ++pass) {
      emit([&](const StageRef& out) {
        const uint32_t tile = smem_u32(Out::template slab<0>(out));
        uint32_t* meta = reinterpret_cast<uint32_t*>(Out::template slab<1>(out));
        float* factors = reinterpret_cast<float*>(meta + 4);
#pragma unroll
        for (uint32_t i = 0; i < kBlocksPerWG; ++i) {
          const uint32_t b = wg + i * kNumWarpgroups;
          const bool exact = flagged & (1u << b);
          // Only 32-block `pass` of a flagged block, at offset 12; the other k of its rows
          // are zeros (they share the row's factor). Unflagged blocks take factor 0.
          uint32_t a[16];
#pragma unroll
          for (uint32_t j = 0; j < 4; ++j) {
#pragma unroll
            for (uint32_t q = 0; q < 2; ++q) {
              uint32_t r, r8;
              fp4::convert_word(w[i][2 * j + q], t12, t12, r, r8);
              a[4 * j + 2 * q] = j == pass ? r : 0u;
              a[4 * j + 2 * q + 1] = j == pass ? r8 : 0u;
            }
          }
          store_block(tile + b * 64 * 128, lane, a);
          if (thread % 4 == 0) {  // unflagged blocks: factor 0
            const uint32_t live_blocks = exact ? valid_blocks : 0;
            factors[64 * b + lane.row] = fp4::exact_scale(raw[i].x, pass, live_blocks);
            factors[64 * b + lane.row + 8] = fp4::exact_scale(raw[i].y, pass, live_blocks);
          }
        }
        if (thread == 0) {
          meta[0] = pass + 1 < kExactPasses;
          meta[1] = 1;
        }
      });
    }
  }
};

}  // namespace moegemm
