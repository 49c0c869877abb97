// The MMA policy of the FP8 x FP4 decode kernel on checkpoint-layout weights
// (impls/sm90_fp8_fp4_swap_ab_gemm.cuh; prepared weights take mma/sm90_fp4_table_mma.cuh): weights
// on the wgmma's M side as register A operands, expanded from the packed E2M1 codes of the TMA
// stage by each math thread itself (no transform warpgroup, no shared-memory round trip), the
// tokens' E4M3 rows the shared-memory B operand (N = BLOCK_T, 8..64).
//
// A fragment (wgmma m64 x N x 32, 8-bit A): thread t of the warpgroup holds weight rows
// r = 16 (t / 32) + (t % 32) / 4 and r + 8; register 0 (2) codes k = 4 (t % 4) + 0..3 (+ 16) of
// row r, register 1 (3) the same of row r + 8. Four codes are two bytes of the row's packed
// slab, nibble order = k order, so one table lookup (prmt on the 4 nibbles) gives one register.
// The thread reads the 32-bit word holding them (their signs in the same word,
// transform/fp4_to_fp8.cuh) and keeps half h = t % 2 of its conversion.
//
// Exactness: per weight row and k-block a base exponent (the row's largest scale byte not yet
// covered); 32-blocks within 14 below it are converted with table base - s, the rest wait for a
// further pass (a warpgroup-wide vote decides whether one follows). Each pass is promoted into
// the FP32 accumulators with 2^(base - 133) of its row times the token's activation scale,
// which is also the per-128-K promotion that bounds the FP8 accumulation. A NaN scale byte
// makes its block's bytes E4M3 NaNs in the first pass (its row's outputs NaN).
//
// Per k-block: the scale words and codes are read from the stage, each pass converts 16
// registers (4 k32 steps), issues 4 wgmma into a temporary set, waits, promotes. Several math
// warpgroups (64 weight rows each) share the SM: one converts while another's wgmma runs.
#pragma once

#include <cuda_fp8.h>

#include <stdint.h>

#include <utility>

#include <moegemm/loader/tma_loaders.cuh>
#include <moegemm/mma/sm90_mma_policies.cuh>
#include <moegemm/mma/sm90_wgmma.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/transform/fp4_to_fp8.cuh>

namespace moegemm::sm90 {

namespace detail {

template <int N>
struct Fp8RsAtom;
#define MOEGEMM_WGMMA_FP8_RS_ATOM(N) \
  template <>                        \
  struct Fp8RsAtom<N> {              \
    using Type = cute::SM90::GMMA::MMA_64x##N##x32_F32E4M3E4M3_RS_TN<>; \
  };
MOEGEMM_WGMMA_FOR_EACH_N(MOEGEMM_WGMMA_FP8_RS_ATOM)
#undef MOEGEMM_WGMMA_FP8_RS_ATOM

}  // namespace detail

// Whether `pred` holds in any thread of the calling warpgroup (barrier.red.or over its 128
// threads, on the warpgroup's own named barrier).
__device__ __forceinline__ bool warpgroup_any(bool pred, uint32_t barrier_id) {
  uint32_t result;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.u32 p, %1, 0;\n\t"
      "barrier.red.or.pred q, %2, 128, p;\n\t"
      "selp.u32 %0, 1, 0, q;\n\t}"
      : "=r"(result)
      : "r"(static_cast<uint32_t>(pred)), "r"(barrier_id)
      : "memory");
  return result != 0;
}

template <uint32_t BLOCK_T, uint32_t BLOCK_W>
struct Fp4RegisterMma {
  static constexpr bool kOwnsKBlock = true;  // k_block() below runs the whole k-block
  using Atom = typename detail::Fp8RsAtom<BLOCK_T>::Type;
  static constexpr uint32_t kNumAccum = BLOCK_T / 2;
  static constexpr uint32_t kWindow = fp4::kNumOffsets - 1;
  static constexpr uint32_t kAbsent = 0x100;
  static constexpr uint32_t kTableBytes = 128;  // 15 tables of 8 bytes

  struct Accum {
    float v[1][kNumAccum];  // the store_transposed layout, as WgmmaAccum<1, BLOCK_T>
  };

  __device__ __forceinline__ static void zero(Accum& acc) {
#pragma unroll
    for (uint32_t i = 0; i < kNumAccum; ++i) acc.v[0][i] = 0.0f;
  }

  // The conversion tables, by the warpgroup's first 15 threads (a named barrier follows).
  __device__ __forceinline__ static void init_tables(uint8_t* tables, uint32_t t) {
    if (t < fp4::kNumOffsets) {
      uint32_t lo, hi;
      fp4::table_words(t, lo, hi);
      reinterpret_cast<uint2*>(tables)[t] = make_uint2(lo, hi);
    }
  }

  template <size_t... I>
  __device__ __forceinline__ static void fma_impl(const uint32_t (&a)[4], uint64_t desc_b,
                                                  float* acc, bool overwrite,
                                                  std::index_sequence<I...>) {
    Atom::fma(a[0], a[1], a[2], a[3], desc_b, acc[I]...,
              overwrite ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One);
  }

  // One k-block of the warpgroup's 64 weight rows (slab 1: packed codes, 64-byte rows; slab 3:
  // two scale words a row; slab 0: the tokens' E4M3 rows; slab 2: their activation scales).
  template <typename Stages, typename Params, typename Work>
  __device__ __forceinline__ static void k_block(Accum& acc, Accum& tmp, const Params& params,
                                                 const Work& work, uint32_t kb,
                                                 const StageRef& stage, uint32_t math_wg,
                                                 const uint8_t* tables, uint32_t barrier_id) {
    const uint32_t t = threadIdx.x % 128;
    const uint32_t quad = t % 4, half = t % 2;
    const uint32_t row_in_wg = 16 * (t / 32) + (t % 32) / 4;  // and + 8
    const uint32_t row0 = math_wg * 64 + row_in_wg;             // in the tile
    const uint8_t* codes = Stages::template slab<1>(stage);
    const uint2* words = reinterpret_cast<const uint2*>(Stages::template slab<3>(stage));
    const float* sfa = reinterpret_cast<const float*>(Stages::template slab<2>(stage));
    const uint2* tab = reinterpret_cast<const uint2*>(tables);

    // Scale bytes of the thread's two rows, 4 blocks each (kAbsent past N or K).
    uint32_t s[2][4];
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      const uint32_t row = row0 + 8 * h;
      const uint32_t n = work.n_block * BLOCK_W + row;
      const uint32_t bytes = scale_word(params, work.group, n, kb, words[row]);
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) {
        const bool ok = n < params.n && kb * 4 + j < params.k / 32;
        s[h][j] = ok ? (bytes >> (8 * j)) & 0xFF : kAbsent;
      }
    }
    // The words holding this thread's codes: row h, k32 step j, low (0) or high (1) quad.
    uint32_t cw[2][4][2];
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h)
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
#pragma unroll
        for (uint32_t q = 0; q < 2; ++q)
          cw[h][j][q] = *reinterpret_cast<const uint32_t*>(
              codes + (row0 + 8 * h) * 64 + 16 * j + 8 * q + 4 * (quad / 2));
    // Per-row first base: the largest finite byte (0 = none).
    uint32_t base[2];
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      uint32_t hi = 0;
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
        if (s[h][j] < 0xFF) hi = max(hi, s[h][j] + 1);
      base[h] = hi;
    }
    // Token scales of this thread's columns 8 c + 2 quad + e.
    float col_scale[BLOCK_T / 4];
#pragma unroll
    for (uint32_t c = 0; c < BLOCK_T / 8; ++c) {
      col_scale[2 * c] = sfa[8 * c + 2 * quad];
      col_scale[2 * c + 1] = sfa[8 * c + 2 * quad + 1];
    }
    const uint64_t desc_t = make_smem_desc_k128b(Stages::template slab<0>(stage));

    bool first = true;
    for (;;) {
      // This pass's base of each row (0: none left), and whether a row has blocks below it.
      uint32_t b[2];
      bool more = false;
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h) {
        b[h] = base[h] == 0 ? 0xFFFFu : base[h] - 1;
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j)
          more |= base[h] != 0 && s[h][j] < 0xFF && s[h][j] + kWindow < b[h];
      }
      uint32_t a[4][4];
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) {
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
          const uint32_t sj = s[h][j];
          const bool in_window = sj <= b[h] && sj + kWindow >= b[h];
          const uint2 tw = tab[in_window ? b[h] - sj : 0];
          const uint32_t fill = (sj == 0xFF && first) ? fp4::kNanWord : 0u;
#pragma unroll
          for (uint32_t q = 0; q < 2; ++q) {
            const uint32_t v = fp4::convert_raw_half(cw[h][j][q], tw.x, tw.y, half);
            a[j][2 * q + h] = in_window ? v : fill;
          }
        }
      }
      warpgroup_fence_regs<kNumAccum>(tmp.v[0]);
      warpgroup_arrive();
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j)
        fma_impl(a[j], advance_desc(desc_t, 32 * j), tmp.v[0], j == 0,
                 std::make_index_sequence<kNumAccum>{});
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_regs<kNumAccum>(tmp.v[0]);
      // acc += tmp * 2^(base - 133) of the row * the token's scale.
      float row_scale[2];
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h)
        row_scale[h] = b[h] == 0xFFFFu ? 0.0f : ldexpf(1.0f, static_cast<int>(b[h]) - 133);
#pragma unroll
      for (uint32_t i = 0; i < kNumAccum; ++i)
        acc.v[0][i] = fmaf(tmp.v[0][i], row_scale[(i / 2) % 2] * col_scale[2 * (i / 4) + i % 2],
                           acc.v[0][i]);
      if (!warpgroup_any(more, barrier_id)) break;
      first = false;
      // The next base of each row: its largest byte below this pass's window.
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h) {
        uint32_t next = 0;
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j)
          if (s[h][j] < 0xFF && base[h] != 0 && s[h][j] + kWindow < b[h])
            next = max(next, s[h][j] + 1);
        base[h] = next;
      }
    }
  }
};

}  // namespace moegemm::sm90
