// Where the slabs of a ring's stages live in shared memory: slab-major, each slab (one operand's
// box, or its scales) holding kNumStages consecutive copies of kSlabBytes[i] bytes, the slabs
// one after another from the ring's base. A StageRef names one stage of one ring; the loader,
// transform and MMA policies find their slabs through the layout they were written against.
// Slab sizes must be multiples of 1024 bytes (128B swizzle atoms) to keep every slab aligned.
#pragma once

#include <stdint.h>

namespace moegemm {

struct StageRef {
  uint8_t* base;       // the ring's first byte
  uint32_t stage_idx;  // which stage
};

template <uint32_t kNumStages_, uint32_t... kSlabBytes>
struct StageLayout {
  static constexpr uint32_t kNumStages = kNumStages_;
  static constexpr uint32_t kNumSlabs = sizeof...(kSlabBytes);
  static constexpr uint32_t kStageBytes = (kSlabBytes + ... + 0);
  static constexpr uint32_t kRingBytes = kNumStages * kStageBytes;
  static_assert(((kSlabBytes % 1024 == 0) && ...), "slabs must keep 1024-byte alignment");

  // The same slabs in a ring of another depth (a transform's output ring).
  template <uint32_t kOtherStages>
  using WithStages = StageLayout<kOtherStages, kSlabBytes...>;

  // Bytes of slab I in one stage.
  template <uint32_t I>
  __host__ __device__ static constexpr uint32_t slab_bytes() {
    constexpr uint32_t kBytes[] = {kSlabBytes...};
    return kBytes[I];
  }

  template <uint32_t I>
  __host__ __device__ static constexpr uint32_t slab_offset() {
    if constexpr (I == 0) {
      return 0;
    } else {
      return slab_offset<I - 1>() + kNumStages * slab_bytes<I - 1>();
    }
  }

  template <uint32_t I>
  __device__ __forceinline__ static uint8_t* slab(const StageRef& stage) {
    static_assert(I < kNumSlabs, "no such slab");
    return stage.base + slab_offset<I>() + stage.stage_idx * slab_bytes<I>();
  }
};

}  // namespace moegemm
