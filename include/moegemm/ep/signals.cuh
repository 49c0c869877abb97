// Cross-GPU signalling of the expert-parallel kernels: system-scope release stores and
// reductions into a peer's symmetric buffer, acquire loads of our own, and a bounded wait that
// records a timeout in EpState::status instead of hanging.
//
// Why system scope: the peers' writes arrive over NVLink, outside this GPU's gpu-scope order;
// release at .sys orders every earlier write of the CTA (published to thread 0 by the
// __syncthreads before it: release is cumulative) before the signal, and acquire at .sys makes
// them visible to the waiting thread, and through the __syncthreads after it to its CTA.
// No multimem and no multicast object: every access is a plain unicast load/store/red.
#pragma once

#include <stdint.h>

#include <moegemm/common/ep_params.h>

namespace moegemm::ep {

__device__ __forceinline__ void st_release_sys(uint64_t* ptr, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

__device__ __forceinline__ void red_release_sys_add(uint64_t* ptr, uint64_t value) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}

__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* ptr) {
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
  return value;
}

// Data a peer wrote into our buffer: read through L2 (where NVLink writes land), never L1.
__device__ __forceinline__ int32_t ld_peer_written(const int32_t* ptr) {
  int32_t value;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
  return value;
}

__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The address of `offset` in rank r's symmetric buffer.
template <typename T>
__device__ __forceinline__ T* peer_ptr(const uint64_t* peer_base, uint32_t r, uint64_t offset) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(peer_base[r] + offset));
}

// The first failure wins, except that a timeout replaces an overflow (it is the worse news).
__device__ __forceinline__ void record_status(EpState* state, uint32_t code, uint32_t phase,
                                              uint32_t rank) {
  const uint32_t word = (code << 24) | (phase << 16) | (rank & 0xffffu);
  uint32_t seen = atomicCAS(&state->status, 0u, word);
  while (seen != 0u && code == kEpStatusTimeout && (seen >> 24) != kEpStatusTimeout) {
    const uint32_t prior = atomicCAS(&state->status, seen, word);
    if (prior == seen) break;
    seen = prior;
  }
}

// Whether a wait has timed out on this rank (an overflow is not a reason to stop waiting).
__device__ __forceinline__ bool timed_out(const EpState* state) {
  return (*reinterpret_cast<const volatile uint32_t*>(&state->status) >> 24) == kEpStatusTimeout;
}

// One thread: wait until signals[r] >= target for every r < world_size (our own buffer), at
// most timeout_ns. On a timeout, or when a wait on this rank has already timed out, records
// (first failure wins) and returns false: the kernel then finishes with wrong rows instead of
// hanging, and the host's check() names the rank that never arrived.
__device__ __forceinline__ bool wait_all(const uint64_t* signals, uint32_t world_size,
                                         uint64_t target, EpState* state, uint32_t phase,
                                         uint64_t timeout_ns) {
  const uint64_t start = global_timer_ns();
  for (uint32_t r = 0; r < world_size; ++r) {
    uint32_t spins = 0;
    while (ld_acquire_sys(signals + r) < target) {
      if ((++spins & 255u) == 0u) {
        if (timed_out(state)) return false;
        if (global_timer_ns() - start > timeout_ns) {
          record_status(state, kEpStatusTimeout, phase, r);
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace moegemm::ep
