// tcgen05 (SM100 tensor cores and tensor memory), as inline PTX of our own rather than CuTe's
// arch wrappers: CuTe compiles those to a trap when the target lacks the `a`/`f` feature set,
// while an instruction written here makes ptxas fail loudly on such a target.
//   tensor memory:  alloc (one warp writes the base address to shared memory), relinquish,
//                   dealloc; 512 columns x 128 lanes of 32 bits per SM.
//   MMA:            tcgen05.mma kind::f16, both operands in shared memory (descriptors),
//                   FP32 accumulator in tensor memory; commit arrives once on an mbarrier when
//                   every MMA this thread issued before it has completed.
//   loads:          tcgen05.ld 32x32b (lane i of the warp reads TMEM lane base + i, consecutive
//                   columns in consecutive registers) and its wait.
//   fences:         before/after_thread_sync order tcgen05 operations around thread syncs
//                   (mbarrier waits, bar.sync).
// Compiled and statically checked for sm_100f, not run on hardware.
#pragma once

#include <stdint.h>

namespace moegemm::sm100 {

// Writes the allocated base address to `dst_smem` (a shared-memory address). Whole warp.
// Spins while the columns are not free (e.g. a previous kernel's CTA still holds them).
template <uint32_t kNumCols>
__device__ __forceinline__ void tmem_alloc(uint32_t dst_smem) {
  static_assert(kNumCols >= 32 && kNumCols <= 512 && (kNumCols & (kNumCols - 1)) == 0,
                "tensor memory is allocated in powers of two from 32 to 512 columns");
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(dst_smem),
               "r"(kNumCols)
               : "memory");
}

// Gives up this CTA's right to allocate more, so a CTA of the next kernel on this SM can
// allocate as soon as we deallocate. Whole warp, after tmem_alloc.
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}

template <uint32_t kNumCols>
__device__ __forceinline__ void tmem_dealloc(uint32_t tmem_addr) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(tmem_addr),
               "r"(kNumCols)
               : "memory");
}

// D (tensor memory) = A * B (+ D when accumulate): one MMA of the shape in `idesc`.
__device__ __forceinline__ void umma_f16_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc,
                                            uint32_t idesc, uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
}

// One arrive on the mbarrier at `bar_smem` once all MMAs this thread issued have completed
// (their shared-memory reads included, so a stage may be refilled after it).
__device__ __forceinline__ void umma_commit(uint32_t bar_smem) {
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(
          bar_smem)
      : "memory");
}

__device__ __forceinline__ void tcgen05_fence_before_thread_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after_thread_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// 16 consecutive FP32 columns of the warp's 32 lanes: lane i gets TMEM lane (addr >> 16) + i.
// The registers are valid only after tmem_load_wait.
__device__ __forceinline__ void tmem_load_32x32b_x16(uint32_t tmem_addr, uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, [%16];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]),
        "=r"(r[7]), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]),
        "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
      : "r"(tmem_addr)
      : "memory");
}

__device__ __forceinline__ void tmem_load_wait() {
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}

// True in exactly one lane of the (fully active) warp.
__device__ __forceinline__ bool elect_one() {
  uint32_t pred = 0;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "elect.sync _|p, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(pred));
  return pred != 0;
}

}  // namespace moegemm::sm100
