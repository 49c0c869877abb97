// Global-memory stores the epilogues issue by hand.
#pragma once

#include <stdint.h>

namespace moegemm {

// A predicated 4-byte global store: one instruction under a predicate, where a plain `if` costs
// a branch and its reconvergence around every store.
__device__ __forceinline__ void store_b32_if(void* ptr, uint32_t value, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p st.global.b32 [%0], %1;\n}\n" ::"l"(ptr),
      "r"(value), "r"(static_cast<uint32_t>(pred))
      : "memory");
}

}  // namespace moegemm
