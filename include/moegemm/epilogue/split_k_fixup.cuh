// The FP32 partial sums of a tile split along K (scheduler/tail_split_scheduler.cuh), exchanged
// through a workspace in global memory. A math warpgroup's share of a part is its kNumAccum
// accumulators a thread; slot `index` (a part's workspace slot times the warpgroups, plus the
// warpgroup) holds them as [kNumAccum / 4][128 threads][4] floats, so each float4 store and load
// of a warpgroup is one coalesced 2 KiB line, and the flag `flags[index]` (zero at the launch)
// says the slot is written.
//   store_partial  every thread stores and fences, the warpgroup meets (its own named barrier),
//                  one thread raises the flag with a release: what the 128 threads wrote comes
//                  before it.
//   add_partials   one thread waits for each flag with acquire loads, the warpgroup meets, every
//                  thread adds the slots in part order (L2 loads: the slots were written on
//                  other SMs), so the sum does not depend on which part finished first.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/global.cuh>

namespace moegemm::sm90 {

template <uint32_t kNumAccum>
struct SplitKFixup {
  static_assert(kNumAccum % 4 == 0, "whole float4 of accumulators");
  static constexpr uint32_t kSlotFloats = 128 * kNumAccum;  // a warpgroup's share of a part

  __device__ __forceinline__ static void store_partial(float* workspace, uint32_t* flags,
                                                       uint32_t index, const float* acc,
                                                       uint32_t barrier_id) {
    const uint32_t t = threadIdx.x % 128;
    float4* slot = reinterpret_cast<float4*>(workspace + uint64_t{index} * kSlotFloats) + t;
#pragma unroll
    for (uint32_t i = 0; i < kNumAccum / 4; ++i)
      __stcg(slot + 128 * i, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    __threadfence();
    named_barrier_sync(barrier_id, 128);
    if (t == 0) red_release_gpu_add(flags + index, 1u);
  }

  // acc += the slots first, first + stride, ... (count of them), in that order.
  __device__ __forceinline__ static void add_partials(const float* workspace,
                                                      const uint32_t* flags, uint32_t first,
                                                      uint32_t stride, uint32_t count, float* acc,
                                                      uint32_t barrier_id) {
    const uint32_t t = threadIdx.x % 128;
    if (t == 0) {
      for (uint32_t p = 0; p < count; ++p) {
        while (ld_relaxed_gpu(flags + first + p * stride) == 0) __nanosleep(32);
      }
      fence_acquire_gpu();
    }
    named_barrier_sync(barrier_id, 128);
    for (uint32_t p = 0; p < count; ++p) {
      const float4* slot =
          reinterpret_cast<const float4*>(workspace + uint64_t{first + p * stride} * kSlotFloats) +
          t;
#pragma unroll
      for (uint32_t i = 0; i < kNumAccum / 4; ++i) {
        const float4 v = __ldcg(slot + 128 * i);
        acc[4 * i] += v.x;
        acc[4 * i + 1] += v.y;
        acc[4 * i + 2] += v.z;
        acc[4 * i + 3] += v.w;
      }
    }
  }
};

}  // namespace moegemm::sm90
