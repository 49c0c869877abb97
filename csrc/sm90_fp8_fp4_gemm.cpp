// Parameter filling of the FP8 x FP4 kernels (include/moegemm/impls/sm90_fp8_fp4_grouped_gemm.cuh
// and its decode twin sm90_fp8_fp4_swap_ab_gemm.cuh, one Sm90Fp8Fp4GemmParams): E4M3 activations with FP32 scales per 128 of K, MXFP4 weights (packed
// E2M1 codes, UE8M0 scales per 32 of K), dense or m-grouped, BF16 out. Launch shape, TMA
// encoding, launch and bindings are the generic launcher's (launcher.h).
//
// The scales are not TMA operands: the kernel's producer warp copies each k-block's scales into
// the stage with cp.async, with the strides given here (sfa in any layout, row-major or
// DeepGEMM's MN-major one; sfb rows of K/32 bytes, which TMA could not describe for K = 2880).
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <stdexcept>
#include <string>

#include "launcher.h"
#include "moegemm/common/sm90_fp8_fp4_params.h"

namespace moegemm {
namespace {

constexpr CUtensorMapDataType kBytes = CU_TENSOR_MAP_DATA_TYPE_UINT8;

// kTable: the prepared layout (python/moegemm/api/mxfp4_weights.py), read by the table kernel:
// b the thread-ordered codes [G, N, Kp / 2] (K padded to 128), rows back to back, each 64-row
// block's k-blocks one after another as 4096 contiguous bytes: a 5-D view {256, 16, KB, N / 64,
// G} whose box {256, 16, 1, blocks, 1} is the config's (256, 16 blocks); sfb the offsets
// words int32 [G, 2 KB, N] (sfb_stride_group bytes a group, sfb_stride_row a plane row), loaded
// by TMA too.
template <bool kTable>
struct Sm90Fp8Fp4GemmOf {
  using Params = Sm90Fp8Fp4GemmParams;
  static constexpr int64_t kBlockBytes = 4096;  // a prepared 64-row block's k-block of codes

  // The prepared codes as {256, 16, KB, blocks, G} bytes: the config's box (256, 16 n) becomes
  // {256, 16, 1, n, 1}, n whole 4096-byte blocks of one k-block, each one contiguous read.
  static TmaView block_view(void* ptr, uint64_t groups, uint64_t blocks, uint64_t k_blocks,
                            uint64_t group_stride, const TmaBox& box) {
    TmaView view;
    view.ptr = ptr;
    view.dtype = kBytes;
    view.rank = 5;
    view.dims[0] = 256;
    view.dims[1] = kBlockBytes / 256;
    view.dims[2] = k_blocks;
    view.dims[3] = blocks;
    view.dims[4] = groups;
    view.strides_bytes[0] = 256;
    view.strides_bytes[1] = kBlockBytes;
    view.strides_bytes[2] = kBlockBytes * k_blocks;
    view.strides_bytes[3] = group_stride;
    view.box[0] = 256;
    view.box[1] = kBlockBytes / 256;
    view.box[2] = 1;
    view.box[3] = static_cast<uint32_t>(box.outer / 16);
    view.box[4] = 1;
    view.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
    return view;
  }
  static constexpr const char* kName =
      kTable ? "Sm90Fp8Fp4TableGemmLauncher" : "Sm90Fp8Fp4GemmLauncher";
  // a, b, d (TMA operands) and sfa, sfb (copied in aligned words by the producer).
  static constexpr size_t kNumAlignedPointers = 5;
  static constexpr const char* kDoc = kTable ?
      "Launches sm90_fp8_fp4_swap_ab_gemm on prepared weights (prepare_mxfp4_weights: b the "
      "thread-ordered codes, rows Kp / 2 bytes apart; sfb the offsets words int32 [G, 2 KB, N]), "
      "with the kernel and its launch shape bound; keeps `kernel` alive. Arguments as "
      "Sm90Fp8Fp4GemmLauncher's, sfb strides in bytes (group, plane row)." :
      "Launches sm90_fp8_fp4_grouped_gemm (dense or m-grouped; E4M3 activations with FP32 scales "
      "per 128 of K, MXFP4 weights) with the kernel and its launch shape bound; keeps `kernel` "
      "alive. One CTA per tile (cluster_m = cluster_n = 1), block_k 128.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "group_info_ptr", "rows", "m", "n", "k",
      "num_groups", "lda", "ldb", "ldb_group", "ldd", "sfa_stride_group", "sfa_stride_row",
      "sfa_stride_kb", "sfa_group_rows", "sfb_stride_group", "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D BF16. "
      "a/b strides in bytes (b packed, K/2 bytes a row), ldd in elements, sfa strides in floats "
      "(sfa[row] at g * stride_group + (row - g * group_rows) * stride_row + kb * stride_kb), sfb "
      "strides in bytes. An empty output launches nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, stream, /) -> bool: the call "
      "with these integers bound for CUDA device `device` (checked here).";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) {
    // block_m: 64 rows per math warpgroup, or the decode kernels' 8..160 tokens.
    if (shape.cluster_m != 1 || shape.cluster_n != 1 || shape.block_k != 128 ||
        shape.block_n % 16 != 0 || shape.block_m % 8 != 0) {
      throw std::invalid_argument(
          std::string(kName) + ": one CTA per tile, block_k 128, block_m a multiple of 8 and "
          "block_n of 16; got block " + std::to_string(shape.block_m) + "x" +
          std::to_string(shape.block_n) + "x" + std::to_string(shape.block_k) + ", cluster " +
          std::to_string(shape.cluster_m) + "x" + std::to_string(shape.cluster_n));
    }
  }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t group_info_ptr, int64_t rows, int64_t m, int64_t n, int64_t k,
                   int64_t num_groups, int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                   int64_t sfa_stride_group, int64_t sfa_stride_row, int64_t sfa_stride_kb,
                   int64_t sfa_group_rows, int64_t sfb_stride_group, int64_t sfb_stride_row) {
    return fill_with(shape, params, tma, false, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, 0, 0,
                     group_info_ptr, rows, m, n, k, num_groups, lda, ldb, ldb_group, ldd,
                     sfa_stride_group, sfa_stride_row, sfa_stride_kb, sfa_group_rows,
                     sfb_stride_group, sfb_stride_row);
  }

  // fill, and for the convert-ahead kernel (prepared weights) tma_b on the E4M3 copy w8
  // [G, N, Kp] (the config's box: 128 bytes x block_n rows, 128B swizzle), the codes and the
  // flags as plain pointers.
  static bool fill_with(const LaunchShape& shape, Params& params, TmaList& tma,
                        bool convert_ahead, uint64_t a_ptr,
                        uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                        uint64_t w8_ptr, uint64_t ready_ptr, uint64_t group_info_ptr,
                        int64_t rows, int64_t m, int64_t n, int64_t k, int64_t num_groups,
                        int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                        int64_t sfa_stride_group, int64_t sfa_stride_row, int64_t sfa_stride_kb,
                        int64_t sfa_group_rows, int64_t sfb_stride_group, int64_t sfb_stride_row) {
    params.m = checked_u32(m, "m");
    params.n = checked_u32(n, "n");
    params.k = checked_u32(k, "k");
    params.num_groups = checked_u32(num_groups, "num_groups");
    params.ldd = checked_u32(ldd, "ldd");
    params.rows = checked_u32(rows, "rows");
    if (params.k % 32 != 0) throw std::invalid_argument(std::string(kName) + ": k % 32 != 0");
    if (sfa_stride_group < 0 || sfb_stride_group < 0) {
      throw std::invalid_argument(std::string(kName) + ": negative scale group stride");
    }
    params.sfa_stride_group = static_cast<uint64_t>(sfa_stride_group);
    params.sfa_stride_row = checked_u32(sfa_stride_row, "sfa_stride_row");
    params.sfa_stride_kb = checked_u32(sfa_stride_kb, "sfa_stride_kb");
    params.sfa_group_rows = checked_u32(sfa_group_rows, "sfa_group_rows");
    params.sfb_stride_group = static_cast<uint64_t>(sfb_stride_group);
    params.sfb_stride_row = checked_u32(sfb_stride_row, "sfb_stride_row");
    if (params.rows == 0 || params.n == 0 || params.num_groups == 0 || params.k == 0) return false;

    const uint64_t m_blocks =
        (uint64_t{params.rows} + shape.block_m - 1) / shape.block_m + params.num_groups;
    check_tile_count(m_blocks * ((params.n + shape.block_n - 1) / shape.block_n),
                     static_cast<uint64_t>(shape.num_blocks));
    tma.add(params.tma_a, tma_view_2d(as_ptr(a_ptr), kBytes, 1, params.rows, params.k,
                                      checked_u32(lda, "lda"), shape.load_a));
    // The prepared codes are read to Kp (whole thread-ordered k-blocks, zero codes past K).
    const uint32_t k_blocks = (params.k + 127) / 128;
    if constexpr (kTable) {
      // The codes' box: whole 4096-byte blocks, or for the convert-ahead kernel one 128-byte
      // swizzled row of the E4M3 copy per weight row of the tile.
      const bool box_ok = convert_ahead ? shape.load_b.inner == 128 &&
                                            shape.load_b.outer == shape.block_n &&
                                            shape.load_b.swizzle == 128
                                      : shape.load_b.inner == 256 &&
                                            shape.load_b.outer % 16 == 0 &&
                                            shape.load_b.swizzle == 0;
      if (ldb != 64 * static_cast<int64_t>(k_blocks) || params.n % 64 != 0 ||
          sfb_stride_row != 4 * static_cast<int64_t>(params.n) || ldb_group % 16 != 0 ||
          !box_ok) {
        throw std::invalid_argument(std::string(kName) + ": prepared weights need N % 64 == 0, "
                                    "code rows of Kp / 2 bytes back to back, offsets rows of 4 N "
                                    "bytes and the kernel's box of the weights");
      }
      if (convert_ahead) {
        const uint64_t kp = uint64_t{128} * k_blocks;
        tma.add(params.tma_b, tma_view_3d(as_ptr(w8_ptr), kBytes, 1, params.num_groups, params.n,
                                          kp, kp, uint64_t{params.n} * kp, shape.load_b));
      } else {
        tma.add(params.tma_b, block_view(as_ptr(b_ptr), params.num_groups, params.n / 64,
                                         k_blocks, static_cast<uint64_t>(ldb_group), shape.load_b));
      }
    } else {
      tma.add(params.tma_b,
              tma_view_3d(as_ptr(b_ptr), kBytes, 1, params.num_groups, params.n, params.k / 2,
                          checked_u32(ldb, "ldb"), static_cast<uint64_t>(ldb_group),
                          shape.load_b));
    }
    if constexpr (kTable) {
      if (sfb_stride_group % 16 != 0) {
        throw std::invalid_argument(std::string(kName) + ": sfb group stride % 16 != 0");
      }
      tma.add(params.tma_sfb,
              tma_view_3d(as_ptr(sfb_ptr), CU_TENSOR_MAP_DATA_TYPE_UINT32, 4, params.num_groups,
                          2 * k_blocks, params.n, params.n,
                          static_cast<uint64_t>(sfb_stride_group) / 4, shape.load_sfb));
    }
    if (shape.store_d.present()) {
      tma.add(params.tma_d, tma_view_2d(as_ptr(d_ptr), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                        params.rows, params.n, params.ldd, shape.store_d));
    }
    params.d = as_ptr(d_ptr);
    params.sfa = static_cast<const float*>(as_ptr(sfa_ptr));
    params.sfb = static_cast<const uint8_t*>(as_ptr(sfb_ptr));
    params.group_info = static_cast<const int32_t*>(as_ptr(group_info_ptr));
    params.bias = nullptr;
    params.row_scale = nullptr;
    params.codes = static_cast<const uint8_t*>(as_ptr(b_ptr));
    params.codes_stride_group = static_cast<uint64_t>(ldb_group);
    params.w8 = static_cast<uint8_t*>(as_ptr(w8_ptr));
    params.ready = static_cast<uint32_t*>(as_ptr(ready_ptr));
    return true;
  }
};

// The kernels on prepared weights that take a workspace, plain or with a fused-MoE epilogue
// (kMoe: bias and row-scale pointers as Sm90Fp8Fp4MoeGemmOf): the table launcher's arguments
// plus, last of the pointers, a scratch buffer and int32 flags zeroed before each call (fresh
// allocations of the caller, not checked for alignment). kConvertAhead: the convert-ahead kernel
// (the prefill kernel's composition without a transform ring), the scratch its E4M3 copy w8
// [G, N, Kp] and the flags a ready flag a unit, then the converters' claim counter (G * Kb *
// N / 64 + 1 words); else the decode kernel with its last wave split along K
// (scheduler/tail_split_scheduler.cuh), the scratch FP32 partial sums and the flags a ticket a
// split tile's math warpgroup.
template <bool kMoe, bool kConvertAhead>
struct Sm90Fp8Fp4WorkspaceOf {
  using Params = Sm90Fp8Fp4GemmParams;
  using Base = Sm90Fp8Fp4GemmOf<true>;
  static constexpr const char* kName =
      kConvertAhead
          ? (kMoe ? "Sm90Fp8Fp4ConvertAheadMoeGemmLauncher" : "Sm90Fp8Fp4ConvertAheadGemmLauncher")
          : (kMoe ? "Sm90Fp8Fp4TableSplitMoeGemmLauncher" : "Sm90Fp8Fp4TableSplitGemmLauncher");
  static constexpr size_t kNumAlignedPointers = 5;  // a, b, d, sfa, sfb
  static constexpr const char* kNumBlocksDoc =
      kConvertAhead ? "CTAs per launch (at most one per SM: the producers wait on every CTA's "
                      "converter)."
                    : "CTAs per launch (the scratch holds a slot per CTA and the flags a "
                      "ticket per CTA's math warpgroup: size them for this count).";

  static void check_shape(const LaunchShape& shape) {
    Base::check_shape(shape);
    if (shape.block_n % 64 != 0) {
      throw std::invalid_argument(std::string(kName) + ": block_n must be whole 64-row blocks");
    }
    if (kMoe && shape.store_d.present()) {
      throw std::invalid_argument(std::string(kName) + ": MoE epilogues store from registers");
    }
  }

  // Every argument: the MoE launcher calls it as it is, the plain one without bias or row scale.
  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t bias_ptr, uint64_t row_scale_ptr, uint64_t group_info_ptr,
                   uint64_t w8_ptr, uint64_t ready_ptr, int64_t rows, int64_t m, int64_t n,
                   int64_t k, int64_t num_groups, int64_t lda, int64_t ldb, int64_t ldb_group,
                   int64_t ldd, int64_t sfa_stride_group, int64_t sfa_stride_row,
                   int64_t sfa_stride_kb, int64_t sfa_group_rows, int64_t sfb_stride_group,
                   int64_t sfb_stride_row) {
    if (!Base::fill_with(shape, params, tma, kConvertAhead, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, w8_ptr,
                         ready_ptr, group_info_ptr, rows, m, n, k, num_groups, lda, ldb,
                         ldb_group, ldd, sfa_stride_group, sfa_stride_row, sfa_stride_kb,
                         sfa_group_rows, sfb_stride_group, sfb_stride_row)) {
      return false;
    }
    params.bias = static_cast<const float*>(as_ptr(bias_ptr));
    params.row_scale = static_cast<const float*>(as_ptr(row_scale_ptr));
    return true;
  }
};

struct Sm90Fp8Fp4ConvertAheadGemmOf : Sm90Fp8Fp4WorkspaceOf<false, true> {
  static constexpr const char* kDoc =
      "Launches sm90_fp8_fp4_grouped_gemm's convert-ahead composition on prepared weights: its "
      "converter warpgroup writes the E4M3 copy w8 [G, N, Kp] (uint8) of the codes and raises one "
      "flag a (group, 64-row block, k-block) in ready int32 [G * Kb * N / 64 + 1] (then a claim "
      "counter), which must be zero at the launch; arguments as Sm90Fp8Fp4TableGemmLauncher's plus those two pointers, last.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "group_info_ptr", "w8_ptr", "ready_ptr",
      "rows", "m", "n", "k", "num_groups", "lda", "ldb", "ldb_group", "ldd", "sfa_stride_group",
      "sfa_stride_row", "sfa_stride_kb", "sfa_group_rows", "sfb_stride_group", "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "As Sm90Fp8Fp4TableGemmLauncher, then the workspace w8 and the zeroed flags. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, w8_ptr, ready_ptr, stream, "
      "/) -> bool.";

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t group_info_ptr, uint64_t w8_ptr, uint64_t ready_ptr, int64_t rows,
                   int64_t m, int64_t n, int64_t k, int64_t num_groups, int64_t lda, int64_t ldb,
                   int64_t ldb_group, int64_t ldd, int64_t sfa_stride_group,
                   int64_t sfa_stride_row, int64_t sfa_stride_kb, int64_t sfa_group_rows,
                   int64_t sfb_stride_group, int64_t sfb_stride_row) {
    return Sm90Fp8Fp4WorkspaceOf<false, true>::fill(
        shape, params, tma, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, 0, 0, group_info_ptr, w8_ptr,
        ready_ptr, rows, m, n, k, num_groups, lda, ldb, ldb_group, ldd, sfa_stride_group,
        sfa_stride_row, sfa_stride_kb, sfa_group_rows, sfb_stride_group, sfb_stride_row);
  }
};

struct Sm90Fp8Fp4ConvertAheadMoeGemmOf : Sm90Fp8Fp4WorkspaceOf<true, true> {
  static constexpr const char* kDoc =
      "Sm90Fp8Fp4ConvertAheadGemmLauncher's twin built with a fused-MoE epilogue (SwiGLU or "
      "RowScale, register stores): bias and row-scale pointers before group_info_ptr, as "
      "Sm90Fp8Fp4TableMoeGemmLauncher's, then the workspace and the flags.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "bias_ptr", "row_scale_ptr",
      "group_info_ptr", "w8_ptr", "ready_ptr", "rows", "m", "n", "k", "num_groups", "lda", "ldb",
      "ldb_group", "ldd", "sfa_stride_group", "sfa_stride_row", "sfa_stride_kb", "sfa_group_rows",
      "sfb_stride_group", "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "As Sm90Fp8Fp4TableMoeGemmLauncher, then the workspace w8 and the zeroed flags. "
      "Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr, group_info_ptr, "
      "w8_ptr, ready_ptr, stream, /) -> bool.";
};

struct Sm90Fp8Fp4TableSplitGemmOf : Sm90Fp8Fp4WorkspaceOf<false, false> {
  static constexpr const char* kDoc =
      "Launches sm90_fp8_fp4_swap_ab_gemm on prepared weights built with its last wave split "
      "along K: arguments as Sm90Fp8Fp4TableGemmLauncher's plus, last of the pointers, the FP32 "
      "partial sums (4 x block_m x block_n bytes a CTA) and int32 tickets (block_n / 64 a CTA), "
      "which must be zero at the launch.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "group_info_ptr", "scratch_ptr",
      "flags_ptr", "rows", "m", "n", "k", "num_groups", "lda", "ldb", "ldb_group", "ldd",
      "sfa_stride_group", "sfa_stride_row", "sfa_stride_kb", "sfa_group_rows",
      "sfb_stride_group", "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "As Sm90Fp8Fp4TableGemmLauncher, then the scratch and the zeroed flags. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, scratch_ptr, flags_ptr, "
      "stream, /) -> bool.";

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t group_info_ptr, uint64_t scratch_ptr, uint64_t flags_ptr,
                   int64_t rows, int64_t m, int64_t n, int64_t k, int64_t num_groups, int64_t lda,
                   int64_t ldb, int64_t ldb_group, int64_t ldd, int64_t sfa_stride_group,
                   int64_t sfa_stride_row, int64_t sfa_stride_kb, int64_t sfa_group_rows,
                   int64_t sfb_stride_group, int64_t sfb_stride_row) {
    return Sm90Fp8Fp4WorkspaceOf<false, false>::fill(
        shape, params, tma, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, 0, 0, group_info_ptr,
        scratch_ptr, flags_ptr, rows, m, n, k, num_groups, lda, ldb, ldb_group, ldd,
        sfa_stride_group, sfa_stride_row, sfa_stride_kb, sfa_group_rows, sfb_stride_group,
        sfb_stride_row);
  }
};

struct Sm90Fp8Fp4TableSplitMoeGemmOf : Sm90Fp8Fp4WorkspaceOf<true, false> {
  static constexpr const char* kDoc =
      "Sm90Fp8Fp4TableSplitGemmLauncher's twin built with a fused-MoE epilogue (SwiGLU or "
      "RowScale, register stores): bias and row-scale pointers before group_info_ptr, as "
      "Sm90Fp8Fp4TableMoeGemmLauncher's, then the scratch and the flags.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "bias_ptr", "row_scale_ptr",
      "group_info_ptr", "scratch_ptr", "flags_ptr", "rows", "m", "n", "k", "num_groups", "lda",
      "ldb", "ldb_group", "ldd", "sfa_stride_group", "sfa_stride_row", "sfa_stride_kb",
      "sfa_group_rows", "sfb_stride_group", "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "As Sm90Fp8Fp4TableMoeGemmLauncher, then the scratch and the zeroed flags. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr, group_info_ptr, "
      "scratch_ptr, flags_ptr, stream, /) -> bool.";
};

// The fused MoE layer's GEMMs with MXFP4 experts: the kernels above built with a
// Config::kMoeEpilogue (register stores), plus the FP32 bias [G, n] and row-scale pointers.
template <bool kTable>
struct Sm90Fp8Fp4MoeGemmOf {
  using Params = Sm90Fp8Fp4GemmParams;
  using Base = Sm90Fp8Fp4GemmOf<kTable>;
  static constexpr const char* kName =
      kTable ? "Sm90Fp8Fp4TableMoeGemmLauncher" : "Sm90Fp8Fp4MoeGemmLauncher";
  static constexpr size_t kNumAlignedPointers = 5;  // a, b, d, sfa, sfb
  static constexpr const char* kDoc = kTable ?
      "Sm90Fp8Fp4MoeGemmLauncher's twin on prepared weights (the table kernel built with a MoE "
      "epilogue): arguments as there, b and sfb as Sm90Fp8Fp4TableGemmLauncher's." :
      "Launches sm90_fp8_fp4_grouped_gemm (or its decode twin) built with a fused-MoE epilogue "
      "(SwiGLU or RowScale), register stores; the FP8 x FP4 launcher's arguments plus bias and "
      "row-scale pointers.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "sfa_ptr", "sfb_ptr", "bias_ptr", "row_scale_ptr",
      "group_info_ptr", "rows", "m", "n", "k", "num_groups", "lda", "ldb", "ldb_group", "ldd",
      "sfa_stride_group", "sfa_stride_row", "sfa_stride_kb", "sfa_group_rows", "sfb_stride_group",
      "sfb_stride_row"};
  static constexpr const char* kCallDoc =
      "As Sm90Fp8Fp4GemmLauncher, plus FP32 bias [G, n] and row scale [rows] (0: absent). "
      "Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr, group_info_ptr, "
      "stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) {
    Base::check_shape(shape);
    if (shape.store_d.present()) {
      throw std::invalid_argument(std::string(kName) + ": MoE epilogues store from registers");
    }
  }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t sfa_ptr, uint64_t sfb_ptr,
                   uint64_t bias_ptr, uint64_t row_scale_ptr, uint64_t group_info_ptr,
                   int64_t rows, int64_t m, int64_t n, int64_t k, int64_t num_groups,
                   int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                   int64_t sfa_stride_group, int64_t sfa_stride_row, int64_t sfa_stride_kb,
                   int64_t sfa_group_rows, int64_t sfb_stride_group, int64_t sfb_stride_row) {
    if (!Base::fill(shape, params, tma, a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr,
                              group_info_ptr, rows, m, n, k, num_groups, lda, ldb, ldb_group,
                              ldd, sfa_stride_group, sfa_stride_row, sfa_stride_kb,
                              sfa_group_rows, sfb_stride_group, sfb_stride_row)) {
      return false;
    }
    params.bias = static_cast<const float*>(as_ptr(bias_ptr));
    params.row_scale = static_cast<const float*>(as_ptr(row_scale_ptr));
    return true;
  }
};

}  // namespace

void register_sm90_fp8_fp4_gemm(pybind11::module_& m) {
  register_launcher<Sm90Fp8Fp4GemmOf<false>>(m);
  register_launcher<Sm90Fp8Fp4MoeGemmOf<false>>(m);
  register_launcher<Sm90Fp8Fp4GemmOf<true>>(m);
  register_launcher<Sm90Fp8Fp4MoeGemmOf<true>>(m);
  register_launcher<Sm90Fp8Fp4ConvertAheadGemmOf>(m);
  register_launcher<Sm90Fp8Fp4ConvertAheadMoeGemmOf>(m);
  register_launcher<Sm90Fp8Fp4TableSplitGemmOf>(m);
  register_launcher<Sm90Fp8Fp4TableSplitMoeGemmOf>(m);
}

}  // namespace moegemm
