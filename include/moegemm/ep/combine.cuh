// Expert-parallel combine: every rank pushes its experts' output rows (GEMM2's, routing weight
// already applied in its epilogue) straight into the source rank's slot, then sums each of its
// own tokens' top_k rows in FP32 in choice order (python/moegemm/ep/).
//
// Roles. R ranks run this kernel on the same grid. Owner side: CTAs walk the received rows
// (local expert, row < masked_m) grid-stride and copy row y[le][row] to
// combine_recv[slot] of rank src (recv_src = src * slots_per_rank + slot, written by the
// dispatch). Source side: each token t's out[t] = sum over j of combine_recv[t * top_k + j]
// for the choices whose slot_dest >= 0, j increasing, FP32, rounded to BF16 once: the fused
// layer's combine order (moe/choice_sum.cuh, shared with moe/combine.cuh), so the result equals
// fused_moe's when the GEMM rows are equal.
// Signals: combine_arrive[d] (symmetric): every CTA of rank d, after its pushes, red.release.sys
// adds 1 on every rank. Arrive count: gridDim.x per rank per forward; every CTA of rank s waits
// (thread 0, acquire, bounded) for combine_arrive[d] >= epoch * gridDim.x for every d before
// summing. epoch = EpState::epoch, published by this forward's dispatch.
// Residency: every CTA waits for every other CTA's arrival, so the host keeps the grid at or
// below the SM count (all CTAs resident once earlier kernels drain).
// A wait past timeout_ns records kEpStatusTimeout (phase combine, the missing rank) and the
// CTA sums what is there instead of hanging. No host synchronization: graph-capturable.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/common/ep_params.h>
#include <moegemm/ep/signals.cuh>
#include <moegemm/moe/choice_sum.cuh>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::ep {

template <uint32_t kThreads>
__device__ __forceinline__ void combine(const EpCombineParams& p) {
  const uint32_t tid = threadIdx.x, R = p.world_size;
  const uint32_t vectors = p.hidden / 8;
  const uint64_t epoch = p.state->epoch;
  // 1. Owner side: push each received row back to its source's slot.
  const uint4* y = static_cast<const uint4*>(p.y);
  const int32_t* recv_src = peer_ptr<int32_t>(p.peer_base, p.rank, p.layout.recv_src);
  // The used rows of all local experts, numbered consecutively, dealt round-robin to CTAs.
  uint32_t base = 0;
  for (uint32_t le = 0; le < p.experts_per_rank; ++le) {
    const uint32_t used = min(static_cast<uint32_t>(max(p.masked_m[le], 0)), p.max_m);
    const uint32_t start = (blockIdx.x + gridDim.x - base % gridDim.x) % gridDim.x;
    for (uint32_t row = start; row < used; row += gridDim.x) {
      const uint32_t index = le * p.max_m + row;
      const int32_t src = ld_peer_written(recv_src + index);
      const uint32_t src_rank = static_cast<uint32_t>(src) / p.slots_per_rank;
      const uint32_t slot = static_cast<uint32_t>(src) % p.slots_per_rank;
      // Only after a failure can a source be stale or torn; never write outside the buffers.
      if (src < 0 || src_rank >= R) continue;
      uint4* dst = peer_ptr<uint4>(p.peer_base, src_rank, p.layout.combine_recv);
      for (uint32_t v = tid; v < vectors; v += kThreads) {
        dst[static_cast<uint64_t>(slot) * vectors + v] =
            y[static_cast<uint64_t>(index) * vectors + v];
      }
    }
    base += used;
  }
  __syncthreads();
  if (tid == 0) {
    fence_sys();
    for (uint32_t r = 0; r < R; ++r) {
      red_release_sys_add(peer_ptr<uint64_t>(p.peer_base, r, p.layout.combine_arrive) + p.rank, 1);
    }
    const uint64_t* arrive = peer_ptr<uint64_t>(p.peer_base, p.rank, p.layout.combine_arrive);
    // On a timeout the sum reads whatever arrived; the status word says so.
    wait_all(arrive, R, epoch * gridDim.x, p.state, kEpPhaseCombine, p.timeout_ns);
  }
  __syncthreads();
  // 2. Source side: each token's rows in choice order, FP32, one BF16 rounding
  //    (moe/choice_sum.cuh: the fused layer's combine order).
  const uint4* recv = peer_ptr<const uint4>(p.peer_base, p.rank, p.layout.combine_recv);
  moe::sum_choices<kThreads>(p, vectors, [&](uint32_t slot, uint32_t v, uint4& packed) {
    if (p.slot_dest[slot] < 0) return false;
    packed = __ldcg(recv + static_cast<uint64_t>(slot) * vectors + v);
    return true;
  });
}

template <uint32_t kThreads>
__global__ void __launch_bounds__(kThreads) ep_combine_kernel(
    const __grid_constant__ EpCombineParams params) {
  // Under PDL the previous kernel (GEMM2) may still run: its rows are visible after the wait.
  pdl_wait();
  combine<kThreads>(params);
}

}  // namespace moegemm::ep
