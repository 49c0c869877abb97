// Epilogue that writes a warpgroup's wgmma accumulators straight from registers to global
// memory through an epilogue functor (epilogue/functors.cuh). Bounds-checked rows and columns
// make M and N tails free.
//
// Accumulator layout of wgmma m64nN (per warpgroup, 128 threads): thread t owns, for each
// 8-column slice j, rows r and r + 8 with r = 16 * (t / 32) + (t % 32) / 4, and the column pair
// 8 * j + 2 * (t % 4) + {0, 1}; acc[4 j + 0..1] is row r, acc[4 j + 2..3] is row r + 8.
//
// BF16 out through a functor that reads no memory: the four lanes of a quad (same rows,
// t % 4 = 0..3) hold 4-byte pairs of every slice. Over four slices they transpose those pairs
// (two shuffle rounds), so each lane ends with one whole slice, 8 columns of one row, and
// stores it as 16 bytes: a quarter of the store instructions, each row segment 64 contiguous
// bytes instead of 16 (the 4-byte form measured ~3 bytes per clock per SM at the end of a
// decode kernel).
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>

namespace moegemm::sm90 {

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// x[i] of quad lane q holds slice i's pair q; afterwards x[p] holds slice q's pair p. Round one
// swaps across lane bit 0 the entries whose index bit 0 differs from the lane's, round two the
// same over bit 1. Every lane of the warp must call it (full-mask shuffles).
__device__ __forceinline__ void transpose_quad(uint32_t (&x)[4], uint32_t q) {
  const bool odd = (q & 1) != 0, high = (q & 2) != 0;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? x[2 * k] : x[2 * k + 1], 1);
    if (odd) x[2 * k] = got;
    else x[2 * k + 1] = got;
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint32_t got = __shfl_xor_sync(0xffffffffu, high ? x[k] : x[k + 2], 2);
    if (high) x[k] = got;
    else x[k + 2] = got;
  }
}

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

// Writes one m64 x N accumulator block whose first row is `row0` and first column `col0`:
// rows below m and columns below n, D with row stride ldd.
template <int N, typename OutT, typename Epilogue>
__device__ __forceinline__ void store_accumulators(const float* acc, OutT* d, uint32_t ldd,
                                                   uint32_t m, uint32_t n, uint32_t row0,
                                                   uint32_t col0, const Epilogue& epilogue) {
  const uint32_t t = threadIdx.x % 128;
  const uint32_t r = row0 + 16 * (t / 32) + (t % 32) / 4;
  const uint32_t col_in_slice = 2 * (t % 4);
  // Slices stored 16 bytes per lane (groups of four); the rest, if any, in pairs below.
  constexpr int kWideSlices =
      !Epilogue::kReadsMemory && std::is_same_v<OutT, __nv_bfloat16> ? N / 32 * 4 : 0;
#pragma unroll
  for (int j0 = 0; j0 < kWideSlices; j0 += 4) {
    // The quad's slice: n % 8 == 0, so its 8 columns are all inside N or all past it. Rows
    // and columns are 16-byte aligned: col0 and N are multiples of 8, ldd * 2 of 16 bytes.
    const uint32_t col = col0 + 8 * (j0 + t % 4);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t row = r + 8 * half;
      uint32_t x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo = acc[4 * (j0 + i) + 2 * half], hi = acc[4 * (j0 + i) + 2 * half + 1];
        // The pair's own coordinates (before the transpose moves it to another lane).
        epilogue(lo, hi, row, col0 + 8 * (j0 + i) + col_in_slice);
        x[i] = pack_bf16x2(lo, hi);
      }
      transpose_quad(x, t % 4);
      if (row < m && col < n) {
        *reinterpret_cast<uint4*>(d + static_cast<uint64_t>(row) * ldd + col) =
            make_uint4(x[0], x[1], x[2], x[3]);
      }
    }
  }
#pragma unroll
  for (int j = kWideSlices; j < N / 8; ++j) {
    const uint32_t col = col0 + 8 * j + col_in_slice;
    if (col >= n) continue;  // n % 8 == 0, so a pair is either fully in or fully out
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t row = r + 8 * half;
      if (row >= m) continue;
      float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
      epilogue(x, y, row, col);
      store_pair<OutT>(d + static_cast<uint64_t>(row) * ldd + col, x, y);
    }
  }
}

}  // namespace moegemm::sm90
