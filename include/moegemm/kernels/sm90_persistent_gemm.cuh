// The persistent, warp-specialized SM90 GEMM skeleton every kernel of impls/ is a composition
// of. It owns the roles, the rings and their protocol; the composition `Kernel` supplies the
// policies:
//   Kernel::Params                       the __grid_constant__ parameter struct,
//   kNumStages, kNumMathWG, kClusterSize the TMA ring depth, math warpgroups, CTAs per cluster,
//   Loader     (loader/tma_loaders.cuh)  the boxes of one k-block, the full barrier's bytes,
//   Transform  (pipeline/transform.cuh)  NoTransform, or a warpgroup between ring and MMA,
//   Mma        (mma/sm90_mma_policies.cuh) the wgmma of one k-block (operands, issue), the
//                                        per-k-block hook,
//   Scheduler, Work                      the tiles (scheduler/), make_scheduler(params): one
//                                        per thread before the roles split, each role walks
//                                        its copy,
//   k_blocks(params), num_k_blocks(kb, work)  k-blocks of a tile: the first is read once before
//                                        the roles split (params live in parameter space, and
//                                        the mainloop's memory clobbers keep a per-tile read of
//                                        them from being hoisted), the second per tile,
//   math_idle(params, work, math_wg)     a warpgroup with nothing to compute on this tile
//                                        (keeps the ring in step without wgmma),
//   epilogue(params, acc, work, math_wg, smem_d)   the stores (epilogue/),
//   kEpilogueSmemBytes, kTmaStore        the D staging carve-up, TMA stores to drain.
//
// Warp roles (128-thread warpgroups):
//   warpgroup 0          producer. Warp 0 walks the schedule (warp-cooperative schedulers);
//                        one elected lane acquires each stage, arms its full barrier with the
//                        loader's bytes and issues the loader's boxes; setmaxnreg.dec 40.
//                        With Mma::kRelay, warp 1 is the relay: it walks the same stages,
//                        rewrites each landed one (Mma::relay_stage) and arrives on its ready
//                        barrier, which the math warpgroups wait on (RelayRing).
//   side warpgroup       (Kernel::Side, without a transform or clusters) work beside the rings
//                        (the FP8 x FP4 convert-ahead kernel's converter): Side::run(params,
//                        thread, scratch: Side::kScratchBytes of shared memory), setmaxnreg.dec
//                        Side::kNumRegs; the producer may wait on what it publishes
//                        (Loader::kWaitsForTile).
//   warpgroup 1 (and 2)  (with a transform only) the transform: TMA ring -> transform ring;
//                        with Transform::kMathReadsInput the math warpgroups read the TMA
//                        ring's other slabs too, and a k-block may take several out stages
//                        (passes, each promoted by the MMA policy: Kernel::row_scales gives
//                        the per-row factors, the out stage its own).
//   the next kNumMathWG  math. Wait for a stage, wgmma, keep one batch in flight, release the
//                        previous stage, then the epilogue; setmaxnreg.inc (232 without a
//                        transform). An MMA policy with kOwnsKBlock runs each landed k-block
//                        itself (Mma::k_block: the FP8 x FP4 decode kernel converts its
//                        register operands there) and the skeleton only waits and releases.
// Pipelines (pipeline/ring.cuh): the TMA ring, kNumStages stages; full[s] arrive count 1 +
//   the loader's bytes; empty[s] one arrive per math warp, or with a cluster one per math
//   warpgroup of every CTA (the first warp of each signals, after a 128-thread barrier where the
//   warpgroup idles), or with a transform one per transform warp. The transform ring: tfull[t]
//   128 arrives (every transform thread), tempty[t] one per math warp. One wgmma batch stays in
//   flight: stage s is released once the batch of stage s + 1 has been issued.
// Shared memory: [TMA ring slabs | transform ring slabs | transform scratch | side scratch |
//   D staging | TMA ring barriers | transform ring barriers]; every slab on a 1024-byte
//   boundary.
// Clusters: barrier set-up is followed by a cluster barrier (the peer arrives on our empty
//   barriers and multicasts into our stages) and so is the exit; the launch's cluster shape is
//   checked against kClusterSize.
#pragma once

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <stdint.h>

#include <type_traits>

#include <moegemm/pipeline/ring.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/pipeline/transform.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/pdl.cuh>
#include <moegemm/ptx/sm90_wgmma.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/ptx/tma.cuh>
#include <moegemm/scheduler/tile.cuh>

namespace moegemm::sm90 {

// A composition without a side warpgroup (Kernel::Side, below).
struct NoSide {
  static constexpr uint32_t kNumWarpgroups = 0;
  static constexpr uint32_t kNumRegs = 0;
  static constexpr uint32_t kScratchBytes = 0;
  template <typename Params>
  __device__ __forceinline__ static void run(const Params&, uint32_t, uint8_t*) {}
};

// The composition's side warpgroup: Kernel::Side where it names one, else NoSide.
template <typename Kernel, typename = void>
struct side_of {
  using type = NoSide;
};
template <typename Kernel>
struct side_of<Kernel, std::void_t<typename Kernel::Side>> {
  using type = typename Kernel::Side;
};

// Whether a loader waits for something before a tile's loads (Loader::kWaitsForTile = true:
// the whole producer warp calls Loader::wait_tile(params, work, num_k_blocks, lane) first).
template <typename Loader, typename = void>
struct waits_for_tile : std::false_type {};
template <typename Loader>
struct waits_for_tile<Loader, std::enable_if_t<Loader::kWaitsForTile>> : std::true_type {};

// Whether an MMA policy runs whole k-blocks itself (Mma::kOwnsKBlock = true).
template <typename Mma, typename = void>
struct owns_k_block : std::false_type {};
template <typename Mma>
struct owns_k_block<Mma, std::enable_if_t<Mma::kOwnsKBlock>> : std::true_type {};

// Whether an MMA policy runs whole tiles itself (Mma::kRunsTile = true).
template <typename Mma, typename = void>
struct runs_tile : std::false_type {};
template <typename Mma>
struct runs_tile<Mma, std::enable_if_t<Mma::kRunsTile>> : std::true_type {};

// Whether an MMA policy has a relay warp rewrite each landed stage before the math warpgroups
// read it (Mma::kRelay = true: Mma::relay_stage<Stages>(smem, stage_idx, lane), RelayRing).
template <typename Mma, typename = void>
struct has_relay : std::false_type {};
template <typename Mma>
struct has_relay<Mma, std::enable_if_t<Mma::kRelay>> : std::true_type {};

// The work a scheduler hands out: Sched::Work where it names one, else the kernel's.
template <typename Sched, typename Fallback, typename = void>
struct work_of {
  using type = Fallback;
};
template <typename Sched, typename Fallback>
struct work_of<Sched, Fallback, std::void_t<typename Sched::Work>> {
  using type = typename Sched::Work;
};

template <typename Kernel>
struct PersistentGemm {
  using Loader = typename Kernel::Loader;
  using Transform = typename Kernel::Transform;
  using Mma = typename Kernel::Mma;
  using Side = typename side_of<Kernel>::type;
  static constexpr uint32_t kNumStages = Kernel::kNumStages;
  static constexpr uint32_t kNumMathWG = Kernel::kNumMathWG;
  static constexpr uint32_t kClusterSize = Kernel::kClusterSize;
  static constexpr bool kTransform = Transform::kEnabled;
  static constexpr bool kMathReadsInput = Transform::kMathReadsInput;
  static_assert(!kTransform || kClusterSize == 1, "a transform stage runs without clusters");
  static_assert(!kTransform || !Loader::kNeedsFixup, "fixups repair the TMA ring's stages");
  static_assert(kNumMathWG <= NamedBarrier::kMaxMathWarpgroups, "named barrier ranges");
  // transform() hands the policy its thread index over all its warpgroups (0 .. 128 W - 1).
  static_assert(Transform::kNumWarpgroups <= 2, "a transform runs in one or two warpgroups");

  static constexpr bool kRelay = has_relay<Mma>::value;
  static constexpr bool kSplitsK = splits_k<typename Kernel::Scheduler>::value;
  static_assert(!kRelay || (!kTransform && kClusterSize == 1 && runs_tile<Mma>::value),
                "a relay serves math warpgroups that run whole tiles, alone on the ring");
  using Ring = std::conditional_t<kRelay, RelayRing<kNumStages>,
                                  PipelineRing<kNumStages, kClusterSize>>;
  using Stages = typename Loader::template Stages<kNumStages>;
  // What the math warpgroups read: the TMA ring, or the transform's ring.
  using MmaStages = typename Transform::template OutStages<Stages>;
  using MmaRing =
      PipelineRing<kTransform ? Transform::kNumStages : kNumStages, kTransform ? 1 : kClusterSize>;

  static constexpr uint32_t kNumTransformWG = Transform::kNumWarpgroups;
  static constexpr uint32_t kNumSideWG = Side::kNumWarpgroups;
  static_assert(kNumSideWG == 0 || (!kTransform && kClusterSize == 1),
                "a side warpgroup runs without a transform or clusters");
  static constexpr uint32_t kFirstSideWG = 1 + kNumTransformWG;
  static constexpr uint32_t kFirstMathWG = kFirstSideWG + kNumSideWG;
  static constexpr uint32_t kNumThreads = 128 * (kFirstMathWG + kNumMathWG);
  static constexpr uint32_t kNumMathWarps = 4 * kNumMathWG;
  // The producer's registers: 40, or 32 beside two transform warpgroups (five warpgroups
  // launch with 96 registers a thread: the math ones need what both give back), or 24 beside a
  // side warpgroup (the convert-ahead kernel's m128n192 math warpgroups need 224).
  static constexpr uint32_t kProducerRegs = kNumSideWG > 0 ? 24 : kNumTransformWG == 2 ? 32 : 40;
  static constexpr uint32_t kTransformRegs = kTransform ? Transform::kNumRegs : 0;
  static constexpr uint32_t kSideRegs = Side::kNumRegs;
  // 64K registers per SM for one CTA: what the producer and transform give back goes to math.
  static constexpr uint32_t kMathRegsFit =
      (65536 / 128 - kProducerRegs - kTransformRegs * kNumTransformWG - kSideRegs * kNumSideWG) /
      kNumMathWG / 8 * 8;
  // setmaxnreg.inc draws only on the CTA's pool, which holds what setmaxnreg.dec released: the
  // CTA launches with kLaunchRegs a thread (ptxas takes the whole share the launch bounds
  // allow), so the math warpgroups can grow by the producer's and transform's surrender only.
  // Asking for more blocks forever (the 4-warpgroup decode kernel: 96 at launch, 112 asked).
  static constexpr uint32_t kLaunchRegs = 65536 / kNumThreads / 8 * 8;
  static_assert(kTransformRegs <= kLaunchRegs && kSideRegs <= kLaunchRegs,
                "the transform and side warpgroups only give registers back");
  static constexpr uint32_t kReleasedRegs = 128 * (kLaunchRegs - kProducerRegs) +
                                            128 * kNumTransformWG * (kLaunchRegs - kTransformRegs) +
                                            128 * kNumSideWG * (kLaunchRegs - kSideRegs);
  static constexpr uint32_t kMathRegsPool =
      kLaunchRegs + kReleasedRegs / (128 * kNumMathWG) / 8 * 8;
  static constexpr uint32_t kMathRegsMin = kMathRegsFit < kMathRegsPool ? kMathRegsFit : kMathRegsPool;
  static constexpr uint32_t kMathRegs = kMathRegsMin < 232 ? kMathRegsMin : 232;

  static constexpr uint32_t kRingBytes = Stages::kRingBytes;
  static constexpr uint32_t kTransformBytes =
      kTransform ? MmaStages::kRingBytes + Transform::kScratchBytes : 0;
  static constexpr uint32_t kSideBytes = Side::kScratchBytes;
  static_assert(kSideBytes % 1024 == 0, "the side scratch keeps the D staging aligned");
  static constexpr uint32_t kBarrierBytes =
      Ring::kBarrierBytes + (kTransform ? MmaRing::kBarrierBytes : 0);
  static constexpr uint32_t kSmemBytes =
      kRingBytes + kTransformBytes + kSideBytes + Kernel::kEpilogueSmemBytes + kBarrierBytes;

  using Params = typename Kernel::Params;

  __device__ __forceinline__ static void run(const Params& params) {
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_transform = smem + kRingBytes;
    uint8_t* smem_side = smem_transform + kTransformBytes;
    uint8_t* smem_d = smem_side + kSideBytes;
    auto* barriers = reinterpret_cast<Barrier*>(smem_d + Kernel::kEpilogueSmemBytes);
    const Ring ring(barriers);
    const MmaRing transform_ring(barriers + Ring::kBarrierBytes / sizeof(Barrier));

    const uint32_t warp_idx = warp_idx_sync();
    const uint32_t lane_idx = threadIdx.x % 32;
    if (warp_idx == 0 && lane_idx == 0) {
      Loader::prefetch(params);
      if constexpr (kTransform) {
        // The transform's warps release each TMA stage, and the math warps too where they read
        // it (one arrive per warp of each).
        ring.init(4 * kNumTransformWG + (kMathReadsInput ? kNumMathWarps : 0),
                  Loader::kFillArrivals);
        transform_ring.init(kNumMathWarps, 128 * kNumTransformWG);
      } else {
        // Every math warp releases each stage; with a cluster, every math warpgroup of every
        // CTA (the shared operand lands in all of them; one warp per warpgroup signals).
        ring.init(kClusterSize == 1 ? kNumMathWarps : kNumMathWG * kClusterSize,
                  Loader::kFillArrivals);
      }
      cutlass::arch::fence_barrier_init();
      if constexpr (Kernel::kTmaStore) prefetch_tma_desc(&params.tma_d);
    }
    if constexpr (kTransform) {
      if (threadIdx.x >= 128 && threadIdx.x < 128 * kFirstMathWG)
        Transform::init_scratch(smem_transform + MmaStages::kRingBytes, threadIdx.x - 128);
    }
    // With a cluster, the peer's barriers must be initialised before anything reaches them.
    if constexpr (kClusterSize == 1) {
      __syncthreads();
    } else {
      cute::cluster_sync();
    }
    // Schedulers derive the rank from blockIdx.x: clusters run along x only (launch.cpp).
    const uint32_t cta_rank = kClusterSize == 1 ? 0 : cute::block_rank_in_cluster();
    // Only the size is checked: a 1x2 kernel launched as 2x1 (or back) is not caught here; the
    // Python plan builds the kernel and its launch shape from one GemmConfig.
    if constexpr (kClusterSize > 1) {
      if (cute::cluster_shape().x != kClusterSize) __trap();  // launched with another shape
    }

    // Everything above overlaps the previous kernel under PDL; global memory is touched only
    // below.
    pdl_wait();
    pdl_launch_dependents();

    // Every role walks its own copy of the schedule (warp-cooperative schedulers: whole warps).
    auto scheduler = Kernel::make_scheduler(params);
    const uint32_t k_blocks = Kernel::k_blocks(params);
    // A splitting scheduler runs in two phases, each role's loop compiled once for each: its
    // whole rounds (Tile work, the mainloop's trip count the kernel's own) and then its split
    // round (one SplitTile part at most); the ring's state carries over.
    if (threadIdx.x < 128) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
      typename Ring::State state;
      if (warp_idx == 0) {
        if constexpr (kSplitsK) {
          produce(params, ring, smem, cta_rank, scheduler.whole_rounds(), k_blocks, state);
          produce(params, ring, smem, cta_rank, scheduler.split_round(), k_blocks, state);
        } else {
          produce(params, ring, smem, cta_rank, scheduler, k_blocks, state);
        }
      }
      if constexpr (kRelay) {
        if (warp_idx == 1) {
          if constexpr (kSplitsK) {
            relay(params, ring, smem, lane_idx, scheduler.whole_rounds(), k_blocks, state);
            relay(params, ring, smem, lane_idx, scheduler.split_round(), k_blocks, state);
          } else {
            relay(params, ring, smem, lane_idx, scheduler, k_blocks, state);
          }
        }
      }
      if constexpr (kClusterSize == 1) return;
    } else if (kTransform && threadIdx.x < 128 * kFirstMathWG) {
      if constexpr (kTransform) {
        cutlass::arch::warpgroup_reg_dealloc<kTransformRegs>();
        transform(params, ring, transform_ring, smem, smem_transform, lane_idx, scheduler,
                  k_blocks);
      }
      return;  // no cluster with a transform
    } else if (kNumSideWG > 0 && threadIdx.x < 128 * kFirstMathWG) {
      if constexpr (kNumSideWG > 0) {
        cutlass::arch::warpgroup_reg_dealloc<kSideRegs>();
        Side::run(params, threadIdx.x - 128 * kFirstSideWG, smem_side);
      }
      return;  // no cluster with a side warpgroup
    } else {
      cutlass::arch::warpgroup_reg_alloc<kMathRegs>();
      if constexpr (kMathReadsInput) {
        consume_passes(params, ring, transform_ring, smem, smem_transform, smem_d, warp_idx,
                       lane_idx, scheduler, k_blocks);
      } else if constexpr (runs_tile<Mma>::value) {
        typename Ring::State in;
        if constexpr (kSplitsK) {
          consume_tiles(params, ring, smem, smem_d, lane_idx, scheduler.whole_rounds(), k_blocks,
                        in);
          consume_tiles(params, ring, smem, smem_d, lane_idx, scheduler.split_round(), k_blocks,
                        in);
        } else {
          consume_tiles(params, ring, smem, smem_d, lane_idx, scheduler, k_blocks, in);
        }
      } else if constexpr (owns_k_block<Mma>::value) {
        consume_k_blocks(params, ring, smem, smem_d, lane_idx, scheduler, k_blocks);
      } else if constexpr (kTransform) {
        consume<MmaStages>(params, transform_ring, smem_transform, smem_d, warp_idx, lane_idx,
                           scheduler, k_blocks);
      } else {
        consume<MmaStages>(params, ring, smem, smem_d, warp_idx, lane_idx, scheduler,
                           k_blocks);
      }
    }
    // No CTA may leave while its peer can still multicast into it or arrive on its barriers.
    if constexpr (kClusterSize > 1) cute::cluster_sync();
  }

  // Producer warp. The whole warp walks the schedule (a warp-cooperative search); one lane
  // issues. With a cluster, each CTA loads its share of the shared operand, multicast to every
  // CTA, and all of the other; the full barrier expects both whole slabs.
  template <typename Sched>
  __device__ __forceinline__ static void produce(const Params& params, const Ring& ring,
                                                 uint8_t* smem, uint32_t cta_rank,
                                                 Sched scheduler, uint32_t k_blocks,
                                                 typename Ring::State& state) {
    using Work = typename work_of<Sched, typename Kernel::Work>::type;
    const bool leader = cute::elect_one_sync();
    Work work;
    // A loader with lane copies: every lane copies its share of the stage (scales) besides the
    // leader's TMA boxes, and arrives on the full barrier once its copies land
    // (Loader::kFillArrivals). Other loaders never call it (and have no copy_lanes).
    auto fill_stage = [&](const Work& tile, uint32_t kb) {
      if constexpr (Loader::kLaneCopies) {
        ring.producer_acquire(state);
        if (leader) {
          ring.producer_commit_bytes(state, Loader::kExpectedBytes);
          Loader::template load<Stages>(params, ring.full_barrier(state),
                                        StageRef{smem, state.stage_idx}, tile, kb, cta_rank);
        }
        Loader::template copy_lanes<Stages>(params, ring.full_barrier(state),
                                            StageRef{smem, state.stage_idx}, tile, kb,
                                            threadIdx.x % 32);
        state.advance();
      }
    };
    if constexpr (Loader::kLaneCopies && waits_for_tile<Loader>::value) {
      // A loader that waits before each tile: the next tile is found while this one's last
      // kNumStages k-blocks are still to load (the producer would wait for a free stage there
      // anyway), so only the wait itself sits between the two tiles' loads.
      const uint32_t lane = threadIdx.x % 32;
      bool more = scheduler.next(work);
      while (more) {
        const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
        constexpr uint32_t kStages = Ring::kNumStages;
        const uint32_t ask_at = num_k_blocks > kStages ? num_k_blocks - kStages : 0;
        Work next_work;
        bool next_more = false;
        Loader::wait_tile(params, work, num_k_blocks, lane);
        const uint32_t k0 = first_k_block(work, k_blocks);  // a split tile's part: inside K
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          if (kb == ask_at) next_more = scheduler.next(next_work);
          fill_stage(work, k0 + kb);
        }
        if (num_k_blocks == 0) next_more = scheduler.next(next_work);
        work = next_work;
        more = next_more;
      }
      return;
    }
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      const uint32_t k0 = first_k_block(work, k_blocks);  // a split tile's part: inside K
      if constexpr (Loader::kLaneCopies) {
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) fill_stage(work, k0 + kb);
        continue;
      }
      if (leader) {
        auto load_k_block = [&](uint32_t kb) {
          ring.producer_acquire(state);
          ring.producer_commit_bytes(state, Loader::kExpectedBytes);
          Loader::template load<Stages>(params, ring.full_barrier(state),
                                        StageRef{smem, state.stage_idx}, work, k0 + kb,
                                        cta_rank);
          state.advance();
        };
        if constexpr (Loader::kRolledLoop) {
#pragma unroll 1
          for (uint32_t kb = 0; kb < num_k_blocks; ++kb) load_k_block(kb);
        } else {
          for (uint32_t kb = 0; kb < num_k_blocks; ++kb) load_k_block(kb);
        }
      }
      __syncwarp();
    }
  }

  // Relay warp (Mma::kRelay): every stage the producer fills, in the same order, once it has
  // landed: Mma::relay_stage, then the lanes' arrivals on its ready barrier.
  template <typename Sched>
  __device__ __forceinline__ static void relay(const Params& params, const Ring& ring,
                                               uint8_t* smem, uint32_t lane_idx,
                                               Sched scheduler, uint32_t k_blocks,
                                               typename Ring::State& state) {
    const uint32_t smem_base = smem_u32(smem);
    typename work_of<Sched, typename Kernel::Work>::type work;
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
#pragma unroll 1
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.relay_wait(state);
        Mma::template relay_stage<Stages>(smem_base, state.stage_idx, lane_idx);
        // The producer's next TMA load into this stage (async proxy) comes after these
        // generic writes.
        fence_proxy_async_shared();
        ring.relay_arrive(state);
        state.advance();
      }
    }
  }

  // Transform warpgroup: every landed TMA stage becomes one stage of the transform ring.
  template <typename Sched>
  __device__ __forceinline__ static void transform(const Params& params, const Ring& ring,
                                                   const MmaRing& out_ring, uint8_t* smem,
                                                   uint8_t* smem_out, uint32_t lane_idx,
                                                   Sched scheduler, uint32_t k_blocks) {
    const uint32_t thread = threadIdx.x - 128;  // over the transform's warpgroups
    typename Ring::State in;
    typename MmaRing::State out;
    typename Kernel::Work work;
    if constexpr (kMathReadsInput) {
      uint8_t* scratch = smem_out + MmaStages::kRingBytes;
      uint32_t parity = 0;
      // One out stage of a pass: acquire, the policy's body, fence for the async proxy, arrive.
      auto emit = [&](auto&& body) {
        out_ring.producer_acquire(out);
        body(StageRef{smem_out, out.stage_idx});
        fence_proxy_async_shared();
        out_ring.producer_arrive(out);
        out.advance();
      };
      while (scheduler.next(work)) {
        const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          ring.consumer_wait(in);
          const StageRef in_stage{smem, in.stage_idx};
          typename Transform::Scales scales;
          Transform::template stage_scales<Stages>(params, work, kb, in_stage, thread, scales);
          Transform::template run_k_block<Stages>(params, work, kb, in_stage, scratch, parity,
                                                  thread, scales, emit);
          __syncwarp();  // the warp's reads of the TMA stage are done
          ring.consumer_release(in.stage_idx, lane_idx, true);
          in.advance();
        }
      }
    } else {
      while (scheduler.next(work)) {
        const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          ring.consumer_wait(in);
          out_ring.producer_acquire(out);
          Transform::template apply<Stages>(StageRef{smem, in.stage_idx},
                                            StageRef{smem_out, out.stage_idx}, thread);
          // The MMA reads the result through the async proxy.
          fence_proxy_async_shared();
          out_ring.producer_arrive(out);
          __syncwarp();  // the warp's reads of the TMA stage are done
          ring.consumer_release(in.stage_idx, lane_idx, true);
          in.advance();
          out.advance();
        }
      }
    }
  }

  // Math warpgroups over the ring they read (the TMA ring or the transform's).
  template <typename ReadStages, typename ReadRing, typename Sched>
  __device__ __forceinline__ static void consume(const Params& params, const ReadRing& ring,
                                                 uint8_t* smem_read, uint8_t* smem_d,
                                                 uint32_t warp_idx, uint32_t lane_idx,
                                                 Sched scheduler, uint32_t k_blocks) {
    constexpr uint32_t kReleaseCluster = kTransform ? 1 : kClusterSize;
    const uint32_t math_wg = threadIdx.x / 128 - kFirstMathWG;
    const uint32_t math_tid = threadIdx.x - 128 * kFirstMathWG;
    const bool signaling_warp = warp_idx % 4 == 0;  // the first warp of its warpgroup
    typename ReadRing::State state;
    typename Mma::Accum acc;
    typename Kernel::Work work;
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      // A warpgroup with nothing to compute (no row below the tile's bound, or columns past
      // N) runs a mainloop without wgmma (the tensor cores are shared, so the busy warpgroup
      // runs faster) that keeps the ring's waits and arrives. The branch sits outside the
      // wgmma loop: a wgmma under a condition makes ptxas serialize every one of them.
      if (Kernel::math_idle(params, work, math_wg)) {
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          ring.consumer_wait(state);
          __syncwarp();  // reconverge after the spin-wait (bar.sync below is warp-aligned)
          if constexpr (kReleaseCluster > 1) {
            // One warp releases for the warpgroup: the others must have seen this phase first,
            // or a lagging warp could later wait on a parity two phases old and never wake.
            named_barrier_sync(NamedBarrier::kIdleRelease + math_wg, 128);
          }
          ring.consumer_release(state.stage_idx, lane_idx, signaling_warp);
          state.advance();
        }
        continue;  // and no row to store
      }

      Mma::zero(acc);
      uint32_t prev_stage = 0, kb_done = 0;
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.consumer_wait(state);
        const StageRef stage{smem_read, state.stage_idx};
        const auto operands = Mma::template operands<ReadStages>(stage, math_wg);
        if constexpr (Loader::kNeedsFixup)
          Loader::template fixup<ReadStages>(stage, work, kb, math_tid);
        Mma::fence(acc);
        warpgroup_arrive();
        Mma::issue(acc, operands);
        warpgroup_commit_batch();
        // Keep this k-block's wgmma in flight while the next stage is awaited: only the
        // previous one must have retired before its stage goes back to the producer.
        warpgroup_wait<1>();
        Mma::fence(acc);
        Mma::after_k_block(acc, kb);
        if (kb_done > 0) ring.consumer_release(prev_stage, lane_idx, signaling_warp);
        prev_stage = state.stage_idx;
        ++kb_done;
        state.advance();
      }
      warpgroup_wait<0>();
      Mma::fence(acc);
      if (kb_done > 0) ring.consumer_release(prev_stage, lane_idx, signaling_warp);

      Kernel::epilogue(params, acc, work, math_wg, smem_d);
    }
    // The CTA's shared memory must outlive the copy engine's reads of the staging buffers.
    if constexpr (Kernel::kTmaStore)
      if (threadIdx.x % 128 == 0) tma_store_drain();
  }

  // An idle math warpgroup's tile (rows past N): every stage awaited and released, so the ring
  // stays in step with the warpgroups that compute.
  __device__ __forceinline__ static void pass_tile(const Ring& ring, typename Ring::State& in,
                                                   uint32_t num_k_blocks, uint32_t lane_idx) {
    for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
      ring.consumer_wait(in);
      __syncwarp();
      ring.consumer_release(in.stage_idx, lane_idx, true);
      in.advance();
    }
  }

  // Math warpgroups whose MMA policy runs whole tiles (Mma::kRunsTile: the FP8 x FP4 kernel on
  // prepared weights, which converts k-block kb + 1 while kb's wgmma run): the skeleton walks
  // the schedule, keeps idle warpgroups in step with the ring and stores. The MMA also gets
  // smem_d: where its kernel's epilogue stores from registers, that region is its scratch.
  template <typename Sched>
  __device__ __forceinline__ static void consume_tiles(const Params& params, const Ring& ring,
                                                       uint8_t* smem, uint8_t* smem_d,
                                                       uint32_t lane_idx, Sched scheduler,
                                                       uint32_t k_blocks,
                                                       typename Ring::State& in) {
    const uint32_t math_wg = threadIdx.x / 128 - kFirstMathWG;
    typename Mma::Accum acc, tmp;
    typename work_of<Sched, typename Kernel::Work>::type work;
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      if (Kernel::math_idle(params, work, math_wg)) {  // uniform in the warpgroup
        Mma::skip_tile(math_wg);
        pass_tile(ring, in, num_k_blocks, lane_idx);
        continue;
      }
      Mma::zero(acc);
      Mma::template run_tile<Stages>(acc, tmp, params, work, num_k_blocks, ring, in, smem,
                                     smem_d, math_wg, lane_idx);
      if constexpr (has_prefetch<Sched>::value) scheduler.prefetch();  // under the stores
      Kernel::epilogue(params, acc, work, math_wg, smem_d);
    }
    // A splitting scheduler's next phase starts its own wgmma: none of these may be thought in
    // flight there (ptxas would wait on a path it takes for divergent, C7517 / C7518).
    if constexpr (kSplitsK) warpgroup_wait<0>();
  }

  // Math warpgroups whose MMA policy runs each k-block itself (Mma::kOwnsKBlock: the FP8 x FP4
  // decode kernel converts its register operands, issues, waits and promotes in k_block()):
  // the skeleton waits for and releases the stages, and gives each math warpgroup 128 bytes of
  // the epilogue's shared memory for its tables (Mma::init_tables) and its own named barrier.
  template <typename Sched>
  __device__ __forceinline__ static void consume_k_blocks(const Params& params, const Ring& ring,
                                                          uint8_t* smem, uint8_t* smem_d,
                                                          uint32_t lane_idx, Sched scheduler,
                                                          uint32_t k_blocks) {
    const uint32_t math_wg = threadIdx.x / 128 - kFirstMathWG;
    const uint32_t barrier_id = NamedBarrier::kMathWarpgroup + math_wg;
    uint8_t* tables = smem_d + math_wg * Mma::kTableBytes;
    Mma::init_tables(tables, threadIdx.x % 128);
    named_barrier_sync(barrier_id, 128);
    typename Ring::State in;
    typename Mma::Accum acc, tmp;
    typename Kernel::Work work;
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      if (Kernel::math_idle(params, work, math_wg)) {  // uniform in the warpgroup
        pass_tile(ring, in, num_k_blocks, lane_idx);
        continue;
      }
      Mma::zero(acc);
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.consumer_wait(in);
        Mma::template k_block<Stages>(acc, tmp, params, work, kb, StageRef{smem, in.stage_idx},
                                      math_wg, tables, barrier_id);
        __syncwarp();
        ring.consumer_release(in.stage_idx, lane_idx, true);
        in.advance();
      }
      Kernel::epilogue(params, acc, work, math_wg, smem_d);
    }
  }

  // Math warpgroups of a transform with kMathReadsInput: per k-block, the TMA stage (slabs the
  // transform does not produce, e.g. the activations) and one or more transform stages
  // (passes), each issued into a temporary accumulator set, waited for and promoted into the
  // accumulators with Kernel::row_scales times the pass's own factors (Transform::pass_info:
  // one per pass, per 64 columns or per column, as the pass says).
  // Every wgmma batch is retired before its stages go back: the promotion needs its result.
  template <typename Sched>
  __device__ __forceinline__ static void consume_passes(
      const Params& params, const Ring& ring, const MmaRing& tring, uint8_t* smem,
      uint8_t* smem_transform, uint8_t* smem_d, uint32_t warp_idx, uint32_t lane_idx,
      Sched scheduler, uint32_t k_blocks) {
    const uint32_t math_wg = threadIdx.x / 128 - kFirstMathWG;
    const uint32_t math_tid = threadIdx.x - 128 * kFirstMathWG;
    typename Ring::State in;
    typename MmaRing::State state;
    typename Mma::Accum acc, tmp;
    typename Kernel::Work work;
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      // The idle branch sits outside the wgmma loop (a wgmma under a condition makes ptxas
      // serialize them all): an idle warpgroup keeps the rings' waits and releases only.
      if (Kernel::math_idle(params, work, math_wg)) {
        for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
          ring.consumer_wait(in);
          for (bool more = true; more;) {
            tring.consumer_wait(state);
            more = Transform::template pass_info<Stages>(StageRef{smem_transform, state.stage_idx})
                       .more != 0;
            __syncwarp();
            tring.consumer_release(state.stage_idx, lane_idx, true);
            state.advance();
          }
          __syncwarp();
          ring.consumer_release(in.stage_idx, lane_idx, true);
          in.advance();
        }
        continue;
      }
      Mma::zero(acc);
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.consumer_wait(in);
        const StageRef in_stage{smem, in.stage_idx};
        float scale_lo, scale_hi;  // the rows' activation scales, from the stage
        Kernel::template row_scales<Stages>(in_stage, math_wg, math_tid, scale_lo, scale_hi);
        for (bool more = true; more;) {
          tring.consumer_wait(state);
          const StageRef out_stage{smem_transform, state.stage_idx};
          const auto info = Transform::template pass_info<Stages>(out_stage);
          more = info.more != 0;
          const auto operands =
              Mma::template operands<Stages, MmaStages>(in_stage, out_stage, math_wg);
          Mma::fence(tmp);
          warpgroup_arrive();
          Mma::issue(tmp, operands);
          warpgroup_commit_batch();
          warpgroup_wait<0>();
          Mma::fence(tmp);
          __syncwarp();
          tring.consumer_release(state.stage_idx, lane_idx, true);
          state.advance();
          info.template promote<Mma>(acc, tmp, scale_lo, scale_hi);
        }
        ring.consumer_release(in.stage_idx, lane_idx, true);
        in.advance();
      }
      Kernel::epilogue(params, acc, work, math_wg, smem_d);
    }
    if constexpr (Kernel::kTmaStore)
      if (threadIdx.x % 128 == 0) tma_store_drain();
    (void)warp_idx;
  }
};

}  // namespace moegemm::sm90
