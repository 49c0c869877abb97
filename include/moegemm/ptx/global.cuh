// Global-memory accesses issued by hand: the epilogues' predicated stores, and the flags and
// streamed loads of the convert-ahead kernel (pipeline/fp4_convert_ahead.cuh).
#pragma once

#include <stdint.h>

namespace moegemm {

// A predicated 4-byte global store: one instruction under a predicate, where a plain `if` costs
// a branch and its reconvergence around every store.
__device__ __forceinline__ void store_b32_if(void* ptr, uint32_t value, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p st.global.b32 [%0], %1;\n}\n" ::"l"(ptr),
      "r"(value), "r"(static_cast<uint32_t>(pred))
      : "memory");
}

// A flag another CTA publishes, read without ordering (relaxed, GPU scope): a
// fence_acquire_gpu after the reads that saw it up makes what the publisher wrote before its
// release visible to this thread.
__device__ __forceinline__ uint32_t ld_relaxed_gpu(const uint32_t* ptr) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}

__device__ __forceinline__ void fence_acquire_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Adds to a counter other CTAs acquire: a release at GPU scope (cumulative: it publishes what
// this thread has observed, e.g. its warp's stores before a __syncwarp).
__device__ __forceinline__ void red_release_gpu_add(uint32_t* ptr, uint32_t value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

// Adds to a counter and returns its old value, acquire-release at GPU scope: the release
// publishes what this thread has observed (cumulative, as red_release_gpu_add), the acquire
// makes what the earlier adders published visible to it.
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* ptr, uint32_t value) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(ptr), "r"(value)
               : "memory");
  return old;
}

// Brings a line into L2 ahead of its load.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// Orders this thread's generic-proxy global accesses with its async-proxy ones (TMA): a TMA
// load of bytes another CTA wrote with plain stores needs it after the flag's acquire, and the
// writer before its release.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

}  // namespace moegemm
