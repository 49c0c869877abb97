// The fused MoE layer's intermediate, BF16 [rows, cols] -> FP8 E4M3 [rows, cols] with FP32
// scales [rows, ceil(cols / 128)] (moe/fp8_rows.cuh; powers of two with kUe8m0, for the SM100
// kernel), for the second GEMM of MXFP4 experts.
// Rows past *row_bound (the first GEMM's last written row: offs[E - 1]) are skipped when
// row_bound is given; in the masked layout (group_rows = max_m) the rows past each group's
// count, so a decode step quantizes the rows it holds, not E x max_m. kThreads / 16 blocks at
// a time per CTA, grid-stride.
#pragma once

#include <stdint.h>

#include <moegemm/common/moe_params.h>
#include <moegemm/moe/fp8_rows.cuh>
#include <moegemm/ptx/pdl.cuh>

namespace moegemm::moe {

// Whether `row` of the masked layout lies inside its group's count (clamped to the group).
__device__ __forceinline__ bool in_group(const MoeQuantizeParams& p, uint64_t row) {
  const int32_t count = min(max(p.row_bound[row / p.group_rows], 0),
                            static_cast<int32_t>(p.group_rows));
  return row % p.group_rows < static_cast<uint32_t>(count);
}

template <uint32_t kThreads, bool kUe8m0>
__device__ __forceinline__ void quantize_rows(const MoeQuantizeParams& p) {
  const uint32_t blocks = (p.cols + kFp8Block - 1) / kFp8Block;
  uint32_t rows = p.rows;
  if (p.row_bound != nullptr && p.group_rows == 0)
    rows = min(rows, static_cast<uint32_t>(max(*p.row_bound, 0)));
  const uint64_t items = uint64_t{rows} * blocks;
  const uint32_t per_cta = kThreads / 16;
  const auto* src = static_cast<const __nv_bfloat16*>(p.src);
  auto* dst = static_cast<uint8_t*>(p.dst);
  // Whole warps iterate together (the shuffles), so the loop bound is per warp pair.
  for (uint64_t base = uint64_t{blockIdx.x} * per_cta; base < items;
       base += uint64_t{gridDim.x} * per_cta) {
    const uint64_t item = base + threadIdx.x / 16;
    bool active = item < items;
    const uint64_t row = active ? item / blocks : 0;
    const uint32_t block = active ? static_cast<uint32_t>(item % blocks) : 0;
    if (active && p.group_rows != 0 && p.row_bound != nullptr) active = in_group(p, row);
    quantize_block<kUe8m0>(src + row * p.ld_src, dst + row * p.cols,
                           p.scales + row * blocks + block, p.cols, block, active);
  }
}

template <uint32_t kThreads, bool kUe8m0 = false>
__global__ void __launch_bounds__(kThreads) moe_quantize_rows_kernel(
    const __grid_constant__ MoeQuantizeParams params) {
  pdl_wait();
  pdl_launch_dependents();
  quantize_rows<kThreads, kUe8m0>(params);
}

}  // namespace moegemm::moe
