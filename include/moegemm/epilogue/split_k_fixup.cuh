// The FP32 partial sums of a tile split along K (scheduler/tail_split_scheduler.cuh), exchanged
// through a workspace in global memory with no part waiting for another, so no CTA ever waits
// on one that is not resident: every part stores its sums to its slot and counts itself in on
// the tile's ticket, and the part that counts last adds every slot in part order (its own read
// back: the same floats), so the sum does not depend on which part finished last. A math
// warpgroup's share of a part is its kNumAccum accumulators a thread; slot `index` (a part's
// slot times the warpgroups, plus the warpgroup) holds them as [kNumAccum / 4][128 threads][4]
// floats, so each float4 store and load of a warpgroup is one coalesced 2 KiB line; the
// warpgroup's ticket (zero at the launch) counts the parts that stored theirs.
//   finish_part  every thread stores (st.cg: to L2, where the other SMs read), the warpgroup
//                meets, one thread adds 1 to the ticket, acquire-release at GPU scope (the
//                release publishes the stores the barrier ordered before it, the acquire of the
//                last one every other part's), and a barrier reduction tells each thread
//                whether its part counted last.
//   add_parts    the last part's threads set their accumulators to the slots' sum in part
//                order (ld.cg).
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

  // Whether this part counted last on its tile (the same in every thread of the warpgroup).
  __device__ __forceinline__ static bool finish_part(float* workspace, uint32_t* tickets,
                                                     uint32_t index, uint32_t ticket,
                                                     uint32_t parts, const float* acc,
                                                     uint32_t barrier_id) {
    const uint32_t t = threadIdx.x % 128;
    float4* slot = reinterpret_cast<float4*>(workspace + uint64_t{index} * kSlotFloats) + t;
#pragma unroll
    for (uint32_t i = 0; i < kNumAccum / 4; ++i)
      __stcg(slot + 128 * i, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    named_barrier_sync(barrier_id, 128);
    const bool last = t == 0 && atom_add_acq_rel_gpu(tickets + ticket, 1u) == parts - 1;
    return named_barrier_or(barrier_id, 128, last);
  }

  // acc = the slots first, first + stride, ... (count of them) added in that order.
  __device__ __forceinline__ static void add_parts(const float* workspace, uint32_t first,
                                                   uint32_t stride, uint32_t count, float* acc) {
    const uint32_t t = threadIdx.x % 128;
    auto slot = [&](uint32_t p) {
      return reinterpret_cast<const float4*>(workspace +
                                             uint64_t{first + p * stride} * kSlotFloats) +
             t;
    };
#pragma unroll
    for (uint32_t i = 0; i < kNumAccum / 4; ++i) {
      const float4 v = __ldcg(slot(0) + 128 * i);
      acc[4 * i] = v.x;
      acc[4 * i + 1] = v.y;
      acc[4 * i + 2] = v.z;
      acc[4 * i + 3] = v.w;
    }
    for (uint32_t p = 1; p < count; ++p) {
#pragma unroll
      for (uint32_t i = 0; i < kNumAccum / 4; ++i) {
        const float4 v = __ldcg(slot(p) + 128 * i);
        acc[4 * i] += v.x;
        acc[4 * i + 1] += v.y;
        acc[4 * i + 2] += v.z;
        acc[4 * i + 3] += v.w;
      }
    }
  }
};

}  // namespace moegemm::sm90
