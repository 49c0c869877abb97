// Epilogue functors: what happens to a pair of FP32 results (two adjacent columns of one row)
// between the accumulators and the store. Both store paths apply them, the register stores
// (epilogue/sm90_register_store.cuh) and the TMA stores (epilogue/sm90_tma_store.cuh), at the
// absolute (row, col) of the pair's first element, only for pairs inside the output.
//   Identity: nothing (kReadsMemory = false lets a store path take its widest form).
//   AddC:     += C[row, col..col+1], FP32 C with row stride ldc.
// The fused MoE layer will add SwiGLU (gate/up pairs -> one column) and a per-row scale here.
#pragma once

#include <stdint.h>

namespace moegemm {

struct Identity {
  static constexpr bool kReadsMemory = false;
  __device__ __forceinline__ void operator()(float&, float&, uint32_t, uint32_t) const {}
};

struct AddC {
  static constexpr bool kReadsMemory = true;
  const float* c;
  uint32_t ldc;

  __device__ __forceinline__ void operator()(float& x, float& y, uint32_t row,
                                             uint32_t col) const {
    const float2 cv = *reinterpret_cast<const float2*>(c + static_cast<uint64_t>(row) * ldc + col);
    x += cv.x;
    y += cv.y;
  }
};

}  // namespace moegemm
