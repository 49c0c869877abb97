// Kernel parameters shared by the host launcher (csrc/, compiled by g++) and the device kernel
// (include/moegemm/impls/, compiled by nvcc). Passed by value as one `__grid_constant__` argument,
// so the TMA descriptors live in parameter space where `cp.async.bulk.tensor` can read them.
// Plain C++ with CUDA's driver types only: no torch, no CuTe.
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// D[m, n] = sum_k A[m, k] * B[n, k] (+ C[m, n]); A and B K-major BF16.
struct Sm90Bf16GemmParams {
  CUtensorMap tma_a;  // A [M, K]: dims {K, M}, box {BLOCK_K, BLOCK_M}, 128B swizzle
  CUtensorMap tma_b;  // B [N, K]: dims {K, N}, box {BLOCK_K, BLOCK_N}, 128B swizzle
  void* d;            // D [M, N], row stride ldd elements; BF16 or FP32 by template
  const float* c;     // C [M, N] FP32, row stride ldc elements; nullptr when absent
  uint32_t m, n, k;
  uint32_t ldd, ldc;
};

}  // namespace moegemm
