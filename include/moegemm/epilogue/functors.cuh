// Epilogue functors: what happens to a pair of FP32 results (two adjacent columns of one row)
// between the accumulators and the store. Both store paths apply them, the register stores
// (epilogue/sm90_register_store.cuh) and the TMA stores (epilogue/sm90_tma_store.cuh), at the
// absolute (row, col) of the pair's first element, only for pairs inside the output.
//   Identity: nothing (kReadsMemory = false lets a store path take its widest form).
//   AddC:     += C[row, col..col+1], FP32 C with row stride ldc.
//   RowScale: (x + bias[col]) * scale[row]: the fused MoE layer's second GEMM (the expert's
//             bias, then the token's routing weight), each optional.
// The fused MoE layer's first GEMM turns gate/up pairs into one column: the activations below
// and the SwiGLU stores (epilogue/sm90_swiglu_store.cuh).
#pragma once

#include <stdint.h>

namespace moegemm {

// Config::kMoeEpilogue: what a BF16 grouped kernel does between its accumulators and D.
enum MoeEpilogue : uint32_t {
  kMoeNone = 0,        // Identity or AddC (Config::kWithC)
  kMoeSwiGluSilu = 1,  // silu(gate + b) * (up + b), D has N / 2 columns
  kMoeSwiGluOai = 2,   // gpt-oss: gate <= 7, up in [-7, 7], (up + 1) * gate * sigmoid(1.702 gate)
  kMoeRowScale = 3,    // RowScale
};

template <uint32_t kKind>
struct SwiGlu;

template <>
struct SwiGlu<kMoeSwiGluSilu> {
  __device__ __forceinline__ static float apply(float gate, float up) {
    return gate / (1.0f + __expf(-gate)) * up;
  }
};

template <>
struct SwiGlu<kMoeSwiGluOai> {
  __device__ __forceinline__ static float apply(float gate, float up) {
    gate = fminf(gate, 7.0f);
    up = fminf(fmaxf(up, -7.0f), 7.0f);
    return (up + 1.0f) * gate / (1.0f + __expf(-1.702f * gate));
  }
};

struct RowScale {
  static constexpr bool kReadsMemory = true;
  const float* bias;   // [N] of the tile's group, or nullptr
  const float* scale;  // [rows], or nullptr: bias only

  __device__ __forceinline__ void operator()(float& x, float& y, uint32_t row,
                                             uint32_t col) const {
    if (bias != nullptr) {
      const float2 b = *reinterpret_cast<const float2*>(bias + col);
      x += b.x;
      y += b.y;
    }
    if (scale != nullptr) {
      const float s = scale[row];
      x *= s;
      y *= s;
    }
  }
};

// RowScale for the TMA-store path, which applies the functor to every pair of the tile: pairs
// at or past column n (the last n-block's tail, clipped by TMA) read no bias.
struct RowScaleInN {
  static constexpr bool kReadsMemory = true;
  RowScale row_scale;
  uint32_t n;

  __device__ __forceinline__ void operator()(float& x, float& y, uint32_t row,
                                             uint32_t col) const {
    if (col < n) row_scale(x, y, row, col);
  }
};

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
