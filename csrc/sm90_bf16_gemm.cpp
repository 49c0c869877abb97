// Parameter filling of the BF16 kernels: include/moegemm/impls/sm90_bf16_grouped_gemm.cuh and
// its swap-AB twin (dense and m-grouped layouts, Bf16GemmParams) and
// sm90_bf16_k_grouped_gemm.cuh (weight gradients, Bf16KGroupedParams). Launch shape, cluster
// clamp, TMA encoding, launch and the bindings are the generic launcher's (launcher.h).
//
// This is the hot path of every BF16 GEMM call: the Python side has already checked shapes,
// picked the config, loaded the kernel and bound the call's integers (launcher.bind, checked by
// a fill with null pointers); fill() only narrows the integers into the params, sets the
// pointers and lists the descriptors.
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <stdexcept>
#include <string>

#include "launcher.h"
#include "moegemm/common/sm90_gemm_params.h"

namespace moegemm {
namespace {

constexpr uint32_t kBf16Bytes = 2;
constexpr CUtensorMapDataType kBf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;

struct Bf16Gemm {
  using Params = Bf16GemmParams;
  static constexpr const char* kName = "Bf16GemmLauncher";
  static constexpr size_t kNumAlignedPointers = 4;  // a, b, d, c: what the Python checks align
  static constexpr const char* kDoc =
      "Launches sm90_bf16_grouped_gemm or its swap-AB twin (dense or m-grouped) with the kernel "
      "and its launch shape bound; keeps `kernel` alive. The cluster shape must be the compiled "
      "one: 1x1, 2x1 or 1x2.";
  static constexpr const char* kInitDoc =
      "num_blocks: persistent CTAs, a multiple of cluster_m * cluster_n; with a cluster it is "
      "clamped to the clusters that fit at once (see num_blocks). The keyword arguments are the "
      "config's StorageConfig: each TMA map's box (inner, outer) in elements and swizzle in "
      "bytes; store_box_d (0, 0): stores from registers.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "c_ptr", "group_info_ptr", "rows", "m", "n", "k", "num_groups",
      "lda", "ldb", "ldb_group", "ldd", "ldc"};
  static constexpr const char* kCallDoc =
      "D[r, n] = A[r, k] . B[g(r), n, k]^T (+ C). rows: A/D rows in all (masked: groups * m); m: "
      "rows (masked: rows per group); c_ptr and group_info_ptr 0 when absent. An empty output "
      "(rows, n or num_groups 0) launches nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, c_ptr, group_info_ptr, stream, /) -> bool: the call with these "
      "integers bound for CUDA device `device` (checked here: out of range or too many tiles is a "
      "ValueError).";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch: the planned count, clamped to the clusters that fit at once.";

  // The cluster shape must be the one the kernel was built for (Scheduler::kClusterM/N): the
  // A and B box heights, the full barrier's byte count and the multicast mask follow from it.
  static void check_shape(const LaunchShape& shape) {
    const bool known_shape = (shape.cluster_m == 1 && shape.cluster_n == 1) ||
                             (shape.cluster_m == 2 && shape.cluster_n == 1) ||
                             (shape.cluster_m == 1 && shape.cluster_n == 2);
    if (!known_shape || shape.block_n % (8 * shape.cluster_m) != 0 ||
        shape.block_m % (8 * shape.cluster_n) != 0) {
      throw std::invalid_argument(
          std::string(kName) + ": clusters are 1x1, 2x1 or 1x2, and each CTA's share of a tile "
          "is a multiple of 8 rows; got cluster " + std::to_string(shape.cluster_m) + "x" +
          std::to_string(shape.cluster_n) + " with block " + std::to_string(shape.block_m) +
          "x" + std::to_string(shape.block_n));
    }
  }

  // rows: A/D rows in all (masked: groups * m). m: what the scheduler reads as M (total rows, or
  // rows per group for the masked layout). B is [num_groups, n, k] with group stride ldb_group.
  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t c_ptr, uint64_t group_info_ptr,
                   int64_t rows, int64_t m, int64_t n, int64_t k, int64_t num_groups, int64_t lda,
                   int64_t ldb, int64_t ldb_group, int64_t ldd, int64_t ldc) {
    params.m = checked_u32(m, "m");
    params.n = checked_u32(n, "n");
    params.k = checked_u32(k, "k");
    params.num_groups = checked_u32(num_groups, "num_groups");
    params.ldd = checked_u32(ldd, "ldd");
    params.ldc = checked_u32(ldc, "ldc");
    params.rows = checked_u32(rows, "rows");
    // An empty output has nothing to write, and a zero-sized TMA dimension would not encode.
    if (params.rows == 0 || params.n == 0 || params.num_groups == 0) return false;

    // At most every group's rows plus one partial m-block per group: a bound for every layout
    // whose offsets are well-formed (malformed ones are clamped on the device; the walk then
    // stays in bounds but may count more tiles than this).
    const uint64_t m_blocks =
        (uint64_t{params.rows} + shape.block_m - 1) / shape.block_m + params.num_groups;
    check_tile_count(m_blocks * ((params.n + shape.block_n - 1) / shape.block_n),
                     static_cast<uint64_t>(shape.num_blocks));
    // The config's boxes: with a cluster along N each CTA loads (and multicasts) its share of
    // the A tile's rows; with a cluster along M, its share of the B tile's rows.
    tma.add(params.tma_a, tma_view_2d(as_ptr(a_ptr), kBf16, kBf16Bytes, params.rows, params.k,
                                      checked_u32(lda, "lda"), shape.load_a));
    tma.add(params.tma_b, tma_view_3d(as_ptr(b_ptr), kBf16, kBf16Bytes, params.num_groups,
                                      params.n, params.k, checked_u32(ldb, "ldb"),
                                      static_cast<uint64_t>(ldb_group), shape.load_b));
    if (shape.store_d.present()) {
      tma.add(params.tma_d, tma_view_2d(as_ptr(d_ptr), kBf16, kBf16Bytes, params.rows, params.n,
                                        params.ldd, shape.store_d));
    }
    params.d = as_ptr(d_ptr);
    params.c = static_cast<const float*>(as_ptr(c_ptr));
    params.group_info = static_cast<const int32_t*>(as_ptr(group_info_ptr));
    params.bias = nullptr;
    params.row_scale = nullptr;
    return true;
  }
};

// The fused MoE layer's two GEMMs (python/moegemm/moe/): the m-grouped kernels built with a
// Config::kMoeEpilogue, without clusters. GEMM1 (SwiGLU): n counts w13's weight rows, D has
// d_cols = n / 2 columns; GEMM2 (RowScale): the routing weight of every row, d_cols = n. Bias
// [G, n] FP32 or 0. With TMA stores (unswapped kernel) the D map spans d_cols columns.
struct Bf16MoeGemm {
  using Params = Bf16GemmParams;
  static constexpr const char* kName = "Bf16MoeGemmLauncher";
  static constexpr size_t kNumAlignedPointers = 3;  // a, b, d
  static constexpr const char* kDoc =
      "Launches sm90_bf16_grouped_gemm (or its swap-AB twin) built with a fused-MoE epilogue "
      "(Config::kMoeEpilogue: SwiGLU, D with n / 2 columns, or RowScale); register or TMA stores "
      "(store_box_d), no clusters.";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "bias_ptr", "row_scale_ptr", "group_info_ptr", "rows", "m", "n",
      "k", "num_groups", "lda", "ldb", "ldb_group", "ldd", "d_cols"};
  static constexpr const char* kCallDoc =
      "As Bf16GemmLauncher without C, plus FP32 bias [G, n] and row scale [rows] pointers (0: "
      "absent). An empty output launches nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, bias_ptr, row_scale_ptr, group_info_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) {
    Bf16Gemm::check_shape(shape);
    if (shape.cluster_m != 1 || shape.cluster_n != 1) {
      throw std::invalid_argument(std::string(kName) + ": MoE epilogues run without clusters");
    }
  }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t bias_ptr, uint64_t row_scale_ptr,
                   uint64_t group_info_ptr, int64_t rows, int64_t m, int64_t n, int64_t k,
                   int64_t num_groups, int64_t lda, int64_t ldb, int64_t ldb_group,
                   int64_t ldd, int64_t d_cols) {
    if (d_cols != n && 2 * d_cols != n) {
      throw std::invalid_argument(std::string(kName) + ": d_cols must be n or n / 2, got " +
                                  std::to_string(d_cols) + " with n " + std::to_string(n));
    }
    if (d_cols > ldd) {
      throw std::invalid_argument(std::string(kName) + ": d_cols exceeds ldd");
    }
    LaunchShape operands = shape;
    operands.store_d = TmaBox{};  // the D map, if any, is this launcher's (d_cols wide)
    if (!Bf16Gemm::fill(operands, params, tma, a_ptr, b_ptr, d_ptr, 0, group_info_ptr, rows,
                            m, n, k, num_groups, lda, ldb, ldb_group, ldd, 0)) {
      return false;
    }
    if (shape.store_d.present()) {
      tma.add(params.tma_d, tma_view_2d(as_ptr(d_ptr), kBf16, kBf16Bytes, params.rows,
                                        checked_u32(d_cols, "d_cols"), params.ldd,
                                        shape.store_d));
    }
    params.bias = static_cast<const float*>(as_ptr(bias_ptr));
    params.row_scale = static_cast<const float*>(as_ptr(row_scale_ptr));
    return true;
  }
};

struct Bf16KGrouped {
  using Params = Bf16KGroupedParams;
  static constexpr const char* kName = "Bf16KGroupedLauncher";
  static constexpr size_t kNumAlignedPointers = 4;  // a, b, d, c: what the Python checks align
  static constexpr const char* kDoc =
      "Launches sm90_bf16_k_grouped_gemm, or its SM100 twin sm100_bf16_k_grouped_gemm (same "
      "parameters and TMA boxes), with the kernel and its launch shape bound; keeps `kernel` "
      "alive. Takes no clusters (cluster_m = cluster_n = 1).";
  static constexpr const char* kArgNames[] = {
      "a_ptr", "b_ptr", "d_ptr", "c_ptr", "offs_ptr", "m", "n", "num_tokens", "num_groups", "lda",
      "ldb"};
  static constexpr const char* kCallDoc =
      "D[g] = A[rows of g]^T . B[rows of g] (+ C[g]), D and C FP32 [num_groups, m, n]; A "
      "[num_tokens, m] and B [num_tokens, n] with row strides lda, ldb; offs: cumulative end row "
      "of each group. An empty output launches nothing. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr, stream, /) -> bool: the call with these "
      "integers bound for CUDA device `device` (checked here).";
  static constexpr const char* kNumBlocksDoc =
      "CTAs per launch (the planned count: no clusters, no clamp).";

  static void check_shape(const LaunchShape& shape) {
    if (shape.cluster_m != 1 || shape.cluster_n != 1) {
      throw std::invalid_argument(std::string(kName) + ": the k-grouped kernel takes no clusters");
    }
  }

  // A [T, m] and B [T, n] are MN-major: the config's boxes are 64 columns x block_k rows.
  static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, uint64_t a_ptr,
                   uint64_t b_ptr, uint64_t d_ptr, uint64_t c_ptr, uint64_t offs_ptr, int64_t m,
                   int64_t n, int64_t num_tokens, int64_t num_groups, int64_t lda, int64_t ldb) {
    params.m = checked_u32(m, "m");
    params.n = checked_u32(n, "n");
    params.num_tokens = checked_u32(num_tokens, "num_tokens");
    params.num_groups = checked_u32(num_groups, "num_groups");
    if (params.m == 0 || params.n == 0 || params.num_groups == 0) return false;
    check_tile_count(uint64_t{params.num_groups} *
                         ((params.m + shape.block_m - 1) / shape.block_m) *
                         ((params.n + shape.block_n - 1) / shape.block_n),
                     static_cast<uint64_t>(shape.num_blocks));
    // With no rows at all every group is empty; TMA cannot map a 0-row tensor, and the kernel
    // never loads, so a one-row map over the (unused) operand keeps the launch valid.
    const uint32_t mapped_rows = params.num_tokens > 0 ? params.num_tokens : 1;
    tma.add(params.tma_a, tma_view_2d(as_ptr(a_ptr), kBf16, kBf16Bytes, mapped_rows, params.m,
                                      checked_u32(lda, "lda"), shape.load_a));
    tma.add(params.tma_b, tma_view_2d(as_ptr(b_ptr), kBf16, kBf16Bytes, mapped_rows, params.n,
                                      checked_u32(ldb, "ldb"), shape.load_b));
    if (shape.store_d.present()) {
      tma.add(params.tma_d, tma_view_2d(as_ptr(d_ptr), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4,
                                        static_cast<uint64_t>(params.num_groups) * params.m,
                                        params.n, params.n, shape.store_d));
    }
    params.d = static_cast<float*>(as_ptr(d_ptr));
    params.c = static_cast<const float*>(as_ptr(c_ptr));
    params.offs = static_cast<const int32_t*>(as_ptr(offs_ptr));
    return true;
  }
};

}  // namespace

void register_sm90_bf16_gemm(pybind11::module_& m) {
  register_launcher<Bf16Gemm>(m);
  register_launcher<Bf16MoeGemm>(m);
  register_launcher<Bf16KGrouped>(m);
}

}  // namespace moegemm
