// Epilogue that writes a warpgroup's wgmma accumulators straight from registers to global
// memory, adding an optional FP32 C. Bounds-checked rows and columns make M and N tails free.
//
// Accumulator layout of wgmma m64nN (per warpgroup, 128 threads): thread t owns, for each
// 8-column slice j, rows r and r + 8 with r = 16 * (t / 32) + (t % 32) / 4, and the column pair
// 8 * j + 2 * (t % 4) + {0, 1}; acc[4 j + 0..1] is row r, acc[4 j + 2..3] is row r + 8.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace moegemm::sm90 {

template <typename OutT>
__device__ __forceinline__ void store_pair(OutT* ptr, float x, float y);

template <>
__device__ __forceinline__ void store_pair<float>(float* ptr, float x, float y) {
  *reinterpret_cast<float2*>(ptr) = make_float2(x, y);
}

template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* ptr, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(ptr) = __floats2bfloat162_rn(x, y);
}

// Writes one m64 x N accumulator block whose first row is `row0` and first column `col0`.
template <int N, bool kWithC, typename OutT>
__device__ __forceinline__ void store_accumulators(const float* acc, OutT* d, const float* c,
                                                   uint32_t ldd, uint32_t ldc, uint32_t m,
                                                   uint32_t n, uint32_t row0, uint32_t col0) {
  const uint32_t t = threadIdx.x % 128;
  const uint32_t r = row0 + 16 * (t / 32) + (t % 32) / 4;
  const uint32_t col_in_slice = 2 * (t % 4);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const uint32_t col = col0 + 8 * j + col_in_slice;
    if (col >= n) continue;  // n % 8 == 0, so a pair is either fully in or fully out
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t row = r + 8 * half;
      if (row >= m) continue;
      float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
      if constexpr (kWithC) {
        const float2 cv = *reinterpret_cast<const float2*>(c + static_cast<uint64_t>(row) * ldc + col);
        x += cv.x;
        y += cv.y;
      }
      store_pair<OutT>(d + static_cast<uint64_t>(row) * ldd + col, x, y);
    }
  }
}

}  // namespace moegemm::sm90
