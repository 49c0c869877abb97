// The one place that picks a Hopper wgmma atom: by A and B operand type, N and the operands'
// majors (both from shared memory, FP32 accumulators). A kernel names the atom it needs,
// `Wgmma<AType, BType, N, kMajorA, kMajorB>`, and issues it on an accumulator array with
// `::fma(desc_a, desc_b, acc)`. BF16 (HGMMA, k16) and E4M3 (QGMMA, k32, both K-major) atoms.
#pragma once

#include <moegemm/ptx/sm90_wgmma.cuh>  // first: it enables CuTe's extended shapes on request

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <stdint.h>
#include <utility>

namespace moegemm::sm90 {

enum class Major { K, MN };

// Every N a wgmma atom comes in, as an X-macro list (X(N) for each): the standard ones, and
// with CuTe's extended shapes (ptx/sm90_wgmma.cuh enables them on request) the other multiples
// of 8. The atom tables below and mma/sm90_fp4_register_mma.cuh's RS atoms expand it.
#define MOEGEMM_WGMMA_NS_STANDARD(X) X(8) X(16) X(32) X(64) X(96) X(128) X(192) X(256)
#if defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
#define MOEGEMM_WGMMA_NS_EXTENDED(X)                                                       \
  X(24) X(40) X(48) X(56) X(72) X(80) X(88) X(104) X(112) X(120) X(136) X(144) X(152) X(160) \
  X(168) X(176) X(184) X(200) X(208) X(216) X(224) X(232) X(240) X(248)
#else
#define MOEGEMM_WGMMA_NS_EXTENDED(X)
#endif
#define MOEGEMM_WGMMA_FOR_EACH_N(X) MOEGEMM_WGMMA_NS_STANDARD(X) MOEGEMM_WGMMA_NS_EXTENDED(X)

namespace detail {

constexpr cute::SM90::GMMA::Major gmma_major(Major major) {
  return major == Major::K ? cute::SM90::GMMA::Major::K : cute::SM90::GMMA::Major::MN;
}

// CuTe's atom for m64 x N x 16 with BF16 operands: the class template of the N.
template <int N, cute::SM90::GMMA::Major kA, cute::SM90::GMMA::Major kB>
struct Bf16Atom;

#define MOEGEMM_WGMMA_BF16_ATOM(N)                                         \
  template <cute::SM90::GMMA::Major kA, cute::SM90::GMMA::Major kB>        \
  struct Bf16Atom<N, kA, kB> {                                             \
    using Type = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_SS<kA, kB>; \
  };
MOEGEMM_WGMMA_FOR_EACH_N(MOEGEMM_WGMMA_BF16_ATOM)
#undef MOEGEMM_WGMMA_BF16_ATOM

// CuTe's atom for m64 x N x 32 with E4M3 operands (K-major only, as FP8 wgmma requires).
template <int N>
struct Fp8Atom;

#define MOEGEMM_WGMMA_FP8_ATOM(N) \
  template <>                     \
  struct Fp8Atom<N> {             \
    using Type = cute::SM90::GMMA::MMA_64x##N##x32_F32E4M3E4M3_SS_TN<>; \
  };
MOEGEMM_WGMMA_FOR_EACH_N(MOEGEMM_WGMMA_FP8_ATOM)
#undef MOEGEMM_WGMMA_FP8_ATOM

template <typename AType, typename BType, int N, Major kMajorA, Major kMajorB>
struct AtomFor {
  static_assert(sizeof(AType) == 0, "no wgmma atom for these operand types");
};
template <int N, Major kMajorA, Major kMajorB>
struct AtomFor<__nv_bfloat16, __nv_bfloat16, N, kMajorA, kMajorB> {
  using Type = typename Bf16Atom<N, gmma_major(kMajorA), gmma_major(kMajorB)>::Type;
};

template <int N>
struct AtomFor<__nv_fp8_e4m3, __nv_fp8_e4m3, N, Major::K, Major::K> {
  using Type = typename Fp8Atom<N>::Type;
};

}  // namespace detail

// One wgmma m64 x N x (16 BF16 or 32 E4M3) over a warpgroup's accumulators (N / 2 FP32 registers a thread),
// adding to them (scale-out one).
template <typename AType, typename BType, int N, Major kMajorA = Major::K,
          Major kMajorB = Major::K>
struct Wgmma {
  using Atom = typename detail::AtomFor<AType, BType, N, kMajorA, kMajorB>::Type;
  static constexpr uint32_t kNumAccum = N / 2;

  __device__ __forceinline__ static void fma(uint64_t desc_a, uint64_t desc_b, float* acc) {
    fma_impl(desc_a, desc_b, acc, cute::SM90::GMMA::ScaleOut::One,
             std::make_index_sequence<kNumAccum>{});
  }
  // The first of a batch that overwrites the accumulators (scale-out zero): no clearing pass.
  __device__ __forceinline__ static void fma_overwrite(uint64_t desc_a, uint64_t desc_b,
                                                       float* acc) {
    fma_impl(desc_a, desc_b, acc, cute::SM90::GMMA::ScaleOut::Zero,
             std::make_index_sequence<kNumAccum>{});
  }

 private:
  // The atom takes each accumulator register by reference.
  template <size_t... I>
  __device__ __forceinline__ static void fma_impl(uint64_t desc_a, uint64_t desc_b, float* acc,
                                                  cute::SM90::GMMA::ScaleOut scale_out,
                                                  std::index_sequence<I...>) {
    Atom::fma(desc_a, desc_b, acc[I]..., scale_out);
  }
};

}  // namespace moegemm::sm90
