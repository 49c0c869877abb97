// The FP8 x FP4 transform stage: one warpgroup expands each landed k-block of packed MXFP4
// weights (BLOCK_N rows x 64 bytes = 128 codes a row, unswizzled) into the E4M3 tile the MMA
// reads (BLOCK_N rows x 128 bytes, 128B swizzle, K-major), with every 32-block's UE8M0 scale
// folded in exactly (transform/fp4_to_fp8.cuh).
//
// Exactness. E2M1 * 2^t is exact in E4M3 for t in [-8, 6]: a window of 15 binades. Per k-block
// (128 of K) and tile (BLOCK_N rows), a pass takes a base exponent (the largest scale byte not
// yet covered) and converts the 32-blocks whose scale lies within 14 of it, writing zeros for
// the others; the MMA promotes that pass with 2^(base - 133). Blocks more than 14 binades below
// the base wait for the next pass, with its own base: the result stays exact for every scale the
// format allows, and checkpoints whose scales of one 128 x BLOCK_N block span at most 15 binades
// (all seen so far) take one pass. A scale byte of 0xFF (NaN) makes its block's bytes E4M3 NaNs
// in the first pass: its weight row's output column is NaN for every token, as the dequantized
// reference gives.
//
// Work split: per k-block, step `it` gives warp w rows 16 it + 4 w + lane / 8, lane % 8 the
// 16-code chunk (8 bytes in, 16 bytes out) of that row: a warp reads 256 contiguous bytes and
// writes four whole 128-byte rows, conflict-free. Each lane takes its chunk's scale byte from
// the stage (the producer copied the k-block's scale words there with the weights). Per pass the warpgroup agrees on the base by a warp max, a shared-memory exchange
// and a named barrier (NamedBarrier::kTransform), together with the min that tells whether any
// block is left for another pass.
//
// Out stages: slab 0 the E4M3 tile, slab 1 the pass's metadata (float scale 2^(base - 133) at
// byte 0, uint32 "another pass follows" at byte 4), read by the math warpgroups after the
// stage's full barrier (every transform thread arrives after its stores and the proxy fence).
// Scratch: the 15 conversion tables (120 bytes) and the exchange slots.
#pragma once

#include <stdint.h>

#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/transform/fp4_to_fp8.cuh>

namespace moegemm {

struct Fp4PassInfo {
  float scale;    // 2^(base - 133): the pass's weight factor
  uint32_t more;  // another pass of this k-block follows

  // acc += tmp * (row scale x the pass's factor).
  template <typename Mma, typename Accum>
  __device__ __forceinline__ void promote(Accum& acc, const Accum& tmp, float scale_lo,
                                          float scale_hi) const {
    Mma::promote(acc, tmp, scale_lo * scale, scale_hi * scale);
  }
};

template <uint32_t BLOCK_N, uint32_t kNumStages_ = 2>
struct Fp4ExpandTransform {
  static constexpr bool kEnabled = true;
  static constexpr bool kMathReadsInput = true;  // A stays in the TMA ring
  static constexpr uint32_t kNumStages = kNumStages_;
  static constexpr uint32_t kNumWarpgroups = 1;
  static constexpr uint32_t kTileBytes = BLOCK_N * 128;
  static constexpr uint32_t kInRowBytes = 64;  // 128 codes
  static constexpr uint32_t kSteps = BLOCK_N / 16;
  // A k-block's scale bytes (kSteps registers) and the conversion's temporaries: what ptxas
  // needs without spills, a multiple of 8.
  static constexpr uint32_t kNumRegs = (64 + 2 * kSteps + 7) / 8 * 8;
  static constexpr uint32_t kScratchBytes = 1024;
  static constexpr uint32_t kWindow = fp4::kNumOffsets - 1;  // base - s <= 14
  static_assert(BLOCK_N % 16 == 0, "16 rows a step");
  // The out ring's layout (InStages unused: the out tile is not the in slab's shape).
  template <typename InStages>
  using OutStages = StageLayout<kNumStages, kTileBytes, 1024>;

  // What the MMA reads of an out stage (after its full barrier).
  template <typename InStages>
  __device__ __forceinline__ static Fp4PassInfo pass_info(const StageRef& out) {
    return *reinterpret_cast<const Fp4PassInfo*>(OutStages<InStages>::template slab<1>(out));
  }

  // One thread: the tables, before the ring is used (the skeleton syncs the CTA after).
  __device__ __forceinline__ static void init_scratch(uint8_t* scratch, uint32_t thread) {
    if (thread < fp4::kNumOffsets) {
      uint32_t lo, hi;
      fp4::table_words(thread, lo, hi);
      reinterpret_cast<uint2*>(scratch)[thread] = make_uint2(lo, hi);
    }
  }

  // The warpgroup's max over `hi` and min over `lo` (one exchange, one barrier), through the
  // exchange slots of `parity`.
  __device__ __forceinline__ static void reduce(uint32_t& hi, uint32_t& lo, uint8_t* scratch,
                                                uint32_t& parity, uint32_t thread) {
    hi = __reduce_max_sync(0xffffffffu, hi);
    lo = __reduce_min_sync(0xffffffffu, lo);
    uint2* slots = reinterpret_cast<uint2*>(scratch + 512) + parity * 4;
    if (thread % 32 == 0) slots[thread / 32] = make_uint2(hi, lo);
    named_barrier_sync(NamedBarrier::kTransform, 128);
    const uint2 a = slots[0], b = slots[1], c = slots[2], d = slots[3];
    parity ^= 1;  // the next exchange uses the other slots (see the top of this file)
    hi = max(max(a.x, b.x), max(c.x, d.x));
    lo = min(min(a.y, b.y), min(c.y, d.y));
  }

  // Per k-block state of one thread: the scale byte of each of its chunks (kAbsent: no weights
  // there, rows past N or K past its end, all codes zero), read from the stage's scale slab
  // (loader/tma_loaders.cuh, PackedWeightLoader: two aligned words per weight row).
  static constexpr uint32_t kAbsent = 0x100;
  struct Scales {
    uint32_t s[kSteps];
  };

  template <typename InStages, typename Params, typename Work>
  __device__ __forceinline__ static void stage_scales(const Params& params, const Work& work,
                                                      uint32_t kb, const StageRef& in,
                                                      uint32_t thread, Scales& sc) {
    const uint32_t block = kb * 4 + (thread % 8) / 2;
    const bool k_ok = block < params.k / 32;
    const uint2* words = reinterpret_cast<const uint2*>(InStages::template slab<3>(in));
#pragma unroll
    for (uint32_t it = 0; it < kSteps; ++it) {
      const uint32_t row = it * 16 + (thread / 32) * 4 + (thread % 32) / 8;
      const uint32_t n = work.n_block * BLOCK_N + row;
      const uint32_t bytes = scale_word(params, work.group, n, kb, words[row]);
      sc.s[it] = (k_ok && n < params.n) ? (bytes >> (8 * ((thread % 8) / 2))) & 0xFF : kAbsent;
    }
  }

  // One pass over the landed k-block `in` into out stage `out`: the blocks whose scale byte lies
  // in [base - 14, base] converted with table base - s, the others zero (NaN in the first pass
  // for a NaN byte). base 0xFFFF: no finite scale in the tile, every block zero or NaN.
  template <typename InStages>
  __device__ __forceinline__ static void convert_pass(const Scales& sc, uint32_t base,
                                                      bool first_pass, const StageRef& in,
                                                      const StageRef& out, uint8_t* scratch,
                                                      uint32_t thread) {
    using Out = OutStages<InStages>;
    const uint8_t* src = InStages::template slab<1>(in);
    uint8_t* dst = Out::template slab<0>(out);
    const uint2* tables = reinterpret_cast<const uint2*>(scratch);
    const uint32_t chunk = thread % 8;
    // Straight-line steps (selects, no branches), in batches of kBatch: a batch's loads are
    // issued together and overlap, where a branch per chunk made each step wait for its own
    // loads; the batch bounds the registers the loaded words take.
    constexpr uint32_t kBatch = 4;
#pragma unroll
    for (uint32_t it0 = 0; it0 < kSteps; it0 += kBatch) {
      uint2 codes[kBatch], tab[kBatch];
#pragma unroll
      for (uint32_t i = 0; i < kBatch; ++i) {
        const uint32_t it = it0 + i;
        if (it < kSteps) {  // compile-time after unrolling
          const uint32_t row = it * 16 + (thread / 32) * 4 + (thread % 32) / 8;
          const uint32_t s = sc.s[it];
          const bool in_window = s <= base && s + kWindow >= base;  // never 0xFF or kAbsent
          // Rows past N and K past its end hold zero codes (TMA fill): reads stay in the tile.
          codes[i] = *reinterpret_cast<const uint2*>(src + row * kInRowBytes + chunk * 8);
          tab[i] = tables[in_window ? base - s : 0];
        }
      }
#pragma unroll
      for (uint32_t i = 0; i < kBatch; ++i) {
        const uint32_t it = it0 + i;
        if (it < kSteps) {
          const uint32_t row = it * 16 + (thread / 32) * 4 + (thread % 32) / 8;
          const uint32_t s = sc.s[it];
          const bool in_window = s <= base && s + kWindow >= base;
          uint4 v;
          fp4::convert_raw(codes[i].x, tab[i].x, tab[i].y, v.x, v.y);
          fp4::convert_raw(codes[i].y, tab[i].x, tab[i].y, v.z, v.w);
          // Outside this pass's window: zeros (another pass takes the block), or NaNs for a
          // NaN scale in the first pass.
          const uint32_t fill = (s == 0xFF && first_pass) ? fp4::kNanWord : 0u;
          v.x = in_window ? v.x : fill;
          v.y = in_window ? v.y : fill;
          v.z = in_window ? v.z : fill;
          v.w = in_window ? v.w : fill;
          *reinterpret_cast<uint4*>(dst + row * 128 + ((chunk ^ (row % 8)) << 4)) = v;
        }
      }
    }
  }

  // The whole k-block: every pass, each into its own out stage. `emit(pass_info_writer)` is the
  // skeleton's: acquire an out stage, run the body on it, fence and arrive.
  template <typename InStages, typename Params, typename Work, typename Emit>
  __device__ __forceinline__ static void run_k_block(const Params& params, const Work& work,
                                                     uint32_t kb, const StageRef& in,
                                                     uint8_t* scratch, uint32_t& parity,
                                                     uint32_t thread, const Scales& sc,
                                                     Emit&& emit) {
    using Out = OutStages<InStages>;
    // Largest and smallest finite scale byte of the tile's k-block (kAbsent-free: absent chunks
    // take part as neutral values).
    uint32_t hi = 0, lo = 0xFF;
    bool any = false;
#pragma unroll
    for (uint32_t it = 0; it < kSteps; ++it) {
      const uint32_t s = sc.s[it];
      if (s < 0xFF) {
        hi = max(hi, s);
        lo = min(lo, s);
        any = true;
      }
    }
    uint32_t base = any ? hi + 1 : 0, smallest = lo;  // base 0: no scale at all
    reduce(base, smallest, scratch, parity, thread);
    bool first = true;
    for (;;) {
      const bool none = base == 0;
      base = none ? 0 : base - 1;
      // Blocks below this pass's window: another pass (their max is its base).
      const bool more = !none && smallest + kWindow < base;
      emit([&](const StageRef& out) {
        convert_pass<InStages>(sc, none ? 0xFFFFu : base, first, in, out, scratch, thread);
        if (thread == 0) {
          Fp4PassInfo* info = reinterpret_cast<Fp4PassInfo*>(Out::template slab<1>(out));
          // 2^(base - 133) in [2^-133, 2^121]: exact in FP32 (subnormal below 2^-126).
          info->scale = none ? 0.0f : ldexpf(1.0f, static_cast<int>(base) - 133);
          info->more = more ? 1u : 0u;
        }
      });
      if (!more) break;
      first = false;
      // The next base: the largest scale below this window.
      uint32_t next = 0;
#pragma unroll
      for (uint32_t it = 0; it < kSteps; ++it) {
        const uint32_t s = sc.s[it];
        if (s < 0xFF && s + kWindow < base) next = max(next, s + 1);
      }
      uint32_t unused = 0;
      reduce(next, unused, scratch, parity, thread);
      base = next;
    }
    (void)params;
    (void)work;
    (void)kb;
  }
};

}  // namespace moegemm
