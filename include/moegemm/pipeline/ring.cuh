// The stage ring between a producer and its consumers: kNumStages shared-memory stages, each
// guarded by a full and an empty mbarrier.
//   full[s]:  producer -> consumers. Arrive count 1 (the producer's arrive-with-expected-bytes);
//             for a TMA producer it completes when the bytes have landed.
//   empty[s]: consumers -> producer. Arrive count `num_releases`: one per consumer warp, or
//             with a cluster one per consumer warpgroup of every CTA (release below).
// PipelineState (stage_idx, phase) walks the ring; phase flips each time stage_idx wraps. A
// producer waits on empty with the opposite parity, so its first pass finds every stage free.
#pragma once

#include <cutlass/arch/barrier.h>

#include <stdint.h>

#include <moegemm/ptx/barrier.cuh>

namespace moegemm {

template <uint32_t kNumStages>
struct PipelineState {
  uint32_t stage_idx = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    stage_idx = stage_idx + 1 == kNumStages ? 0 : stage_idx + 1;
    phase ^= stage_idx == 0;
  }
};

// kClusterSize > 1: the producer of every CTA multicasts its share of an operand into all of
// them, so a stage is free only once the consumers of every CTA have released it.
template <uint32_t kNumStages_, uint32_t kClusterSize = 1>
struct PipelineRing {
  static constexpr uint32_t kNumStages = kNumStages_;
  static constexpr uint32_t kBarrierBytes = kNumStages * 2 * sizeof(Barrier);
  using State = PipelineState<kNumStages>;

  Barrier* full;
  Barrier* empty;

  // `barriers` holds 2 * kNumStages barriers: full ones first, then empty ones.
  __device__ __forceinline__ explicit PipelineRing(Barrier* barriers)
      : full(barriers), empty(barriers + kNumStages) {}

  // One thread; cutlass::arch::fence_barrier_init() and a CTA (or cluster) barrier must follow
  // before any other thread uses the ring.
  // `num_fills` arrivals complete a full barrier (besides the bytes): 1 for a TMA producer.
  __device__ __forceinline__ void init(uint32_t num_releases, uint32_t num_fills = 1) const {
#pragma unroll
    for (uint32_t s = 0; s < kNumStages; ++s) {
      full[s].init(num_fills);
      empty[s].init(num_releases);
    }
  }

  // Producer: wait until stage s is free, then arrive on its full barrier announcing the bytes
  // the stage's loads will complete (before they are issued, as CUTLASS's producer_acquire).
  __device__ __forceinline__ void producer_acquire(const State& s) const {
    empty[s.stage_idx].wait(s.phase ^ 1);
  }
  __device__ __forceinline__ void producer_commit_bytes(const State& s, uint32_t bytes) const {
    full[s.stage_idx].arrive_and_expect_tx(bytes);
  }
  // A producer without transactions (a transform writing with ordinary stores): each of the
  // full barrier's arrivals is one thread's, after its writes and a proxy fence.
  __device__ __forceinline__ void producer_arrive(const State& s) const {
    full[s.stage_idx].arrive();
  }
  __device__ __forceinline__ Barrier* full_barrier(const State& s) const {
    return &full[s.stage_idx];
  }

  __device__ __forceinline__ void consumer_wait(const State& s) const {
    full[s.stage_idx].wait(s.phase);
  }

  // A consumer warp gives stage `stage_idx` back: lane 0 arrives on its own CTA's empty
  // barrier; with a cluster, lane r arrives on CTA r's (each CTA's producer multicasts into
  // this CTA's stage too). CTA-scope release, as CUTLASS's consumer release: the wgmma reads
  // it orders have retired (warpgroup wait) before the arrive.
  // With a cluster only the first warp of each consumer warpgroup signals (`signaling_warp`),
  // as CUTLASS does: a wgmma is one operation of the whole warpgroup, so once any of its warps
  // has seen a batch retire, the warpgroup's reads of that stage are over; the empty barriers
  // count one arrive per warpgroup and CTA instead of one per warp.
  __device__ __forceinline__ void consumer_release(uint32_t stage_idx, uint32_t lane_idx,
                                                   bool signaling_warp) const {
    if constexpr (kClusterSize == 1) {
      if (lane_idx == 0) empty[stage_idx].arrive();
    } else {
      if (signaling_warp && lane_idx < kClusterSize) arrive_remote(empty[stage_idx], lane_idx);
    }
  }
};

// A ring with a relay between the producer and the consumers (no cluster): ready[s] completes
// once the relay warp has finished with a landed stage (its 32 lanes' arrivals, each a CTA-scope
// release of the lane's shared-memory writes). Consumers wait on it instead of full[s]; their
// releases still go to empty[s], so the producer refills a stage only after the relay and every
// consumer are done with it.
template <uint32_t kNumStages_>
struct RelayRing : PipelineRing<kNumStages_, 1> {
  using Base = PipelineRing<kNumStages_, 1>;
  using Base::full;
  static constexpr uint32_t kBarrierBytes = kNumStages_ * 3 * sizeof(Barrier);
  static constexpr uint32_t kRelayArrivals = 32;

  // `barriers` holds 3 * kNumStages barriers: full, empty, then ready ones.
  __device__ __forceinline__ explicit RelayRing(Barrier* barriers) : Base(barriers) {}
  __device__ __forceinline__ Barrier* ready() const { return full + 2 * kNumStages_; }

  __device__ __forceinline__ void init(uint32_t num_releases, uint32_t num_fills = 1) const {
    Base::init(num_releases, num_fills);
#pragma unroll
    for (uint32_t s = 0; s < kNumStages_; ++s) ready()[s].init(kRelayArrivals);
  }

  __device__ __forceinline__ void relay_wait(const typename Base::State& s) const {
    full[s.stage_idx].wait(s.phase);
  }
  __device__ __forceinline__ void relay_arrive(const typename Base::State& s) const {
    ready()[s.stage_idx].arrive();
  }
  __device__ __forceinline__ void consumer_wait(const typename Base::State& s) const {
    ready()[s.stage_idx].wait(s.phase);
  }
};

}  // namespace moegemm
