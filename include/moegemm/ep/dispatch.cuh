// Expert-parallel dispatch: every rank pushes its (token, choice) rows over NVLink into the
// owner's per-expert masked layout x_recv [E_local, max_m, H] (python/moegemm/ep/).
//
// Roles. R ranks run this kernel on the same grid (the host binds it from max_tokens_per_rank,
// never from this call's T, so every rank's grid is equal). CTA c of rank s owns slots
// [c * slots_per_cta, ...) of rank s's T * top_k slots. Expert e lives on rank e / E_local as
// local expert e % E_local.
// Signals (all in the symmetric buffer, EpLayout; values are epochs, so nothing is reset):
//   counts[s][E], count_flag[s]: CTA 0 of rank s writes its per-expert slot counts into every
//     rank's counts row s, then st.release.sys count_flag[s] = epoch on every rank;
//   dispatch_arrive[s]: every CTA of rank s, after its rows, red.release.sys adds 1 on every
//     rank (rows or not): rank d has all of s's rows once dispatch_arrive[s] >= epoch * grid.
// Arrive counts: count_flag: 1 store per source rank per forward; dispatch_arrive: gridDim.x
// adds per source rank per forward.
// Steps, per CTA:
//   1. histograms of all slots' experts and of the slots before this range (as the fused
//      layer's route kernel: integer sums, no order dependence);
//   2. CTA 0 publishes the counts (above);
//   3. thread 0 waits (acquire, bounded) for every rank's count_flag; then row of a slot =
//      sum over ranks s' < s of counts[s'][e] (ranks in order) + this rank's slots of e before
//      it, so an expert's rows are (source rank, slot) ordered, deterministic; CTA 0 writes
//      masked_m = min(total, max_m) (an overflow is recorded, its rows dropped; 0 after a
//      timeout, so the combine pushes nothing from counts it never received);
//   4. pushes each kept slot's row to its owner: BF16 16-byte vectors, or with kFp8 quantized
//      per 128 columns (moe/fp8_rows.cuh, per_token_cast_to_fp8's bits; power-of-two scales
//      with kUe8m0, as the SM100 FP8 x FP4 kernel reads them) with its scales, plus
//      the routing weight (GEMM2's row scale) and the source (rank, slot) for the combine;
//   5. arrives (above); the last CTA waits for every rank's arrivals, then publishes the epoch
//      in EpState (every CTA of this rank read it before arriving).
// A wait past timeout_ns records kEpStatusTimeout with the phase and the missing rank and
// gives up (no hang); once a wait on this rank has timed out, later waits give up at once.
// Shared memory: counts [E], bases [E], warp counts [kThreads / 32][E], the range's rows
// [slots_per_cta], int32. No host synchronization: graph-capturable.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <moegemm/common/ep_params.h>
#include <moegemm/ep/signals.cuh>
#include <moegemm/moe/fp8_rows.cuh>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::ep {

template <uint32_t kThreads, bool kFp8, bool kUe8m0>
__device__ __forceinline__ void dispatch(const EpDispatchParams& p) {
  constexpr uint32_t kWarps = kThreads / 32;
  extern __shared__ __align__(16) int32_t smem[];
  const uint32_t E = p.num_experts, R = p.world_size;
  int32_t* counts = smem;
  int32_t* bases = counts + E;
  int32_t* warp_counts = bases + E;
  int32_t* range_rows = warp_counts + kWarps * E;
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const uint32_t num_slots = p.num_tokens * p.top_k;
  const uint32_t first = min(blockIdx.x * p.slots_per_cta, num_slots);
  const uint32_t last = min(first + p.slots_per_cta, num_slots);
  const uint64_t epoch = p.state->epoch + 1;  // published by this kernel's last CTA only

  for (uint32_t i = tid; i < E; i += kThreads) counts[i] = bases[i] = 0;
  for (uint32_t i = tid; i < kWarps * E; i += kThreads) warp_counts[i] = 0;
  __syncthreads();
  // 1. Histograms: one shared atomic per expert a warp sees.
  for (uint32_t base = 0; base < num_slots; base += kThreads) {
    const uint32_t s = base + tid;
    const int32_t e = s < num_slots ? p.topk_ids[s] : -1;
    const bool keep = s < num_slots && e >= 0 && static_cast<uint32_t>(e) < E;
    const uint32_t peers = __match_any_sync(0xffffffffu, keep ? static_cast<uint32_t>(e)
                                                              : 0xffffffffu);
    const uint32_t earlier = peers & __ballot_sync(0xffffffffu, s < first);
    if (keep && lane == __ffs(peers) - 1) atomicAdd(&counts[e], __popc(peers));
    if (keep && s < first && lane == __ffs(earlier) - 1) atomicAdd(&bases[e], __popc(earlier));
  }
  __syncthreads();
  // 2. CTA 0 publishes this rank's counts on every rank, then the flag (release, system).
  if (blockIdx.x == 0) {
    for (uint32_t i = tid; i < R * E; i += kThreads) {
      const uint32_t r = i / E, e = i % E;
      peer_ptr<int32_t>(p.peer_base, r, p.layout.counts)[p.rank * E + e] = counts[e];
    }
    __syncthreads();
    if (tid == 0) {
      fence_sys();
      for (uint32_t r = 0; r < R; ++r) {
        st_release_sys(peer_ptr<uint64_t>(p.peer_base, r, p.layout.count_flag) + p.rank, epoch);
      }
    }
  }
  // 3. Every rank's counts: this rank's rows of expert e start after the earlier ranks'.
  __shared__ bool counts_ok;
  if (tid == 0) {
    const uint64_t* flags = peer_ptr<uint64_t>(p.peer_base, p.rank, p.layout.count_flag);
    counts_ok = wait_all(flags, R, epoch, p.state, kEpPhaseCounts, p.timeout_ns);
  }
  __syncthreads();
  const int32_t* all_counts = peer_ptr<int32_t>(p.peer_base, p.rank, p.layout.counts);
  for (uint32_t e = tid; e < E; e += kThreads) {
    int32_t before = 0;
    for (uint32_t r = 0; r < p.rank; ++r) before += ld_peer_written(all_counts + r * E + e);
    bases[e] += before;
  }
  if (blockIdx.x == 0) {
    const uint32_t e0 = p.rank * p.experts_per_rank;
    for (uint32_t le = tid; le < p.experts_per_rank; le += kThreads) {
      int32_t total = 0;
      for (uint32_t r = 0; r < R; ++r) total += ld_peer_written(all_counts + r * E + e0 + le);
      if (!counts_ok) total = 0;  // a rank's counts never came: nothing is trusted, no rows
      if (total > static_cast<int32_t>(p.max_m)) {
        record_status(p.state, kEpStatusOverflow, 0, e0 + le);
        total = static_cast<int32_t>(p.max_m);
      }
      p.masked_m[le] = total;
    }
  }
  __syncthreads();
  // 4a. Placement, kThreads slots a batch (the fused layer's stable order), and the row's
  //     weight and source pushed to its owner.
  for (uint32_t batch = first; batch < last; batch += kThreads) {
    const uint32_t s = batch + tid;
    const int32_t e = s < last ? p.topk_ids[s] : -1;
    const bool keep = s < last && e >= 0 && static_cast<uint32_t>(e) < E;
    const uint32_t peers = __match_any_sync(0xffffffffu, keep ? static_cast<uint32_t>(e)
                                                              : 0xffffffffu);
    const uint32_t rank_in_warp = __popc(peers & ((1u << lane) - 1));
    const bool leader = rank_in_warp == 0;
    if (keep && leader) warp_counts[warp * E + e] = __popc(peers);
    __syncthreads();
    int32_t before = 0;
    if (keep) {
      for (uint32_t w = 0; w < warp; ++w) before += warp_counts[w * E + e];
      const int32_t row = bases[e] + before + static_cast<int32_t>(rank_in_warp);
      const bool fits = counts_ok && row < static_cast<int32_t>(p.max_m);
      const uint32_t owner = static_cast<uint32_t>(e) / p.experts_per_rank;
      const uint32_t index = (static_cast<uint32_t>(e) % p.experts_per_rank) * p.max_m + row;
      range_rows[s - first] = fits ? static_cast<int32_t>(index) : -1;
      p.slot_dest[s] = fits ? row : -1;
      if (fits) {
        peer_ptr<float>(p.peer_base, owner, p.layout.recv_weight)[index] = p.topk_weights[s];
        peer_ptr<int32_t>(p.peer_base, owner, p.layout.recv_src)[index] =
            static_cast<int32_t>(p.rank * p.slots_per_rank + s);
      }
    } else if (s < last) {
      range_rows[s - first] = -1;
      p.slot_dest[s] = -1;
    }
    __syncthreads();
    if (keep && leader && before == 0) {
      int32_t batch_count = 0;
      for (uint32_t w = warp; w < kWarps; ++w) batch_count += warp_counts[w * E + e];
      bases[e] += batch_count;
    }
    __syncthreads();
    if (keep && leader) warp_counts[warp * E + e] = 0;
    __syncthreads();
  }
  // 4b. The rows themselves, to the owners' x_recv.
  const uint32_t local = last - first;
  if constexpr (kFp8) {
    const uint32_t blocks = (p.hidden + moe::kFp8Block - 1) / moe::kFp8Block;
    const auto* x = static_cast<const __nv_bfloat16*>(p.x);
    for (uint32_t base = 0; base < local * blocks; base += kThreads / 16) {
      const uint32_t item = base + tid / 16;
      const uint32_t slot = item / blocks, block = item % blocks;
      const int32_t index = item < local * blocks ? range_rows[slot] : -1;
      const uint32_t s = first + slot;
      // Every lane runs quantize_block (its shuffles are full-warp); inactive ones store nothing.
      const int32_t e = index >= 0 ? p.topk_ids[s] : 0;
      const uint32_t owner = static_cast<uint32_t>(e) / p.experts_per_rank;
      const uint64_t r = index < 0 ? 0 : static_cast<uint64_t>(index);
      uint8_t* x_recv = peer_ptr<uint8_t>(p.peer_base, owner, p.layout.x_recv);
      float* sfa = peer_ptr<float>(p.peer_base, owner, p.layout.sfa_recv);
      moe::quantize_block<kUe8m0>(x + static_cast<uint64_t>(s / p.top_k) * p.ldx, x_recv + r * p.hidden,
                          sfa + r * blocks + block, p.hidden, block, index >= 0);
    }
  } else {
    const uint32_t vectors = p.hidden / 8;
    const uint4* x = static_cast<const uint4*>(p.x);
    for (uint32_t i = tid; i < local * vectors; i += kThreads) {
      const uint32_t slot = i / vectors, v = i % vectors;
      const int32_t index = range_rows[slot];
      if (index < 0) continue;
      const uint32_t s = first + slot;
      const uint32_t owner = static_cast<uint32_t>(p.topk_ids[s]) / p.experts_per_rank;
      uint4* x_recv = peer_ptr<uint4>(p.peer_base, owner, p.layout.x_recv);
      x_recv[static_cast<uint64_t>(index) * vectors + v] =
          x[static_cast<uint64_t>(s / p.top_k) * (p.ldx / 8) + v];
    }
  }
  // 5. Arrive on every rank; the last CTA waits for every rank's arrivals.
  __syncthreads();
  if (tid == 0) {
    fence_sys();
    for (uint32_t r = 0; r < R; ++r) {
      red_release_sys_add(peer_ptr<uint64_t>(p.peer_base, r, p.layout.dispatch_arrive) + p.rank,
                          1);
    }
    if (blockIdx.x == gridDim.x - 1) {
      const uint64_t* arrive = peer_ptr<uint64_t>(p.peer_base, p.rank, p.layout.dispatch_arrive);
      wait_all(arrive, R, epoch * gridDim.x, p.state, kEpPhaseDispatch, p.timeout_ns);
      p.state->epoch = epoch;
    }
  }
}

template <uint32_t kThreads, bool kFp8, bool kUe8m0 = false>
__global__ void __launch_bounds__(kThreads) ep_dispatch_kernel(
    const __grid_constant__ EpDispatchParams params) {
  static_assert(kFp8 || !kUe8m0, "UE8M0 scales are FP8 rows' scales");
  // Under PDL the previous kernel may still run: its writes are visible only after the wait.
  pdl_wait();
  dispatch<kThreads, kFp8, kUe8m0>(params);
}

}  // namespace moegemm::ep
