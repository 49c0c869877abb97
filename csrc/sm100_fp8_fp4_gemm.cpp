// Parameter filling of the SM100 FP8 x FP4 kernel (include/moegemm/impls/
// sm100_fp8_fp4_grouped_gemm.cuh, Sm100Fp8Fp4GemmParams): E4M3 activations with FP32
// power-of-two scales per 128 of K, MXFP4 weights in the SM100 preparation
// (prepare_mxfp4_weights(..., arch="sm_100f")), dense or m-grouped, BF16 out. Launch shape,
// TMA encoding, launch and bindings are the generic launcher's (launcher.h).
// Compiled (host side) and statically checked; the kernel has not run on hardware.
//
// The weights' codes go through CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B (CUDA 12.8+ driver API):
// 16 packed 4-bit codes in global memory land as 16 bytes in shared memory, the unpacked E2M1
// layout tcgen05.mma kind::mxf8f6f4 reads; it needs the row length (Kp) a multiple of 128
// codes, row strides a multiple of 32 bytes and a 32-byte aligned base, which the preparation's
// padding and torch's allocations give.
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <stdexcept>
#include <string>

#include "launcher.h"
#include "moegemm/common/sm100_fp8_fp4_params.h"

namespace moegemm {
namespace {

struct Sm100Fp8Fp4Gemm {
  using Params = Sm100Fp8Fp4GemmParams;
  static constexpr const char* kName = "Sm100Fp8Fp4GemmLauncher";
  // a, b, d, sfb (TMA operands) and sfa (read in 4-byte words).
  static constexpr size_t kNumAlignedPointers = 5;
  static constexpr const char* kDoc =
      "Launches sm100_fp8_fp4_grouped_gemm (dense or m-grouped; E4M3 activations with FP32 "
      "power-of-two scales per 128 of K, MXFP4 weights in the SM100 preparation) with the kernel "
      "and its launch shape bound; keeps `kernel` alive. One CTA per tile, block_k and block_n "
      "128, register stores. Compiled and statically checked, not run on hardware.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "group_info_ptr", "rows", "m", "n", "k",
      "num_groups", "lda", "ldb", "ldb_group", "ldd", "sfa_stride_group", "sfa_stride_row",
      "sfa_stride_kb", "sfa_group_rows", "sfb_stride_group"};
  static constexpr const char* kCallDoc =
      "D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D BF16. "
      "b the prepared codes [G, N, Kp/2] (ldb, ldb_group in bytes, multiples of 32), sfb the "
      "prepared scale words [G, Kp/128, Np] (sfb_stride_group in words), a strides in bytes, ldd "
      "in elements, sfa strides in floats (as Sm90Fp8Fp4GemmLauncher). An empty output launches "
      "nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, stream, /) -> bool: the call "
      "with these integers bound for CUDA device `device` (checked here).";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) {
    if (shape.cluster_m != 1 || shape.cluster_n != 1 || shape.block_k != 128 ||
        shape.block_n != 128 || shape.block_m % 32 != 0 || shape.block_m > 128 ||
        shape.store_d.present()) {
      throw std::invalid_argument(
          std::string(kName) + ": one CTA per tile, block_k and block_n 128, block_m a multiple "
          "of 32 up to 128, register stores; got block " + std::to_string(shape.block_m) + "x" +
          std::to_string(shape.block_n) + "x" + std::to_string(shape.block_k) + ", cluster " +
          std::to_string(shape.cluster_m) + "x" + std::to_string(shape.cluster_n));
    }
  }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t group_info_ptr, int64_t rows, int64_t m, int64_t n, int64_t k,
                   int64_t num_groups, int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                   int64_t sfa_stride_group, int64_t sfa_stride_row, int64_t sfa_stride_kb,
                   int64_t sfa_group_rows, int64_t sfb_stride_group) {
    params.m = checked_u32(m, "m");
    params.n = checked_u32(n, "n");
    params.k = checked_u32(k, "k");
    params.num_groups = checked_u32(num_groups, "num_groups");
    params.ldd = checked_u32(ldd, "ldd");
    params.rows = checked_u32(rows, "rows");
    if (params.k % 32 != 0) throw std::invalid_argument(std::string(kName) + ": k % 32 != 0");
    if (sfa_stride_group < 0 || sfb_stride_group < 0 || ldb_group < 0) {
      throw std::invalid_argument(std::string(kName) + ": negative group stride");
    }
    params.sfa_stride_group = static_cast<uint64_t>(sfa_stride_group);
    params.sfa_stride_row = checked_u32(sfa_stride_row, "sfa_stride_row");
    params.sfa_stride_kb = checked_u32(sfa_stride_kb, "sfa_stride_kb");
    params.sfa_group_rows = checked_u32(sfa_group_rows, "sfa_group_rows");
    if (params.rows == 0 || params.n == 0 || params.num_groups == 0 || params.k == 0) return false;

    const uint64_t kp = (uint64_t{params.k} + 127) / 128 * 128;
    const uint64_t np = (uint64_t{params.n} + 127) / 128 * 128;
    const uint32_t ldb_bytes = checked_u32(ldb, "ldb");
    if (ldb_bytes % 32 != 0 || ldb_bytes < kp / 2 || static_cast<uint64_t>(ldb_group) % 32 != 0) {
      throw std::invalid_argument(std::string(kName) + ": b rows must hold Kp / 2 bytes on a "
                                  "32-byte stride (prepare_mxfp4_weights(..., arch=\"sm_100f\"))");
    }
    const uint64_t m_blocks =
        (uint64_t{params.rows} + shape.block_m - 1) / shape.block_m + params.num_groups;
    check_tile_count(m_blocks * ((params.n + shape.block_n - 1) / shape.block_n),
                     static_cast<uint64_t>(shape.num_blocks));
    tma.add(params.tma_a, tma_view_2d(as_ptr(a_ptr), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1,
                                      params.rows, params.k, checked_u32(lda, "lda"),
                                      shape.load_a));
    // Codes: dims in 4-bit elements, strides in bytes (elem_bytes 1 with byte strides).
    tma.add(params.tma_b, tma_view_3d(as_ptr(b_ptr), CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B, 1,
                                      params.num_groups, params.n, kp, ldb_bytes,
                                      static_cast<uint64_t>(ldb_group), shape.load_b));
    tma.add(params.tma_sfb, tma_view_3d(as_ptr(sfb_ptr), CU_TENSOR_MAP_DATA_TYPE_UINT32, 4,
                                        params.num_groups, kp / 128, np, np,
                                        static_cast<uint64_t>(sfb_stride_group),
                                        shape.load_sfb));
    params.d = as_ptr(d_ptr);
    params.sfa = static_cast<const float*>(as_ptr(sfa_ptr));
    params.group_info = static_cast<const int32_t*>(as_ptr(group_info_ptr));
    params.bias = nullptr;
    params.row_scale = nullptr;
    return true;
  }
};

// The same kernel built with a Config::kMoeEpilogue (the fused MoE layer: SwiGLU or RowScale on
// swapped tiles), plus the FP32 bias [G, n] and row-scale pointers; the call order of
// Sm90Fp8Fp4MoeGemmLauncher, so the layer binds either the same way.
struct Sm100Fp8Fp4MoeGemm {
  using Params = Sm100Fp8Fp4GemmParams;
  static constexpr const char* kName = "Sm100Fp8Fp4MoeGemmLauncher";
  static constexpr size_t kNumAlignedPointers = 5;  // a, b, d, sfb (TMA) and sfa
  static constexpr const char* kDoc =
      "Launches sm100_fp8_fp4_grouped_gemm built with a MoE epilogue (the fused layer's SwiGLU or "
      "RowScale on swapped tiles), Sm100Fp8Fp4GemmLauncher's call plus the FP32 bias [G, n] and "
      "row-scale pointers (0 when absent), in Sm90Fp8Fp4MoeGemmLauncher's pointer order. Compiled "
      "and statically checked, not run on hardware.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "bias_ptr", "row_scale_ptr",
      "group_info_ptr", "rows", "m", "n", "k", "num_groups", "lda", "ldb", "ldb_group", "ldd",
      "sfa_stride_group", "sfa_stride_row", "sfa_stride_kb", "sfa_group_rows", "sfb_stride_group"};
  static constexpr const char* kCallDoc =
      "D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D BF16. "
      "b the prepared codes [G, N, Kp/2] (ldb, ldb_group in bytes, multiples of 32), sfb the "
      "prepared scale words [G, Kp/128, Np] (sfb_stride_group in words), a strides in bytes, ldd "
      "in elements, sfa strides in floats (as Sm90Fp8Fp4GemmLauncher). An empty output launches "
      "nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr, group_info_ptr, "
      "stream, /) -> bool: the call with these integers bound for CUDA device `device`.";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) { Sm100Fp8Fp4Gemm::check_shape(shape); }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t bias_ptr, uint64_t row_scale_ptr, uint64_t group_info_ptr,
                   int64_t rows, int64_t m, int64_t n, int64_t k, int64_t num_groups,
                   int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                   int64_t sfa_stride_group, int64_t sfa_stride_row, int64_t sfa_stride_kb,
                   int64_t sfa_group_rows, int64_t sfb_stride_group) {
    if (!Sm100Fp8Fp4Gemm::fill(shape, params, tma, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr,
                               group_info_ptr, rows, m, n, k, num_groups, lda, ldb, ldb_group,
                               ldd, sfa_stride_group, sfa_stride_row, sfa_stride_kb,
                               sfa_group_rows, sfb_stride_group)) {
      return false;
    }
    params.bias = static_cast<const float*>(as_ptr(bias_ptr));
    params.row_scale = static_cast<const float*>(as_ptr(row_scale_ptr));
    return true;
  }
};

}  // namespace

void register_sm100_fp8_fp4_gemm(pybind11::module_& m) {
  register_launcher<Sm100Fp8Fp4Gemm>(m);
  register_launcher<Sm100Fp8Fp4MoeGemm>(m);
}

}  // namespace moegemm
