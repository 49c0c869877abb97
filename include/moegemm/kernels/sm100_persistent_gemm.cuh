// The persistent, warp-specialized SM100 (tcgen05) GEMM skeleton every SM100 kernel of impls/ is
// a composition of. It owns the warp roles, the TMA ring, the double-buffered tensor-memory
// accumulators, the tcgen05 fences and the teardown; the composition `Kernel` supplies the
// policies (the skeleton derives from it, so the composition answers for the policy's constants
// too: the compile tests' host programs read kUmmaM, Mma, Loader through it):
//   Kernel::Params                       the __grid_constant__ parameter struct,
//   kNumStages                           the TMA ring's depth,
//   Loader                               Stages<kNumStages> (the StageLayout of one stage: the
//                                        slabs that differ), kExpectedBytes (the full barrier's
//                                        transactions), kFillArrivals (1: arrive.expect_tx),
//                                        prefetch(params) and load<Stages>(params, bar, stage,
//                                        work, kb, 0): the TMA boxes of one k-block,
//   Mma, kTmemCols                       Mma::kAccumCols FP32 columns per accumulator; the
//                                        columns to allocate (the accumulators first, then any
//                                        the policy keeps past them),
//   Scheduler, Work                      the tiles (scheduler/): make_scheduler(params), one per
//                                        thread before the roles split, each role walks its copy
//                                        (warp-cooperative schedulers: whole warps, every lane),
//   k_blocks(params), num_k_blocks(k_blocks, work)  k-blocks of a tile: the first read once before
//                                        the roles split, the second per tile,
//   issue_k_block(stage, work, kb, d_tmem, tmem_base)   the MMAs of one landed k-block (lane 0
//                                        of the MMA warp; the skeleton commits after them),
//   kFixesStages, fix_stage(stage, work, kb, lane)      the MMA warp's 32 lanes repair a landed
//                                        stage before lane 0 issues (k-grouped group tails),
//   kFillWarp, fill_stage(params, stage, work, kb, lane)  warp 3 writes part of every stage
//                                        with ordinary stores (FP8 x FP4: the activations'
//                                        scales) and arrives on its full barrier,
//   kEmptyTiles, store_empty_tile(params, work, quadrant)   tiles of no k-block take no
//                                        accumulator: the MMA warp skips them, the epilogue
//                                        stores without tensor memory (k-grouped: C or zeros),
//   epilogue(params, d_tmem, work, quadrant)  the stores of one accumulator (epilogue/).
//
// Warp roles (one CTA per SM, 256 threads = 8 warps):
//   warp 0      TMA producer: walks the schedule, one elected lane arms full[s]
//               (arrive.expect_tx) and issues the loader's boxes of each k-block.
//   warp 1      MMA issuer: walks the schedule; lane 0 issues every tcgen05 instruction of a
//               k-block and the tcgen05.commit that releases its stage (empty[s]), then the
//               commit that hands an accumulator to the epilogue (tmem_full[a]). Lane 0 issues
//               all of them: a commit tracks its own thread's tcgen05 operations. Also
//               initialises the barriers.
//   warp 2      tensor-memory allocator: tcgen05.alloc of kTmemCols columns at start, then
//               relinquish_alloc_permit (a CTA of the next kernel may allocate as soon as this
//               one deallocates), tcgen05.dealloc after the final CTA barrier. The alloc spins
//               while the columns are taken: every config the heuristics emit uses over half of
//               the shared memory, so no second CTA of a kernel shares the SM; a CTA of the
//               previous kernel (PDL) holding columns only delays this one until it exits.
//   warp 3      the policy's fill warp (kFillWarp), else idle (it keeps the epilogue
//               warpgroup aligned to warps 4..7).
//   warps 4..7  epilogue warpgroup: warp 4 + q reads tensor-memory lanes [32 q, 32 q + 32).
// Pipelines:
//   TMA ring (pipeline/ring.cuh), kNumStages stages:
//     full[s]   producer (and fill warp) -> MMA. Arrive count kFullArrivals: the producer's
//               arrive.expect_tx, plus lane 0 of the fill warp; + Loader::kExpectedBytes.
//     empty[s]  MMA -> producer (and fill warp). Arrive count 1: the tcgen05.commit after the
//               stage's tcgen05 operations (their shared-memory reads included).
//   Accumulators, kAccumStages = 2 buffers of Mma::kAccumCols FP32 columns in tensor memory at
//   columns [a kAccumCols, (a + 1) kAccumCols) (the epilogue of tile i overlaps the mainloop of
//   tile i + 1):
//     tmem_full[a]   MMA -> epilogue. Arrive count 1: the tcgen05.commit after a tile's last MMA.
//     tmem_empty[a]  epilogue -> MMA. Arrive count 4: lane 0 of each epilogue warp once its
//                    tcgen05.ld of buffer a completed (tcgen05.wait::ld, fence before sync).
//   tcgen05 fences: after_thread_sync after every wait that precedes tcgen05 work,
//   before_thread_sync before every arrive or CTA barrier that follows it.
// Shared memory: [the loader's stages | full | empty | tmem_full | tmem_empty | TMEM address]
//   = Stages::kRingBytes + (2 kNumStages + 4) x 8 + 16 bytes; slabs 1024-byte aligned as the
//   128B swizzle and the UMMA descriptors' base offset 0 require.
// PDL: barrier set-up and the allocation overlap the previous kernel; global memory (group
//   sizes, offsets, scales) is read only after griddepcontrol.wait.
#pragma once

#include <cutlass/arch/barrier.h>

#include <stdint.h>

#include <moegemm/pipeline/ring.cuh>
#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/pdl.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/ptx/tcgen05.cuh>

// tcgen05 exists on arch- and family-specific targets only (built for plain sm_100, CuTe's
// wrappers would compile to traps): every device pass that sees an SM100 kernel header fails
// here.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM100_ALL) && \
    !defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#error "the SM100 kernels need an arch- or family-specific target (sm_100a / sm_100f)"
#endif

namespace moegemm::sm100 {

// Accumulator buffers in tensor memory, for every SM100 kernel (policies place columns of their
// own past kTmemAccumStages x Mma::kAccumCols).
inline constexpr uint32_t kTmemAccumStages = 2;

template <typename Kernel>
struct PersistentGemm : Kernel {
  using Params = typename Kernel::Params;
  using Work = typename Kernel::Work;
  using Loader = typename Kernel::Loader;
  using Mma = typename Kernel::Mma;
  using Scheduler = typename Kernel::Scheduler;
  static constexpr uint32_t kNumStages = Kernel::kNumStages;
  using Stages = typename Loader::template Stages<kNumStages>;
  using Ring = PipelineRing<kNumStages>;

  static constexpr uint32_t kAccumStages = kTmemAccumStages;
  static constexpr uint32_t kTmemCols = Kernel::kTmemCols;
  static_assert(kTmemCols >= kAccumStages * Mma::kAccumCols, "the accumulators fit");
  static constexpr uint32_t kNumThreads = 256;
  static constexpr uint32_t kFillWarpIdx = 3;
  static constexpr uint32_t kNumEpilogueWarps = 4;
  static constexpr uint32_t kFirstEpilogueWarp = 4;
  // Arrive counts of the barriers (the compile tests recompute them independently).
  static constexpr uint32_t kFullArrivals =
      Loader::kFillArrivals + (Kernel::kFillWarp ? 1 : 0);  // arrive.expect_tx (+ fill warp)
  static constexpr uint32_t kEmptyArrivals = 1;             // one tcgen05.commit
  static constexpr uint32_t kTmemFullArrivals = 1;          // one tcgen05.commit
  static constexpr uint32_t kTmemEmptyArrivals = kNumEpilogueWarps;  // lane 0 of each warp
  static constexpr uint32_t kExpectedBytes = Loader::kExpectedBytes;
  static constexpr uint32_t kBarrierBytes = (2 * kNumStages + 2 * kAccumStages) * sizeof(Barrier);
  static constexpr uint32_t kTmemSlotBytes = 16;
  static constexpr uint32_t kSmemBytes = Stages::kRingBytes + kBarrierBytes + kTmemSlotBytes;
  static_assert(kSmemBytes <= 232448, "SM100 opt-in shared memory per block");

  // The accumulator pipeline: its barriers (after the ring's) and the allocated columns.
  struct Accumulators {
    Barrier* full;
    Barrier* empty;
    uint32_t tmem_base;

    __device__ __forceinline__ uint32_t tmem(const PipelineState<kAccumStages>& a) const {
      return tmem_base + a.stage_idx * Mma::kAccumCols;
    }
  };

  __device__ __forceinline__ static void run(const Params& params) {
    extern __shared__ __align__(1024) uint8_t smem[];
    Barrier* barriers = reinterpret_cast<Barrier*>(smem + Stages::kRingBytes);
    const Ring ring(barriers);
    Barrier* tmem_full = barriers + 2 * kNumStages;
    Barrier* tmem_empty = tmem_full + kAccumStages;
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(tmem_empty + kAccumStages);
    const uint32_t warp = warp_idx_sync();
    const uint32_t lane = threadIdx.x % 32;

    if (warp == 0 && lane == 0) Loader::prefetch(params);
    if (warp == 1 && lane == 0) {
      ring.init(kEmptyArrivals, kFullArrivals);
#pragma unroll
      for (uint32_t a = 0; a < kAccumStages; ++a) {
        tmem_full[a].init(kTmemFullArrivals);
        tmem_empty[a].init(kTmemEmptyArrivals);
      }
      cutlass::arch::fence_barrier_init();
    }
    if (warp == 2) {
      tmem_alloc<kTmemCols>(smem_u32(tmem_slot));
      tmem_relinquish_alloc_permit();
    }
    tcgen05_fence_before_thread_sync();
    __syncthreads();
    tcgen05_fence_after_thread_sync();
    const Accumulators accums{tmem_full, tmem_empty, *tmem_slot};

    // Group sizes, offsets and scales may be written by the previous kernel: read nothing
    // global before this.
    pdl_wait();
    pdl_launch_dependents();
    // Every role walks its own copy of the schedule (warp-cooperative schedulers: whole warps).
    auto scheduler = Kernel::make_scheduler(params);
    const uint32_t k_blocks = Kernel::k_blocks(params);

    if (warp == 0) {
      produce(params, ring, smem, k_blocks, scheduler);
    } else if (warp == 1) {
      issue_mmas(params, ring, accums, smem, lane, k_blocks, scheduler);
    } else if (Kernel::kFillWarp && warp == kFillWarpIdx) {
      if constexpr (Kernel::kFillWarp) fill(params, ring, smem, lane, k_blocks, scheduler);
    } else if (warp >= kFirstEpilogueWarp) {
      store(params, accums, warp - kFirstEpilogueWarp, lane, k_blocks, scheduler);
    }

    // Every MMA has completed (the epilogue waited on its commit) and every tensor-memory load
    // has been waited for: the columns can go.
    tcgen05_fence_before_thread_sync();
    __syncthreads();
    if (warp == 2) {
      tcgen05_fence_after_thread_sync();
      tmem_dealloc<kTmemCols>(accums.tmem_base);
    }
  }

  // The ring's producer side (the TMA warp, the fill warp): every k-block of every tile, once its
  // stage is free: fill_k_block(stage, work, kb), then the stage advances.
  template <typename FillKBlock>
  __device__ __forceinline__ static void fill_stages(const Ring& ring, Scheduler& scheduler,
                                                     uint32_t k_blocks, FillKBlock&& fill_k_block) {
    typename Ring::State stage;
    Work work;
#pragma unroll 1
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
#pragma unroll 1
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.producer_acquire(stage);
        fill_k_block(stage, work, kb);
        stage.advance();
      }
    }
  }

  // Warp 0: one elected lane arms each stage with the loader's bytes and issues its boxes.
  __device__ __forceinline__ static void produce(const Params& params, const Ring& ring,
                                                 uint8_t* smem, uint32_t k_blocks,
                                                 Scheduler scheduler) {
    fill_stages(ring, scheduler, k_blocks,
                [&](const typename Ring::State& stage, const Work& work, uint32_t kb) {
                  if (elect_one()) {
                    ring.producer_commit_bytes(stage, kExpectedBytes);
                    Loader::template load<Stages>(params, ring.full_barrier(stage),
                                                  StageRef{smem, stage.stage_idx}, work, kb, 0);
                  }
                  __syncwarp();
                });
  }

  // Warp 1: per tile, an empty accumulator buffer; per k-block, the landed stage (repaired by
  // all lanes where the policy says so), its MMAs and the commit that frees it; then the commit
  // that hands the accumulator to the epilogue.
  __device__ __forceinline__ static void issue_mmas(const Params& params, const Ring& ring,
                                                    const Accumulators& accums, uint8_t* smem,
                                                    uint32_t lane, uint32_t k_blocks,
                                                    Scheduler scheduler) {
    typename Ring::State stage;
    PipelineState<kAccumStages> accum;
    Work work;
#pragma unroll 1
    while (scheduler.next(work)) {
      const uint32_t num_k_blocks = Kernel::num_k_blocks(k_blocks, work);
      if constexpr (Kernel::kEmptyTiles) {
        if (num_k_blocks == 0) continue;  // no stage, no accumulator
      }
      accums.empty[accum.stage_idx].wait(accum.phase ^ 1);
      tcgen05_fence_after_thread_sync();
      const uint32_t d_tmem = accums.tmem(accum);
#pragma unroll 1
      for (uint32_t kb = 0; kb < num_k_blocks; ++kb) {
        ring.consumer_wait(stage);
        tcgen05_fence_after_thread_sync();
        const StageRef ref{smem, stage.stage_idx};
        if constexpr (Kernel::kFixesStages) Kernel::fix_stage(ref, work, kb, lane);
        if (lane == 0) {
          Kernel::issue_k_block(ref, work, kb, d_tmem, accums.tmem_base);
          umma_commit(smem_u32(&ring.empty[stage.stage_idx]));
        }
        __syncwarp();
        stage.advance();
      }
      if (lane == 0) umma_commit(smem_u32(&accums.full[accum.stage_idx]));
      __syncwarp();
      accum.advance();
    }
  }

  // Warp 3 (kFillWarp): per k-block, once the stage is free, the policy's stores into it; their
  // fence.proxy.async (tcgen05 reads through the async proxy) is the policy's, the warp's
  // convergence and lane 0's arrive on full[s] the skeleton's.
  __device__ __forceinline__ static void fill(const Params& params, const Ring& ring, uint8_t* smem,
                                              uint32_t lane, uint32_t k_blocks,
                                              Scheduler scheduler) {
    fill_stages(ring, scheduler, k_blocks,
                [&](const typename Ring::State& stage, const Work& work, uint32_t kb) {
                  Kernel::fill_stage(params, StageRef{smem, stage.stage_idx}, work, kb, lane);
                  __syncwarp();
                  if (lane == 0) ring.producer_arrive(stage);
                });
  }

  // Warps 4..7: per tile, the full accumulator, the policy's stores of this warp's quadrant,
  // and the release of the buffer once its tensor-memory loads completed.
  __device__ __forceinline__ static void store(const Params& params, const Accumulators& accums,
                                               uint32_t quadrant, uint32_t lane, uint32_t k_blocks,
                                               Scheduler scheduler) {
    PipelineState<kAccumStages> accum;
    Work work;
#pragma unroll 1
    while (scheduler.next(work)) {
      if constexpr (Kernel::kEmptyTiles) {
        if (Kernel::num_k_blocks(k_blocks, work) == 0) {
          Kernel::store_empty_tile(params, work, quadrant);
          continue;
        }
      }
      accums.full[accum.stage_idx].wait(accum.phase);
      tcgen05_fence_after_thread_sync();
      Kernel::epilogue(params, accums.tmem(accum), work, quadrant);
      tcgen05_fence_before_thread_sync();
      if (lane == 0) accums.empty[accum.stage_idx].arrive();
      accum.advance();
    }
  }
};

}  // namespace moegemm::sm100
