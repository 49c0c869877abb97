// The MMA policy of the FP8 mainloop with FP32 promotion every 128 of K (DeepGEMM's scheme):
// each k-block (or, for FP8 x FP4, each pass of one, see pipeline/fp4_expand_transform.cuh)
// runs its four wgmma m64 x BLOCK_N x 32 into a temporary accumulator set, waits for them, and
// adds them into the FP32 accumulators scaled by the row's activation scale times the pass's
// weight scale. The promotion bounds the tensor core's limited-precision FP8 accumulation to
// 128 products and carries both scales, so the mainloop itself does no scale math.
//
// Each math warpgroup owns 64 rows of A (one m64 atom): A from the TMA ring (slab 0, 128-byte
// rows, 128B swizzle), B from the transform ring (slab 0, the E4M3 weight tile, same layout).
// A thread's accumulator i sits in row (warp % 4) * 16 + lane / 4 + 8 * ((i / 2) % 2) of the
// warpgroup's 64 (the wgmma D fragment), hence two activation scales per thread and k-block.
#pragma once

#include <cuda_fp8.h>

#include <stdint.h>

#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/mma/sm90_wgmma.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/transform/fp4_table.cuh>

namespace moegemm::sm90 {

template <uint32_t BLOCK_N>
struct Fp8PromoteMma {
  using Atom = Wgmma<__nv_fp8_e4m3, __nv_fp8_e4m3, BLOCK_N, Major::K, Major::K>;
  using Accum = WgmmaAccum<1, BLOCK_N>;
  static constexpr uint32_t BLOCK_K = 128;
  static constexpr uint32_t kKStepBytes = 32;

  __device__ __forceinline__ static void zero(Accum& acc) { zero_accum(acc); }
  __device__ __forceinline__ static void fence(Accum& acc) { fence_accum(acc); }

  struct Operands {
    uint64_t desc_a, desc_b;
  };

  // The two stages' addresses are shuffled from lane 0 first: ptxas then knows them uniform
  // and builds and advances the eight descriptors in uniform registers, instead of 64-bit adds
  // in general registers and a move of each word (R2UR).
  template <typename InStages, typename OutStages>
  __device__ __forceinline__ static Operands operands(const StageRef& in, const StageRef& out,
                                                      uint32_t math_wg) {
    const uint32_t a =
        __shfl_sync(0xFFFFFFFFu, smem_u32(InStages::template slab<0>(in) + math_wg * 64 * 128), 0);
    const uint32_t b = __shfl_sync(0xFFFFFFFFu, smem_u32(OutStages::template slab<0>(out)), 0);
    return {make_smem_desc_k128b(a), make_smem_desc_k128b(b)};
  }

  // Every wgmma of one k-block into `tmp`, the first overwriting it.
  __device__ __forceinline__ static void issue(Accum& tmp, const Operands& ops) {
    Atom::fma_overwrite(ops.desc_a, ops.desc_b, tmp.v[0]);
#pragma unroll
    for (uint32_t kk = 1; kk < BLOCK_K / 32; ++kk)
      Atom::fma(advance_desc(ops.desc_a, kk * kKStepBytes),
                advance_desc(ops.desc_b, kk * kKStepBytes), tmp.v[0]);
  }

  // acc += tmp * scale of its row (scale_lo: the thread's first row, scale_hi: 8 rows below).
  __device__ __forceinline__ static void promote(Accum& acc, const Accum& tmp, float scale_lo,
                                                 float scale_hi) {
#pragma unroll
    for (uint32_t i = 0; i < BLOCK_N / 2; ++i)
      acc.v[0][i] = fmaf(tmp.v[0][i], (i / 2) % 2 ? scale_hi : scale_lo, acc.v[0][i]);
  }

  // As promote, times a factor per 64 columns (shared memory; accumulator i sits in column
  // 8 (i / 4) + 2 (t % 4) + i % 2, so in block i / 32): one broadcast load and two multiplies
  // per block.
  __device__ __forceinline__ static void promote_blocks(Accum& acc, const Accum& tmp,
                                                        const float* factors, float scale_lo,
                                                        float scale_hi) {
#pragma unroll
    for (uint32_t b = 0; b < (BLOCK_N + 63) / 64; ++b) {
      const float f = factors[b];
      const float lo = scale_lo * f, hi = scale_hi * f;
#pragma unroll
      for (uint32_t i = 32 * b; i < 32 * b + 32 && i < BLOCK_N / 2; ++i)
        acc.v[0][i] = fmaf(tmp.v[0][i], (i / 2) % 2 ? hi : lo, acc.v[0][i]);
    }
  }

  // As promote, times a factor per column (shared memory, BLOCK_N floats).
  __device__ __forceinline__ static void promote_columns(Accum& acc, const Accum& tmp,
                                                         const float* factors, float scale_lo,
                                                         float scale_hi) {
    const uint32_t quad = threadIdx.x % 4;
#pragma unroll
    for (uint32_t g = 0; g < BLOCK_N / 8; ++g) {
      const float2 f = *reinterpret_cast<const float2*>(factors + 8 * g + 2 * quad);
      acc.v[0][4 * g + 0] = fmaf(tmp.v[0][4 * g + 0], scale_lo * f.x, acc.v[0][4 * g + 0]);
      acc.v[0][4 * g + 1] = fmaf(tmp.v[0][4 * g + 1], scale_lo * f.y, acc.v[0][4 * g + 1]);
      acc.v[0][4 * g + 2] = fmaf(tmp.v[0][4 * g + 2], scale_hi * f.x, acc.v[0][4 * g + 2]);
      acc.v[0][4 * g + 3] = fmaf(tmp.v[0][4 * g + 3], scale_hi * f.y, acc.v[0][4 * g + 3]);
    }
  }
};

// The convert-ahead kernel's MMA (kRunsTile: it waits for, releases and advances the TMA
// stages of a whole tile itself): both operands from the TMA stage, the tokens (slab 0) and the
// weights' E4M3 copy (slab 1). Per k-block: the four wgmma into `tmp`; while they run, the
// rows' activation scales (slab 2) and the factor of each 64 weight rows (the first offsets word
// of each block in slab 3, 0 for a block the preparation flagged) read; then the wait, the
// stage's release, a probe of the next stage's full barrier, the promotion, and only then, if
// the probe failed, the wait for it: the next k-block's wgmma issue right after the last FFMA.
// The tile runs as a head up to the ring's first stage, whole rounds of the ring, and a tail:
// inside a round every stage index is a compile-time constant, so descriptors, scale, offsets
// and barrier addresses are immediates off uniform bases (shuffled once a tile, never a k-block).
template <uint32_t BLOCK_N>
struct Fp8BlockScaledMma : Fp8PromoteMma<BLOCK_N> {
  using Base = Fp8PromoteMma<BLOCK_N>;
  using typename Base::Accum;
  static constexpr bool kRunsTile = true;
  static constexpr uint32_t kBlocks = BLOCK_N / 64;
  static_assert(BLOCK_N % 64 == 0, "a factor per 64 weight rows");

  __device__ __forceinline__ static void skip_tile(uint32_t) {}

  // Stage 0's shared addresses as this thread reads them (all but sfa uniform in the warp).
  struct StageBases {
    uint32_t full;     // the ring's full barriers; the empty ones follow (pipeline/ring.cuh)
    uint32_t units_a;  // this warpgroup's 64 token rows, descriptor units (address / 16)
    uint32_t units_b;  // the weights' E4M3 copy, descriptor units
    uint32_t sfa;      // this thread's first row's activation scale
    uint32_t words;    // the offsets words of the tile's weight rows
  };

  // One k-block on stage `s`; the next k-block reads stage `next_s` in phase `next_phase`.
  template <typename Stages, uint32_t kNumStages>
  __device__ __forceinline__ static void k_block(Accum& acc, Accum& tmp, const StageBases& at,
                                                 uint32_t s, uint32_t next_s,
                                                 uint32_t next_phase, bool last) {
    // A stage further is a constant step of every address (descriptors count 16-byte units).
    constexpr uint32_t kStepA = Stages::template slab_bytes<0>() / 16;
    constexpr uint32_t kStepB = Stages::template slab_bytes<1>() / 16;
    constexpr uint32_t kSfaStep = Stages::template slab_bytes<2>();
    constexpr uint32_t kWordsStep = Stages::template slab_bytes<3>();
    constexpr uint32_t kEmpty = 8 * kNumStages;
    constexpr uint32_t kKStepUnits = Base::kKStepBytes / 16;
    const uint32_t units_a = at.units_a + s * kStepA, units_b = at.units_b + s * kStepB;
    Base::fence(tmp);
    warpgroup_arrive();
    Base::Atom::fma_overwrite(smem_desc_k128b_units(units_a), smem_desc_k128b_units(units_b),
                              tmp.v[0]);
#pragma unroll
    for (uint32_t kk = 1; kk < Base::BLOCK_K / 32; ++kk)
      Base::Atom::fma(smem_desc_k128b_units(units_a + kk * kKStepUnits),
                      smem_desc_k128b_units(units_b + kk * kKStepUnits), tmp.v[0]);
    warpgroup_commit_batch();
    const uint32_t sfa = at.sfa + s * kSfaStep;
    const float scale_lo = __uint_as_float(lds32(sfa)), scale_hi = __uint_as_float(lds32(sfa + 32));
    uint32_t word[kBlocks];
#pragma unroll
    for (uint32_t b = 0; b < kBlocks; ++b) word[b] = lds32(at.words + s * kWordsStep + 256 * b);
    warpgroup_wait<0>();
    Base::fence(tmp);
    __syncwarp();
    if (cute::elect_one_sync()) mbarrier_arrive(at.full + kEmpty + 8 * s);
    const uint32_t ready = last ? 1u : mbarrier_test_wait(at.full + 8 * next_s, next_phase);
    float factors[kBlocks];
#pragma unroll
    for (uint32_t b = 0; b < kBlocks; ++b) {  // the flag is the factor's sign bit: 0 if set
      const int32_t bits = static_cast<int32_t>(__float_as_uint(fp4::row_scale_of(word[b])));
      factors[b] = __int_as_float(max(bits, 0));
    }
    Base::promote_blocks(acc, tmp, factors, scale_lo, scale_hi);
    if (ready == 0) mbarrier_wait(at.full + 8 * next_s, next_phase);
  }

  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static void run_tile(Accum& acc, Accum& tmp, const Params&,
                                                  const Work&, uint32_t num_k_blocks,
                                                  const Ring& ring, typename Ring::State& state,
                                                  uint8_t* smem, uint8_t* /*scratch*/,
                                                  uint32_t math_wg, uint32_t lane_idx) {
    if (num_k_blocks == 0) return;
    constexpr uint32_t kFull = 0xFFFFFFFFu;
    constexpr uint32_t kNumStages = Ring::kNumStages;
    // No clusters beside a side warpgroup (the skeleton): a stage goes back to this CTA only.
    const uint32_t base = __shfl_sync(kFull, smem_u32(smem), 0);
    const uint32_t t = threadIdx.x % 128;
    const uint32_t row = math_wg * 64 + (t / 32) * 16 + (t % 32) / 4;
    const StageBases at{
        __shfl_sync(kFull, smem_u32(ring.full), 0),
        __shfl_sync(kFull, (base + Stages::template slab_offset<0>() + math_wg * 64 * 128) >> 4, 0),
        __shfl_sync(kFull, (base + Stages::template slab_offset<1>()) >> 4, 0),
        base + Stages::template slab_offset<2>() + 4 * row,
        base + Stages::template slab_offset<3>(),
    };
    uint32_t stage = __shfl_sync(kFull, state.stage_idx, 0), phase = state.phase;
    mbarrier_wait(at.full + 8 * stage, phase);
    uint32_t kb = 0;
    // Head: the stages up to the ring's end, indexed at run time.
#pragma unroll 1
    for (; stage != 0 && kb < num_k_blocks; ++kb) {
      const uint32_t next = stage + 1 == kNumStages ? 0 : stage + 1;
      const uint32_t next_phase = phase ^ (next == 0);
      k_block<Stages, kNumStages>(acc, tmp, at, stage, next, next_phase, kb + 1 == num_k_blocks);
      stage = next;
      phase = next_phase;
    }
    // Whole rounds from stage 0: every stage index a constant.
#pragma unroll 1
    for (; kb + kNumStages <= num_k_blocks; kb += kNumStages) {
#pragma unroll
      for (uint32_t s = 0; s < kNumStages; ++s) {
        const bool wraps = s + 1 == kNumStages;  // only a round's last k-block can be the tile's
        k_block<Stages, kNumStages>(acc, tmp, at, s, wraps ? 0 : s + 1, phase ^ wraps,
                                    wraps && kb + kNumStages == num_k_blocks);
      }
      phase ^= 1;
    }
    // Tail: fewer k-blocks than stages left, from stage 0 (or none), so none wraps.
#pragma unroll 1
    for (; kb < num_k_blocks; ++kb, ++stage)
      k_block<Stages, kNumStages>(acc, tmp, at, stage, stage + 1, phase, kb + 1 == num_k_blocks);
    state.stage_idx = stage;
    state.phase = phase;
  }
};

}  // namespace moegemm::sm90
