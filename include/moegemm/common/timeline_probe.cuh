// Timeline probe: stage variant bit 3 (timing builds only, scripts/timeline.py). Each role of a
// CTA records a few global-timer stamps (ns, comparable across SMs) and SM-clock stamps
// (cycles, exact within the CTA) at fixed points of its life and prints them once at exit:
//   producer warp, lane 0:  "TLP <cta> <entry> <ready> <first tile> <last issue> <tiles>"
//   first math warpgroup:   "TLM <cta> <entry> <first data> <last mainloop end> <exit> <tiles>"
//     ready: barriers initialised, the CTA synchronised, the PDL wait passed and the scheduler
//     constructed; first tile: the scheduler has resolved the CTA's first tile (layout integers
//     read); first data: the first full-barrier wait returned; exit: stores issued and, for
//     TMA stores, drained. The experimental split-tail loop records no stamps.
// Production kernels never define the bit: every call below compiles to nothing there.
#pragma once

#include <stdint.h>

#include <moegemm/common/stage_variant.h>

namespace moegemm {

struct TimelineProbe {
  static constexpr bool kEnabled = (MOEGEMM_STAGE_VARIANT & 8) != 0;
  uint64_t ns[4] = {0, 0, 0, 0};
  uint64_t clk[4] = {0, 0, 0, 0};
  uint32_t tiles = 0;

  __device__ __forceinline__ void stamp(uint32_t slot) {
    if constexpr (kEnabled) {
      uint64_t t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      ns[slot] = t;
      clk[slot] = clock64();
    }
  }
  // Stamps a slot only the first time (first tile, first data).
  __device__ __forceinline__ void stamp_once(uint32_t slot) {
    if constexpr (kEnabled) {
      if (ns[slot] == 0) stamp(slot);
    }
  }
  __device__ __forceinline__ void count_tile() {
    if constexpr (kEnabled) ++tiles;
  }
  // role: 'P' (producer) or 'M' (math).
  __device__ __forceinline__ void print(char role) const {
    if constexpr (kEnabled) {
      printf("TL%c %u %llu %llu %llu %llu %llu %llu %llu %llu %u\n", role, blockIdx.x,
             static_cast<unsigned long long>(ns[0]), static_cast<unsigned long long>(ns[1]),
             static_cast<unsigned long long>(ns[2]), static_cast<unsigned long long>(ns[3]),
             static_cast<unsigned long long>(clk[0]), static_cast<unsigned long long>(clk[1]),
             static_cast<unsigned long long>(clk[2]), static_cast<unsigned long long>(clk[3]),
             tiles);
    }
  }
};

}  // namespace moegemm
