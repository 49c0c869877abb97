// The MMA policy of the FP8 x FP4 kernel on prepared weights (impls/sm90_fp8_fp4_swap_ab_gemm.cuh
// with Config::kPreparedWeights): weights on the wgmma's M side as register A operands,
// converted by table (transform/fp4_table.cuh) from the stage's codes, tokens' E4M3 rows the
// shared-memory B operand (N = BLOCK_T, 8..160). It runs a whole tile (kRunsTile): the skeleton
// only schedules tiles and stores.
//
// Per math warpgroup (64 weight rows) and k-block, thread t holds rows r = 16 (t / 32) +
// (t % 32) / 4 and r + 8: 8 code words (two conflict-free LDS.128: the prepared layout stores
// the block's first 16 bytes of every thread, then the second 16), one offsets word per row
// (one LDS.64, the two rows adjacent), the 8 tables (built once per quad through the warp's
// scratch, fp4::share_quad_tables: kScratchBytes in the kernel's epilogue region) and 16 A
// registers.
//
// Pipeline inside the warpgroup (two compile-time A register sets, so no indexing by a runtime
// value; only wgmma.wait_group 0, as ptxas 13.0 serializes wait_group 1 on two sets):
//   kb's 4 wgmma (RS, m64 x BLOCK_T x 32) from set kb % 2 are in flight
//   wait for stage kb + 1 and convert it into the other set     (hides under the wgmma)
//   wait for the wgmma; with two temporary sets (kTwoTemporaries) issue kb + 1 first, then
//   promote kb: acc += tmp * factor, the token's scale times 2^(top - 133) of the warpgroup's
//   64-row block, formed once per stage by the relay warp (relay_stage)
//   release stage kb
// The promotion every 128 of K is also the one that bounds the FP8 accumulation.
//
// Exact fallback: a (64-row, 128-K) block whose scale bytes span more than the table window (or
// whose largest byte is below 7, where 2^(top - 133) is no normal float) is flagged by the
// preparation; the flag is read from the block's first word, so it is uniform in
// the warpgroup whatever the data. Such a k-block runs 4 more passes through the same wgmma
// code, pass p converting only its 32-block p - 1 with offset 12 and promoting with that block's
// own 2^(s - 133) (the scale bytes read from global memory, the second plane of the offsets
// tensor); the first pass's product is dropped (scale 0).
#pragma once

#include <stdint.h>

#include <utility>

#include <moegemm/mma/sm90_fp4_register_mma.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/sm90_wgmma.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/scheduler/tile.cuh>
#include <moegemm/transform/fp4_table.cuh>

namespace moegemm::sm90 {

template <uint32_t BLOCK_T, uint32_t BLOCK_W>
struct Fp4TableMma {
  static constexpr bool kRunsTile = true;
  using Atom = typename detail::Fp8RsAtom<BLOCK_T>::Type;
  static constexpr uint32_t kNumAccum = BLOCK_T / 2;
  static constexpr uint32_t kBlockBytes = 64 * 128 / 2;  // one warpgroup's codes of a k-block
  static constexpr uint32_t kExactPasses = 4;          // one per 32-block
  static constexpr uint32_t kNumMathWG = BLOCK_W / 64;
  // A second temporary accumulator set lets k-block kb + 1's wgmma start before kb's
  // promotion. It costs BLOCK_T / 2 registers: up to 48 tokens the 152 registers each of three
  // math warpgroups get hold it (four warpgroups take at most 16 tokens), up to 96 the 232 of
  // one or two (ptxas: no spills).
  static constexpr bool kTwoTemporaries =
      BLOCK_T <= 48 || (kNumMathWG <= 2 && BLOCK_T <= 96);

  struct Accum {
    float v[1][kNumAccum];  // the store_transposed layout, as WgmmaAccum<1, BLOCK_T>
  };

  __device__ __forceinline__ static void zero(Accum& acc) {
#pragma unroll
    for (uint32_t i = 0; i < kNumAccum; ++i) acc.v[0][i] = 0.0f;
  }

  template <size_t... I>
  __device__ __forceinline__ static void fma_impl(const uint32_t* a, uint64_t desc_b, float* acc,
                                                  bool overwrite, std::index_sequence<I...>) {
    Atom::fma(a[0], a[1], a[2], a[3], desc_b, acc[I]...,
              overwrite ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One);
  }

  // The tables' scratch (fp4::share_quad_tables), per math warp.
  static constexpr uint32_t kScratchBytes = kNumMathWG * 4 * fp4::kWarpTableBytes;

  // This thread's place in the warpgroup's 64-row block: the code bytes and the offsets pair.
  struct Lane {
    uint32_t code_offset;  // bytes into the codes slab (first LDS.128; +2048 the second)
    uint32_t pair_offset;  // bytes into the offsets slab: rows r and r + 8, adjacent
    uint32_t block_offset; // bytes into the offsets slab: the block's first word (the flag)
    uint32_t factor_offset;  // bytes into the scales slab: its quad's factors (relay_stage)
    fp4::QuadTableLane tables;  // its quad's tables in the scratch
  };

  // x as a value ptxas cannot recompute: kept in a register for the tile instead of rebuilt
  // from threadIdx every k-block where registers are short (four math warpgroups).
  __device__ __forceinline__ static uint32_t opaque(uint32_t x) {
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
  }

  // One stage's slabs as shared-window addresses: tokens, codes, token scales, offsets words.
  struct Slabs {
    uint32_t tokens, codes, sfa, offsets;
  };

  template <typename Stages>
  __device__ __forceinline__ static Slabs slabs_of(uint32_t smem, uint32_t stage_idx) {
    return Slabs{smem + Stages::template slab_offset<0>() + stage_idx * Stages::template slab_bytes<0>(),
                 smem + Stages::template slab_offset<1>() + stage_idx * Stages::template slab_bytes<1>(),
                 smem + Stages::template slab_offset<2>() + stage_idx * Stages::template slab_bytes<2>(),
                 smem + Stages::template slab_offset<3>() + stage_idx * Stages::template slab_bytes<3>()};
  }

  __device__ __forceinline__ static Lane make_lane(uint32_t math_wg, uint32_t scratch) {
    const uint32_t t = threadIdx.x % 128;
    const uint32_t pair = 8 * (t / 32) + (t % 32) / 4;  // row r = 16 (t / 32) + (t % 32) / 4
    const fp4::QuadTableLane tables =
        fp4::quad_table_lane(scratch + (4 * math_wg + t / 32) * fp4::kWarpTableBytes, t % 32);
    return Lane{opaque(math_wg * kBlockBytes + 16 * t), opaque((math_wg * 64 + 2 * pair) * 4),
                opaque(math_wg * 256), 4 * (math_wg * kFactorRow + (t % 4) * kQuadFactors),
                {opaque(tables.slot), opaque(tables.quad), opaque(tables.offset_mul)}};
  }

  // The 16 A registers of one k-block from its landed stage; returns the offsets words of rows
  // r (x) and r + 8 (y) and the block's first word (z: its exact-path flag, read here so that
  // the load is long done when finish() votes on it).
  __device__ __forceinline__ static uint3 convert(const Slabs& stage, const Lane& lane,
                                                  uint32_t (&a)[16]) {
    const uint4 c0 = lds128(stage.codes + lane.code_offset);
    const uint4 c1 = lds128(stage.codes + lane.code_offset + kBlockBytes / 2);
    const uint2 ow = lds64(stage.offsets + lane.pair_offset);
    const uint32_t flag_word = lds32(stage.offsets + lane.block_offset);
    const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    fp4::convert_k_block(w, fp4::share_quad_tables(ow.x, ow.y, lane.tables), a);
    return make_uint3(ow.x, ow.y, flag_word);
  }

  // Exact pass p (1..4) of a flagged k-block: only 32-block p - 1, at offset 12.
  __device__ __forceinline__ static void convert_exact(const Slabs& stage, const Lane& lane,
                                                       uint32_t pass, uint32_t (&a)[16]) {
    const uint4 c0 = lds128(stage.codes + lane.code_offset);
    const uint4 c1 = lds128(stage.codes + lane.code_offset + kBlockBytes / 2);
    const uint32_t w[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const fp4::Table t12 = fp4::table_of_offset(fp4::kMaxOffset);
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
#pragma unroll
      for (uint32_t q = 0; q < 2; ++q) {
        uint32_t r, r8;
        fp4::convert_word(w[2 * j + q], t12, t12, r, r8);
        a[4 * j + 2 * q] = j + 1 == pass ? r : 0u;
        a[4 * j + 2 * q + 1] = j + 1 == pass ? r8 : 0u;
      }
    }
  }

  // The relay (the producer warpgroup's second warp, RelayRing): once a stage has landed, it
  // turns the lanes' copy of the tokens' scales into one row of promotion factors per math
  // warpgroup over that copy: the token's scale times 2^(top - 133) of the warpgroup's 64-row
  // block (the preparation writes it into every row's word; the block's first word is read),
  // or times 1 on a block flagged for the exact passes, which multiply by each row's own scale.
  // The math threads then promote with one FFMA an accumulator and no multiply: the 32 lanes
  // form the BLOCK_T x W products once, where every math thread formed its BLOCK_T / 4 (32 FMUL
  // a k-block at 128 tokens). A row holds the factors in the order a quad (t % 4 = q) reads
  // them, tokens 8 c + 2 q + {0, 1} at kQuadFactors q + 2 c + {0, 1}, so a thread loads its
  // BLOCK_T / 4 by LDS.128; kQuadFactors, a multiple of 4, keeps the four quads' 16 bytes in
  // distinct banks.
  static constexpr bool kRelay = true;
  static constexpr uint32_t kQuadFactorsMin = (BLOCK_T / 4 + 3) / 4 * 4;
  static constexpr uint32_t kQuadFactors =
      kQuadFactorsMin % 16 == 0 ? kQuadFactorsMin + 4 : kQuadFactorsMin;
  static constexpr uint32_t kFactorRow = 4 * kQuadFactors;  // floats a math warpgroup
  static constexpr uint32_t kScaleFloats = kNumMathWG * kFactorRow;
  static_assert(kScaleFloats >= BLOCK_T, "the lanes' copy fits under the factors");

  // Where token `token`'s factor sits in a row.
  __device__ __forceinline__ static constexpr uint32_t factor_slot(uint32_t token) {
    return (token / 2 % 4) * kQuadFactors + token / 8 * 2 + token % 2;
  }

  template <typename Stages>
  __device__ __forceinline__ static void relay_stage(uint32_t smem, uint32_t stage_idx,
                                                     uint32_t lane) {
    constexpr uint32_t kPerLane = (BLOCK_T + 31) / 32;
    const Slabs stage = slabs_of<Stages>(smem, stage_idx);
    float sfa[kPerLane];
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < BLOCK_T) sfa[i] = __uint_as_float(lds32(stage.sfa + 4 * (lane + 32 * i)));
    __syncwarp();  // every lane has read the copy the rows overwrite
#pragma unroll
    for (uint32_t w = 0; w < kNumMathWG; ++w) {
      const uint32_t word = lds32(stage.offsets + w * 256);
      const float block_scale = (word & fp4::kExactFlag) != 0 ? 1.0f : fp4::row_scale_of(word);
#pragma unroll
      for (uint32_t i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < BLOCK_T)
          sts32(stage.sfa + 4 * (w * kFactorRow + factor_slot(lane + 32 * i)),
                __float_as_uint(block_scale * sfa[i]));
    }
  }

  // The thread's BLOCK_T / 4 factors, in its accumulators' token order (8 c + 2 (t % 4) + j at
  // 2 c + j): LDS.128s, one LDS.64 for a last pair.
  __device__ __forceinline__ static void load_factors(uint32_t addr, float (&f)[BLOCK_T / 4]) {
#pragma unroll
    for (uint32_t i = 0; i + 4 <= BLOCK_T / 4; i += 4) {
      const uint4 v = lds128(addr + 4 * i);
      f[i] = __uint_as_float(v.x);
      f[i + 1] = __uint_as_float(v.y);
      f[i + 2] = __uint_as_float(v.z);
      f[i + 3] = __uint_as_float(v.w);
    }
    if constexpr (BLOCK_T / 4 % 4 != 0) {
      constexpr uint32_t i = BLOCK_T / 4 / 4 * 4;
      const uint2 v = lds64(addr + 4 * i);
      f[i] = __uint_as_float(v.x);
      f[i + 1] = __uint_as_float(v.y);
    }
  }

  // The fast path's promotion factors of one k-block: the relay's row of the thread's
  // warpgroup, at its tokens 8 c + 2 (t % 4) + {0, 1}.
  struct Factors {
    float v[BLOCK_T / 4];
  };

  __device__ __forceinline__ static Factors factors_of(const Slabs& stage, const Lane& lane) {
    Factors f;
    load_factors(stage.sfa + lane.factor_offset, f.v);
    return f;
  }

  // Up to 64 tokens the factors are loaded before the wgmma wait (the promotion's loads were
  // its longest stall); wider blocks load them after it (ahead, their 32 registers cost 6% at
  // 128 tokens on the H200).
  static constexpr bool kFactorsAhead = BLOCK_T <= 64;

  // acc += tmp * factor of the accumulator's token (rows r and r + 8 share it).
  __device__ __forceinline__ static void promote_block(Accum& acc, const Accum& tmp,
                                                       const Factors& f) {
#pragma unroll
    for (uint32_t c = 0; c < BLOCK_T / 8; ++c) {
      acc.v[0][4 * c + 0] = fmaf(tmp.v[0][4 * c + 0], f.v[2 * c], acc.v[0][4 * c + 0]);
      acc.v[0][4 * c + 1] = fmaf(tmp.v[0][4 * c + 1], f.v[2 * c + 1], acc.v[0][4 * c + 1]);
      acc.v[0][4 * c + 2] = fmaf(tmp.v[0][4 * c + 2], f.v[2 * c], acc.v[0][4 * c + 2]);
      acc.v[0][4 * c + 3] = fmaf(tmp.v[0][4 * c + 3], f.v[2 * c + 1], acc.v[0][4 * c + 3]);
    }
  }

  // acc += tmp * row_scale[row] * sfa[token] (the tokens' scales: the relay's row, times 1 on
  // a flagged block).
  __device__ __forceinline__ static void promote(Accum& acc, const Accum& tmp,
                                                 const Slabs& stage, const Lane& lane,
                                                 float scale_r, float scale_r8) {
    float f[BLOCK_T / 4];
    load_factors(stage.sfa + lane.factor_offset, f);
#pragma unroll
    for (uint32_t c = 0; c < BLOCK_T / 8; ++c) {
      const float2 cs = make_float2(f[2 * c], f[2 * c + 1]);
      acc.v[0][4 * c + 0] = fmaf(tmp.v[0][4 * c + 0], scale_r * cs.x, acc.v[0][4 * c + 0]);
      acc.v[0][4 * c + 1] = fmaf(tmp.v[0][4 * c + 1], scale_r * cs.y, acc.v[0][4 * c + 1]);
      acc.v[0][4 * c + 2] = fmaf(tmp.v[0][4 * c + 2], scale_r8 * cs.x, acc.v[0][4 * c + 2]);
      acc.v[0][4 * c + 3] = fmaf(tmp.v[0][4 * c + 3], scale_r8 * cs.y, acc.v[0][4 * c + 3]);
    }
  }

  // A stage's tokens address shuffled from lane 0: ptxas then knows it uniform and builds the
  // four descriptors in uniform registers instead of moving both words of each from general
  // registers (5-8 instructions fewer a k-block, every config, no spill). The callers take it
  // before the wgmma wait, outside the branch that issues: a shuffle inside it could not move,
  // and its latency (and the move to a uniform register) sat between the wait and the issue.
  __device__ __forceinline__ static uint32_t uniform_tokens(const Slabs& stage) {
    return __shfl_sync(0xFFFFFFFFu, stage.tokens, 0);
  }

  // The 4 wgmma of one k-block (A registers `a`, the tokens at `tokens`, from uniform_tokens)
  // into `t`.
  __device__ __forceinline__ static void issue(const uint32_t (&a)[16], Accum& t,
                                               uint32_t tokens) {
    // The tokens' K-major 128B-swizzled rows (ptx/sm90_wgmma.cuh, make_smem_desc_k128b).
    const uint64_t desc_t = ((tokens & 0x3FFFF) >> 4) | (uint64_t{1024 >> 4} << 32) |
                            (uint64_t{1} << 62);
    warpgroup_fence_regs<kNumAccum>(t.v[0]);
    warpgroup_arrive();
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j)
      fma_impl(a + 4 * j, advance_desc(desc_t, 32 * j), t.v[0], j == 0,
               std::make_index_sequence<kNumAccum>{});
    warpgroup_commit_batch();
  }

  // A k-block whose wgmma into `t` has retired: its promotion (or, where the preparation
  // flagged its 64-row block, the exact passes, which reuse `a` and `t`), then its release.
  template <typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static void finish(Accum& acc, Accum& t, uint32_t (&a)[16],
                                                const uint3& ow, const Factors& factors,
                                                const Slabs& stage,
                                                uint32_t stage_idx,
                                                const Params& params, const Work& work,
                                                uint32_t kb, const Ring& ring, const Lane& lane,
                                                uint32_t lane_idx) {
    // A warp vote: ptxas then knows the branch is uniform (a wgmma on a path it must assume
    // divergent serializes every wgmma of the kernel, C7518).
    const bool exact = __any_sync(0xFFFFFFFFu, (ow.z & fp4::kExactFlag) != 0);
    if (!exact) {
      promote_block(acc, t, factors);
    } else {
      // The scale bytes of the thread's rows (the offsets tensor's second plane).
      const uint32_t k_blocks = (params.k + 127) / 128;
      const uint8_t* plane = params.sfb + uint64_t{work.group} * params.sfb_stride_group +
                             uint64_t{k_blocks + kb} * params.sfb_stride_row;
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(
          plane + uint64_t{work.n_block} * BLOCK_W * 4 + lane.pair_offset));
      const uint32_t valid_blocks = min(4u, params.k / 32 - kb * 4);
      warpgroup_wait<0>();  // the unpaired path may have a second batch in flight
#pragma unroll 1
      for (uint32_t pass = 0; pass < kExactPasses; ++pass) {
        convert_exact(stage, lane, pass + 1, a);
        issue(a, t, uniform_tokens(stage));
        warpgroup_wait<0>();
        warpgroup_fence_regs<kNumAccum>(t.v[0]);
        promote(acc, t, stage, lane, fp4::exact_scale(raw.x, pass, valid_blocks),
                        fp4::exact_scale(raw.y, pass, valid_blocks));
      }
    }
    __syncwarp();
    ring.consumer_release(stage_idx, lane_idx, true);
  }

  // One step of the mainloop: k-block kb's wgmma (from `cur` into `t_cur`) is in flight; wait
  // for stage kb + 1 and convert it into `nxt` meanwhile, then retire kb, issue kb + 1 (into
  // `t_nxt`) and promote kb (with one temporary set, promote first: `t_nxt` is `t_cur`).
  // Returns false after the tile's last k-block.
  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static bool step(Accum& acc, Accum& t_cur, Accum& t_nxt,
                                              uint32_t (&cur)[16], uint3& ow_cur,
                                              uint32_t (&nxt)[16], uint3& ow_nxt,
                                              const Params& params, const Work& work,
                                              uint32_t& kb, uint32_t k_end,
                                              const Ring& ring, typename Ring::State& state,
                                              uint32_t smem, const Lane& lane,
                                              uint32_t lane_idx) {
    const Slabs stage = slabs_of<Stages>(smem, state.stage_idx);
    typename Ring::State next = state;
    next.advance();
    const Slabs next_stage = slabs_of<Stages>(smem, next.stage_idx);
    const bool last = __any_sync(0xFFFFFFFFu, kb + 1 == k_end);  // uniform, as above
    if (!last) {
      ring.consumer_wait(next);
      ow_nxt = convert(next_stage, lane, nxt);
    }
    const uint32_t next_tokens = uniform_tokens(next_stage);
    Factors factors;
    if constexpr (kFactorsAhead) factors = factors_of(stage, lane);
    warpgroup_wait<0>();
    warpgroup_fence_regs<kNumAccum>(t_cur.v[0]);
    if constexpr (!kFactorsAhead) factors = factors_of(stage, lane);
    if constexpr (kTwoTemporaries) {
      if (!last) issue(nxt, t_nxt, next_tokens);
      finish(acc, t_cur, cur, ow_cur, factors, stage, state.stage_idx, params, work, kb, ring,
             lane, lane_idx);
    } else {
      finish(acc, t_cur, cur, ow_cur, factors, stage, state.stage_idx, params, work, kb, ring,
             lane, lane_idx);
      if (!last) issue(nxt, t_nxt, next_tokens);
    }
    state = next;
    ++kb;
    return !last;
  }

  // Issue order: with several math warpgroups, warpgroup 0 issues a tile's first wgmma batch
  // before the others. They read the same stages, so left alone they wait, issue, retire and
  // promote in step, and the tensor cores idle during every promotion; once ordered, the
  // tensor cores queue their batches one after another and each promotes while another's
  // wgmma runs (the order holds as long as a promotion takes less than a batch). Every math
  // warpgroup first meets the others at the tile's start (kTileStart, an idle one too:
  // skip_tile), so warpgroup 0 cannot reach the next tile's kIssueOrder before all have left
  // this one's.
  static constexpr uint32_t kMathThreads = 128 * kNumMathWG;

  // Before a tile's first wgmma: meet the others, then (warpgroups 1..) wait for warpgroup 0's.
  __device__ __forceinline__ static void wait_issue_turn(uint32_t math_wg) {
    if constexpr (kNumMathWG > 1) {
      named_barrier_sync(NamedBarrier::kTileStart, kMathThreads);
      if (math_wg != 0) named_barrier_sync(NamedBarrier::kIssueOrder, kMathThreads);
    }
  }

  // After it: warpgroup 0 lets the others issue.
  __device__ __forceinline__ static void pass_issue_turn(uint32_t math_wg) {
    if constexpr (kNumMathWG > 1)
      if (math_wg == 0) named_barrier_arrive(NamedBarrier::kIssueOrder, kMathThreads);
  }

  __device__ __forceinline__ static void skip_tile(uint32_t math_wg) { wait_issue_turn(math_wg); }

  // Paired k-blocks (kPairedKBlocks): two k-blocks' 8 wgmma in flight per wait, the next two
  // converted meanwhile, both promoted after it: half the waits and twice the independent work
  // a chain. A tile's odd last k-block pairs with zero A registers on its own stage (adds 0).
  // Four A register sets and two temporaries: one or two math warpgroups up to 64 tokens
  // (ptxas: no spills; from three warpgroups or 96 tokens it spills).
  static constexpr bool kPairedKBlocks = kNumMathWG <= 2 && BLOCK_T <= 64;

  // A paired k-block's A registers: stage `st` waited for and converted, or, past the tile's
  // last k-block (`live` false, uniform), zeros that add nothing.
  template <typename Ring>
  __device__ __forceinline__ static uint3 convert_or_zero(bool live, const Ring& ring,
                                                          const typename Ring::State& st,
                                                          const Slabs& stage, const Lane& lane,
                                                          uint32_t (&a)[16]) {
    if (live) {
      ring.consumer_wait(st);
      return convert(stage, lane, a);
    }
#pragma unroll
    for (uint32_t i = 0; i < 16; ++i) a[i] = 0u;
    return make_uint3(0, 0, 0);
  }

  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static bool pair_step(Accum& acc, Accum& t0, Accum& t1,
      uint32_t (&p0)[16], uint32_t (&p1)[16], uint3& wp0, uint3& wp1,
      uint32_t (&q0)[16], uint32_t (&q1)[16], uint3& wq0, uint3& wq1,
      const Params& params, const Work& work, uint32_t& kb, uint32_t n, const Ring& ring,
      typename Ring::State& state, uint32_t smem, const Lane& lane, uint32_t lane_idx) {
    typename Ring::State st1 = state; st1.advance();
    typename Ring::State st2 = st1; st2.advance();
    typename Ring::State st3 = st2; st3.advance();
    const Slabs s0 = slabs_of<Stages>(smem, state.stage_idx);
    const Slabs s1 = slabs_of<Stages>(smem, st1.stage_idx);
    const Slabs s2 = slabs_of<Stages>(smem, st2.stage_idx);
    const Slabs s3 = slabs_of<Stages>(smem, st3.stage_idx);
    const bool has_p1 = __any_sync(0xFFFFFFFFu, kb + 1 < n);
    const bool has_q0 = __any_sync(0xFFFFFFFFu, kb + 2 < n);
    const bool has_q1 = __any_sync(0xFFFFFFFFu, kb + 3 < n);
    if (has_q0) {
      ring.consumer_wait(st2);
      wq0 = convert(s2, lane, q0);
      wq1 = convert_or_zero(has_q1, ring, st3, s3, lane, q1);
    }
    // Without has_p1, f1 reads a stage not waited for (perhaps being filled): unused then, and
    // cheaper than a selected stage (ptxas: +10 instructions a pair, a local-memory frame).
    const uint32_t tokens_q0 = uniform_tokens(s2), tokens_q1 = uniform_tokens(has_q1 ? s3 : s2);
    Factors f0 = factors_of(s0, lane), f1 = factors_of(s1, lane);
    warpgroup_wait<0>();
    warpgroup_fence_regs<kNumAccum>(t0.v[0]);
    warpgroup_fence_regs<kNumAccum>(t1.v[0]);
    finish(acc, t0, p0, wp0, f0, s0, state.stage_idx, params, work, kb, ring, lane, lane_idx);
    if (has_p1)
      finish(acc, t1, p1, wp1, f1, s1, st1.stage_idx, params, work, kb + 1, ring, lane, lane_idx);
    if (has_q0) {
      issue(q0, t0, tokens_q0);
      issue(q1, t1, tokens_q1);
    }
    state = has_p1 ? st2 : st1;  // a tile's odd last k-block consumed one stage
    kb += 2;
    return has_q0;
  }

  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static void run_tile_pairs(Accum& acc, Accum& tmp, const Params& params,
                                                  const Work& work, uint32_t k_first,
                                                  uint32_t k_end,
                                                  const Ring& ring, typename Ring::State& state,
                                                  uint8_t* smem, uint32_t math_wg,
                                                  uint32_t lane_idx, const Lane& lane) {
    uint32_t a0[16], a1[16], a2[16], a3[16];
    uint3 w0, w1, w2, w3;
    Accum t1;
    const uint32_t smem_base = smem_u32(smem);
    ring.consumer_wait(state);
    typename Ring::State st1 = state; st1.advance();
    const Slabs s0 = slabs_of<Stages>(smem_base, state.stage_idx);
    const Slabs s1 = slabs_of<Stages>(smem_base, st1.stage_idx);
    w0 = convert(s0, lane, a0);
    const bool has1 = __any_sync(0xFFFFFFFFu, k_end - k_first > 1);
    w1 = convert_or_zero(has1, ring, st1, s1, lane, a1);
    wait_issue_turn(math_wg);
    issue(a0, tmp, uniform_tokens(s0));
    issue(a1, t1, uniform_tokens(has1 ? s1 : s0));
    pass_issue_turn(math_wg);
    uint32_t kb = k_first;
#pragma unroll 1
    while (pair_step<Stages>(acc, tmp, t1, a0, a1, w0, w1, a2, a3, w2, w3, params, work, kb,
                             k_end, ring, state, smem_base, lane, lane_idx) &&
           pair_step<Stages>(acc, tmp, t1, a2, a3, w2, w3, a0, a1, w0, w1, params, work, kb,
                             k_end, ring, state, smem_base, lane, lane_idx)) {
    }
  }

  // scratch: kScratchBytes of shared memory for the tables (the kernel's epilogue region).
  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static void run_tile(Accum& acc, Accum& tmp, const Params& params,
                                                  const Work& work, uint32_t num_k_blocks,
                                                  const Ring& ring, typename Ring::State& state,
                                                  uint8_t* smem, uint8_t* scratch,
                                                  uint32_t math_wg, uint32_t lane_idx) {
    const Lane lane = make_lane(math_wg, smem_u32(scratch));
    // The loops count k-blocks from the tile's first (a split tile's part starts inside K), so
    // the exact passes read their scale bytes at kb.
    const uint32_t k_first = first_k_block(work, (params.k + 127) / 128);
    if constexpr (kPairedKBlocks) {
      run_tile_pairs<Stages>(acc, tmp, params, work, k_first, k_first + num_k_blocks, ring,
                             state, smem, math_wg, lane_idx, lane);
    } else {
      run_tile_steps<Stages>(acc, tmp, params, work, k_first, k_first + num_k_blocks, ring,
                             state, smem, math_wg, lane_idx, lane);
    }
  }

  // Every k-block of one tile, two at a time (the register sets alternate).
  template <typename Stages, typename Ring, typename Params, typename Work>
  __device__ __forceinline__ static void run_tile_steps(Accum& acc, Accum& tmp,
                                                        const Params& params, const Work& work,
                                                        uint32_t k_first, uint32_t k_end,
                                                        const Ring& ring,
                                                        typename Ring::State& state,
                                                        uint8_t* smem, uint32_t math_wg,
                                                        uint32_t lane_idx, const Lane& lane) {
    uint32_t a0[16], a1[16];
    uint3 ow0, ow1;
    Accum tmp1;
    Accum& t1 = kTwoTemporaries ? tmp1 : tmp;
    const uint32_t smem_base = smem_u32(smem);
    ring.consumer_wait(state);
    const Slabs first = slabs_of<Stages>(smem_base, state.stage_idx);
    ow0 = convert(first, lane, a0);
    wait_issue_turn(math_wg);
    issue(a0, tmp, uniform_tokens(first));
    pass_issue_turn(math_wg);
    uint32_t kb = k_first;
#pragma unroll 1
    while (step<Stages>(acc, tmp, t1, a0, ow0, a1, ow1, params, work, kb, k_end, ring, state,
                        smem_base, lane, lane_idx) &&
           step<Stages>(acc, t1, tmp, a1, ow1, a0, ow0, params, work, kb, k_end, ring, state,
                        smem_base, lane, lane_idx)) {
    }
  }
};

}  // namespace moegemm::sm90
