// The fused MoE layer's first launch: route the (token, choice) slots to experts and gather the
// activations into expert-sorted rows, for the grouped GEMMs' `offs` layout.
//
// One kernel, kThreads threads a CTA, any number of CTAs (the host picks it from T * top_k);
// CTA c owns slots [c * slots_per_cta, (c + 1) * slots_per_cta). Every CTA
//   1. counts every slot's expert (shared-memory histogram, one atomic per expert a warp sees;
//      integer sums, so the counts do not depend on timing) and, separately, the slots before
//      its own range;
//   2. scans the counts into each expert's first row (CTA 0 writes offs, the end rows);
//   3. places its slots in order, kThreads at a time: a slot's row is its expert's first row +
//      the expert's slots before this range + those earlier in this batch (earlier warps: a
//      per-warp count table; earlier lanes: __match_any_sync), so rows follow slot order within
//      each expert. No atomics decide a position, so reruns are bitwise equal;
//   4. copies each kept slot's token row of x to its row of x_sorted (16-byte vectors), or with
//      kFp8 (MXFP4 experts) writes it quantized to FP8 per 128 columns with its scales
//      (power-of-two scales with kUe8m0, for the SM100 FP8 x FP4 kernel).
// Dropped slots (expert id outside [0, E), e.g. -1 for an expert on another rank) get no row
// and slot_row -1. Shared memory: counts [E], bases [E], warp counts [kThreads / 32][E], the
// range's rows [slots_per_cta] (int32). No synchronization with the host; graph-safe.
#pragma once

#include <stdint.h>

#include <moegemm/common/moe_params.h>
#include <moegemm/moe/fp8_rows.cuh>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::moe {

__device__ __forceinline__ bool kept(int32_t e, uint32_t num_experts) {
  return e >= 0 && static_cast<uint32_t>(e) < num_experts;
}

template <uint32_t kThreads, bool kFp8, bool kUe8m0>
__device__ __forceinline__ void route_gather(const MoeRouteParams& p) {
  constexpr uint32_t kWarps = kThreads / 32;
  extern __shared__ __align__(16) int32_t smem[];
  const uint32_t E = p.num_experts;
  int32_t* counts = smem;
  int32_t* bases = counts + E;
  int32_t* warp_counts = bases + E;
  int32_t* range_rows = warp_counts + kWarps * E;
  const uint32_t tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const uint32_t num_slots = p.num_tokens * p.top_k;
  const uint32_t first = min(blockIdx.x * p.slots_per_cta, num_slots);
  const uint32_t last = min(first + p.slots_per_cta, num_slots);

  for (uint32_t i = tid; i < E; i += kThreads) counts[i] = bases[i] = 0;
  for (uint32_t i = tid; i < kWarps * E; i += kThreads) warp_counts[i] = 0;
  __syncthreads();
  // 1. Histograms: all slots, and the slots before this CTA's range. A warp's lanes of one
  //    expert add their count once (its lowest lane): skewed routing sends most lanes of a
  //    warp to a few hot experts, and same-address shared atomics would serialize.
  for (uint32_t base = 0; base < num_slots; base += kThreads) {  // uniform trip count
    const uint32_t s = base + tid;
    const int32_t e = s < num_slots ? p.topk_ids[s] : -1;
    const bool keep = s < num_slots && kept(e, E);
    const uint32_t peers = __match_any_sync(0xffffffffu, keep ? static_cast<uint32_t>(e)
                                                              : 0xffffffffu);
    const uint32_t earlier = peers & __ballot_sync(0xffffffffu, s < first);
    if (keep && lane == __ffs(peers) - 1) atomicAdd(&counts[e], __popc(peers));
    if (keep && s < first && lane == __ffs(earlier) - 1) atomicAdd(&bases[e], __popc(earlier));
  }
  __syncthreads();
  // 2. Exclusive scan of the counts by warp 0, 32 consecutive experts' chunks a lane.
  if (warp == 0) {
    const uint32_t chunk = (E + 31) / 32;
    const uint32_t e0 = min(lane * chunk, E), e1 = min(e0 + chunk, E);
    int32_t sum = 0;
    for (uint32_t e = e0; e < e1; ++e) sum += counts[e];
    int32_t prefix = sum;  // inclusive scan over lanes
#pragma unroll
    for (uint32_t d = 1; d < 32; d *= 2) {
      const int32_t v = __shfl_up_sync(0xffffffffu, prefix, d);
      if (lane >= d) prefix += v;
    }
    int32_t start = prefix - sum;
    for (uint32_t e = e0; e < e1; ++e) {
      const int32_t n = counts[e];
      bases[e] += start;
      if (blockIdx.x == 0) p.offs[e] = start + n;
      start += n;
    }
  }
  __syncthreads();
  // 3. Placement, kThreads slots a batch.
  for (uint32_t batch = first; batch < last; batch += kThreads) {
    const uint32_t s = batch + tid;
    const int32_t e = s < last ? p.topk_ids[s] : -1;
    const bool keep = s < last && kept(e, E);
    const uint32_t key = keep ? static_cast<uint32_t>(e) : 0xffffffffu;
    const uint32_t peers = __match_any_sync(0xffffffffu, key);
    const uint32_t rank = __popc(peers & ((1u << lane) - 1));
    const bool leader = rank == 0;
    if (keep && leader) warp_counts[warp * E + e] = __popc(peers);
    __syncthreads();
    int32_t before = 0;
    if (keep) {
      for (uint32_t w = 0; w < warp; ++w) before += warp_counts[w * E + e];
      const int32_t row = bases[e] + before + static_cast<int32_t>(rank);
      range_rows[s - first] = row;
      p.slot_row[s] = row;
      p.row_slot[row] = static_cast<int32_t>(s);
      p.row_weight[row] = p.topk_weights[s];
    } else if (s < last) {
      range_rows[s - first] = -1;
      p.slot_row[s] = -1;
    }
    __syncthreads();
    // The expert's first warp in this batch moves its base past the batch's slots.
    if (keep && leader && before == 0) {
      int32_t batch_count = 0;
      for (uint32_t w = warp; w < kWarps; ++w) batch_count += warp_counts[w * E + e];
      bases[e] += batch_count;
    }
    __syncthreads();
    if (keep && leader) warp_counts[warp * E + e] = 0;
    __syncthreads();
  }
  // 4. Gather: 16-byte vectors of each kept slot's token row (hidden % 8 == 0, ldx % 8 == 0);
  //    with kFp8 quantized per 128 columns on the way (moe/fp8_rows.cuh), 16 lanes a block.
  const uint32_t local = last - first;
  if constexpr (kFp8) {
    const uint32_t blocks = (p.hidden + kFp8Block - 1) / kFp8Block;
    const auto* x = static_cast<const __nv_bfloat16*>(p.x);
    auto* x_sorted = static_cast<uint8_t*>(p.x_sorted);
    for (uint32_t base = 0; base < local * blocks; base += kThreads / 16) {
      const uint32_t item = base + tid / 16;
      const uint32_t slot = item / blocks, block = item % blocks;
      const int32_t row = item < local * blocks ? range_rows[slot] : -1;
      const uint32_t token = (first + slot) / p.top_k;
      const uint64_t r = row < 0 ? 0 : static_cast<uint64_t>(row);
      quantize_block<kUe8m0>(x + static_cast<uint64_t>(token) * p.ldx, x_sorted + r * p.hidden,
                     p.sfa_sorted + r * blocks + block, p.hidden, block, row >= 0);
    }
  } else {
    const uint32_t vectors = p.hidden / 8;
    const uint4* x = static_cast<const uint4*>(p.x);
    uint4* x_sorted = static_cast<uint4*>(p.x_sorted);
    for (uint32_t i = tid; i < local * vectors; i += kThreads) {
      const uint32_t slot = i / vectors, v = i % vectors;
      const int32_t row = range_rows[slot];
      if (row < 0) continue;
      const uint32_t token = (first + slot) / p.top_k;
      x_sorted[static_cast<uint64_t>(row) * vectors + v] =
          x[static_cast<uint64_t>(token) * (p.ldx / 8) + v];
    }
  }
}

template <uint32_t kThreads, bool kFp8, bool kUe8m0 = false>
__global__ void __launch_bounds__(kThreads) moe_route_gather_kernel(
    const __grid_constant__ MoeRouteParams params) {
  // Under PDL the previous kernel may still run: its writes are visible only after the wait.
  pdl_wait();
  pdl_launch_dependents();
  static_assert(kFp8 || !kUe8m0, "UE8M0 scales are FP8 rows' scales");
  route_gather<kThreads, kFp8, kUe8m0>(params);
}

}  // namespace moegemm::moe
