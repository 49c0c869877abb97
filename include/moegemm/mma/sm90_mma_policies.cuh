// MMA policies of the math warpgroups: which wgmma a warpgroup issues on a landed stage, over
// which slabs, into which accumulators. A policy provides
//   Accum                    a warpgroup thread's accumulators (FP32 registers),
//   zero(acc), fence(acc)    clear them / pin them across a wgmma batch,
//   operands(stage, wg)      where warpgroup wg's operands of a landed stage start (computed
//                            before the batch's fences, so the loop stays as compact as when it
//                            was written by hand),
//   issue(acc, operands)     every wgmma of one k-block (no arrive/commit: the skeleton's),
//   after_k_block(acc, kb)   the per-k-block hook, after the batch before the previous one has
//                            retired: nothing for BF16 (the FP8 x FP4 family promotes its
//                            partial sums per 128 of K in its own policy,
//                            mma/sm90_fp8_promote_mma.cuh).
// Operand types pick the atom in mma/sm90_wgmma.cuh.
#pragma once

#include <stdint.h>

#include <moegemm/mma/sm90_wgmma.cuh>
#include <moegemm/pipeline/stage_layout.cuh>

namespace moegemm::sm90 {

// Accumulators of kAtomsM wgmma m64 x N blocks.
template <uint32_t kAtomsM, uint32_t N>
struct WgmmaAccum {
  float v[kAtomsM][N / 2];
};

template <uint32_t kAtomsM, uint32_t N>
__device__ __forceinline__ void zero_accum(WgmmaAccum<kAtomsM, N>& acc) {
#pragma unroll
  for (uint32_t a = 0; a < kAtomsM; ++a)
#pragma unroll
    for (uint32_t i = 0; i < N / 2; ++i) acc.v[a][i] = 0.0f;
}

template <uint32_t kAtomsM, uint32_t N>
__device__ __forceinline__ void fence_accum(WgmmaAccum<kAtomsM, N>& acc) {
#pragma unroll
  for (uint32_t a = 0; a < kAtomsM; ++a) warpgroup_fence_regs<N / 2>(acc.v[a]);
}

// Both operands K-major (slab 0 = A rows, slab 1 = B rows, 128-byte rows): each math
// warpgroup owns kWgRows = 64 kAtomsM rows of A, at 64 * 128-byte rows per atom, and all of B.
template <typename T, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kAtomsM>
struct KMajorMma {
  using Atom = Wgmma<T, T, BLOCK_N, Major::K, Major::K>;
  using Accum = WgmmaAccum<kAtomsM, BLOCK_N>;
  static constexpr uint32_t kWgRows = 64 * kAtomsM;
  static constexpr uint32_t kKStepBytes = 16 * sizeof(T);

  __device__ __forceinline__ static void zero(Accum& acc) { zero_accum(acc); }
  __device__ __forceinline__ static void fence(Accum& acc) { fence_accum(acc); }

  struct Operands {
    const uint8_t* a;  // the warpgroup's first A row
    uint64_t desc_b;
  };

  template <typename Stages>
  __device__ __forceinline__ static Operands operands(const StageRef& stage, uint32_t math_wg) {
    return {Stages::template slab<0>(stage) + math_wg * kWgRows * 128,
            make_smem_desc_k128b(Stages::template slab<1>(stage))};
  }

  __device__ __forceinline__ static void issue(Accum& acc, const Operands& ops) {
#pragma unroll
    for (uint32_t kk = 0; kk < BLOCK_K / 16; ++kk) {
#pragma unroll
      for (uint32_t a = 0; a < kAtomsM; ++a) {
        const uint64_t desc_a = make_smem_desc_k128b(ops.a + a * 64 * 128);
        Atom::fma(advance_desc(desc_a, kk * kKStepBytes),
                  advance_desc(ops.desc_b, kk * kKStepBytes), acc.v[a]);
      }
    }
  }

  __device__ __forceinline__ static void after_k_block(Accum&, uint32_t) {}
};

// Swap-AB: slab 1 (B, the weights) is the wgmma's A operand, 64 weight rows per warpgroup,
// and slab 0 (A, BLOCK_M tokens) its B operand: wgmma m64 x BLOCK_M.
template <typename T, uint32_t BLOCK_M, uint32_t BLOCK_K>
struct SwapAbMma {
  using Atom = Wgmma<T, T, BLOCK_M, Major::K, Major::K>;
  using Accum = WgmmaAccum<1, BLOCK_M>;
  static constexpr uint32_t kKStepBytes = 16 * sizeof(T);

  __device__ __forceinline__ static void zero(Accum& acc) { zero_accum(acc); }
  __device__ __forceinline__ static void fence(Accum& acc) { fence_accum(acc); }

  struct Operands {
    uint64_t desc_w, desc_t;  // the warpgroup's 64 weight rows, the tokens
  };

  template <typename Stages>
  __device__ __forceinline__ static Operands operands(const StageRef& stage, uint32_t math_wg) {
    return {make_smem_desc_k128b(Stages::template slab<1>(stage) + math_wg * 64 * 128),
            make_smem_desc_k128b(Stages::template slab<0>(stage))};
  }

  __device__ __forceinline__ static void issue(Accum& acc, const Operands& ops) {
#pragma unroll
    for (uint32_t kk = 0; kk < BLOCK_K / 16; ++kk)
      Atom::fma(advance_desc(ops.desc_w, kk * kKStepBytes),
                advance_desc(ops.desc_t, kk * kKStepBytes), acc.v[0]);
  }

  __device__ __forceinline__ static void after_k_block(Accum&, uint32_t) {}
};

// Both operands MN-major in 64-wide chunks of kChunkBytes (k-grouped): each math warpgroup
// owns A's chunk math_wg (64 columns of M) and all of B; 16 k-rows of 128 bytes per step are
// two whole swizzle atoms, so the step moves the start address by 2048 bytes.
template <typename T, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kChunkBytes>
struct MnMajorMma {
  using Atom = Wgmma<T, T, BLOCK_N, Major::MN, Major::MN>;
  using Accum = WgmmaAccum<1, BLOCK_N>;

  __device__ __forceinline__ static void zero(Accum& acc) { zero_accum(acc); }
  __device__ __forceinline__ static void fence(Accum& acc) { fence_accum(acc); }

  struct Operands {
    const uint8_t* a;  // the warpgroup's chunk of A
    const uint8_t* b;
  };

  template <typename Stages>
  __device__ __forceinline__ static Operands operands(const StageRef& stage, uint32_t math_wg) {
    return {Stages::template slab<0>(stage) + math_wg * kChunkBytes,
            Stages::template slab<1>(stage)};
  }

  __device__ __forceinline__ static void issue(Accum& acc, const Operands& ops) {
#pragma unroll
    for (uint32_t kk = 0; kk < BLOCK_K / 16; ++kk) {
      const uint64_t desc_a = make_smem_desc_mn128b(ops.a + kk * 2048, kChunkBytes);
      const uint64_t desc_b = make_smem_desc_mn128b(ops.b + kk * 2048, kChunkBytes);
      Atom::fma(desc_a, desc_b, acc.v[0]);
    }
  }

  __device__ __forceinline__ static void after_k_block(Accum&, uint32_t) {}
};

}  // namespace moegemm::sm90
