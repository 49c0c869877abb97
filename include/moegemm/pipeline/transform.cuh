// The optional transform stage between the TMA ring and the MMA: a warpgroup of its own that
// turns each landed stage into what the MMA reads (FP8 x FP4 expands packed E2M1 weights to
// E4M3 here) in a second ring with its own barrier pair.
//
//   TMA ring (full/empty)        transform ring (tfull/tempty)
//   producer --> transform wg --> math warpgroups
//
// The transform warpgroup (or two: Transform::kNumWarpgroups) consumes the TMA ring like the
// math warpgroups would (waits full[s], each of its warps releases empty[s] once its threads'
// reads are done: 4 arrives a warpgroup), and
// produces the transform ring without transactions: every transform thread writes its share,
// fences the generic -> async proxy (wgmma reads through the async proxy) and arrives on
// tfull[t] (arrive count 128); the math warps release tempty[t] as they would release the TMA
// ring (one arrive per math warp). Kernels without a transform name NoTransform: no warpgroup,
// no ring, no shared memory, no barrier, and the math warpgroups read the TMA ring directly.
//
// A transform policy provides:
//   kEnabled = true, kNumStages (its ring), kNumWarpgroups (1 or 2: the policy gets its thread
//     index over all of them), kNumRegs (setmaxnreg of each),
//   template <typename InStages> using OutStages (its ring's StageLayout),
//   kScratchBytes, init_scratch(scratch, thread): its own shared memory (tables), set up by the
//     transform threads before the CTA's first barrier;
//   kMathReadsInput: false: apply(in, out, thread), one thread's share (of 128) of turning stage
//     `in` into `out`, and the math warpgroups read only the transform ring;
//     true: the math warpgroups read slabs of the TMA ring too (FP8 x FP4: the activations) and
//     release it with the transform (empty[s] counts the transform's 4 warps and every math
//     warp); per landed k-block the policy's stage_scales(...) reads what it needs of the
//     stage besides the operand and run_k_block(...) emits one or more out stages (passes),
//     each carrying its own metadata the MMA reads, and pass_info(out) what the MMA's promotion
//     needs of it (pipeline/fp4_expand_transform.cuh, pipeline/fp4_table_transform.cuh).
#pragma once

#include <stdint.h>

#include <moegemm/pipeline/stage_layout.cuh>
#include <moegemm/ptx/smem.cuh>

namespace moegemm {

struct NoTransform {
  static constexpr bool kEnabled = false;
  static constexpr bool kMathReadsInput = false;
  static constexpr uint32_t kScratchBytes = 0;
  static constexpr uint32_t kNumStages = 0;
  static constexpr uint32_t kNumWarpgroups = 0;
  static constexpr uint32_t kNumRegs = 0;
  template <typename InStages>
  using OutStages = InStages;  // the MMA reads the TMA ring
};

// The trivial transform: copies every slab of a stage unchanged (16 bytes a thread and step),
// so the MMA reads the same bytes from the transform ring. Exists to compile and test the
// transform role of the skeleton (tests/compile/test_compile_only.py).
template <uint32_t kNumStages_ = 2>
struct CopyTransform {
  static constexpr bool kEnabled = true;
  static constexpr bool kMathReadsInput = false;
  static constexpr uint32_t kScratchBytes = 0;
  __device__ __forceinline__ static void init_scratch(uint8_t*, uint32_t) {}
  static constexpr uint32_t kNumStages = kNumStages_;
  static constexpr uint32_t kNumWarpgroups = 1;
  static constexpr uint32_t kNumRegs = 96;
  template <typename InStages>
  using OutStages = typename InStages::template WithStages<kNumStages>;

  template <typename InStages, uint32_t I = 0>
  __device__ __forceinline__ static void apply(const StageRef& in, const StageRef& out,
                                               uint32_t thread) {
    using Out = OutStages<InStages>;
    if constexpr (I < InStages::kNumSlabs) {
      const uint4* src = reinterpret_cast<const uint4*>(InStages::template slab<I>(in));
      uint4* dst = reinterpret_cast<uint4*>(Out::template slab<I>(out));
#pragma unroll 4
      for (uint32_t v = thread; v < InStages::template slab_bytes<I>() / 16; v += 128)
        dst[v] = src[v];
      apply<InStages, I + 1>(in, out, thread);
    }
  }
};

}  // namespace moegemm
