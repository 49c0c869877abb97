// Host launchers of include/moegemm/impls/sm90_bf16_grouped_gemm.cuh (dense and m-grouped
// layouts, one params struct) and include/moegemm/impls/sm90_bf16_k_grouped_gemm.cuh.
//
// This is the hot path of every BF16 GEMM call: the Python side has already checked shapes,
// picked the config and loaded the kernel, so this only encodes TMA descriptors on the stack
// (memoised, see tma.cpp) and launches. No allocation, no Python objects, no synchronization.
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "launch.h"
#include "moegemm/common/sm90_gemm_params.h"
#include "tma.h"

namespace moegemm {
namespace {

constexpr uint32_t kBf16Bytes = 2;
constexpr CUtensorMapDataType kBf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
constexpr CUtensorMapSwizzle kSwizzle128B = CU_TENSOR_MAP_SWIZZLE_128B;

inline void* as_ptr(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

// The launch shape of one planned kernel; bound once so the per-call binding converts only the
// per-call values (a measurable share of a launch-bound call's host time).
struct LaunchShape {
  int64_t block_m, block_n, block_k, num_blocks, num_threads, smem_bytes, cluster_m, cluster_n;
  int64_t store_cols;  // TMA-store epilogue box width in columns; 0 = stores from registers

  LaunchConfig config(uint64_t stream) const {
    LaunchConfig config;
    config.grid_x = checked_u32(num_blocks, "num_blocks");
    config.block_x = checked_u32(num_threads, "num_threads");
    config.smem_bytes = checked_u32(smem_bytes, "smem_bytes");
    config.cluster_x = checked_u32(cluster_m * cluster_n, "cluster_m * cluster_n");
    config.stream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
    return config;
  }
};

// rows: A/D rows in all (masked: groups * m). m: what the scheduler reads as M (total rows, or
// rows per group for the masked layout). B is [num_groups, n, k] with group stride ldb_group.
void launch_grouped(Kernel& kernel, const LaunchShape& shape, uint64_t a_ptr, uint64_t b_ptr,
                    uint64_t d_ptr, uint64_t c_ptr, uint64_t group_info_ptr, int64_t rows,
                    int64_t m, int64_t n, int64_t k, int64_t num_groups, int64_t lda, int64_t ldb,
                    int64_t ldb_group, int64_t ldd, int64_t ldc, uint64_t stream) {
  Sm90Bf16GemmParams params;
  params.m = checked_u32(m, "m");
  params.n = checked_u32(n, "n");
  params.k = checked_u32(k, "k");
  params.num_groups = checked_u32(num_groups, "num_groups");
  params.ldd = checked_u32(ldd, "ldd");
  params.ldc = checked_u32(ldc, "ldc");
  const uint32_t num_rows = checked_u32(rows, "rows");
  // An empty output has nothing to write, and a zero-sized TMA dimension would not encode.
  if (num_rows == 0 || params.n == 0 || params.num_groups == 0) return;

  // At most every group's rows plus one partial m-block per group: a bound for every layout
  // whose offsets are well-formed (malformed ones are clamped on the device; the walk then
  // stays in bounds but may count more tiles than this).
  const uint64_t m_blocks = (uint64_t{num_rows} + shape.block_m - 1) / shape.block_m +
                            params.num_groups;
  check_tile_count(m_blocks * ((params.n + shape.block_n - 1) / shape.block_n),
                   static_cast<uint64_t>(shape.num_blocks));
  const uint32_t block_k = checked_u32(shape.block_k, "block_k");
  // With a cluster along N each CTA loads (and multicasts) its share of the A tile's rows;
  // with a cluster along M, its share of the B tile's rows.
  params.tma_a = make_tma_2d(as_ptr(a_ptr), kBf16, kBf16Bytes, num_rows, params.k,
                             checked_u32(lda, "lda"),
                             checked_u32(shape.block_m / shape.cluster_n, "block_m / cluster_n"),
                             block_k, kSwizzle128B);
  params.tma_b = make_tma_3d(as_ptr(b_ptr), kBf16, kBf16Bytes, params.num_groups, params.n,
                             params.k, checked_u32(ldb, "ldb"), static_cast<uint64_t>(ldb_group),
                             checked_u32(shape.block_n / shape.cluster_m, "block_n / cluster_m"),
                             block_k, kSwizzle128B);
  params.rows = num_rows;
  if (shape.store_cols != 0) {
    const uint32_t store_cols = checked_u32(shape.store_cols, "store_cols");
    params.tma_d = make_tma_2d(as_ptr(d_ptr), kBf16, kBf16Bytes, num_rows, params.n, params.ldd,
                               64, store_cols, swizzle_from_bytes(static_cast<int>(2 * store_cols)));
  }
  params.d = as_ptr(d_ptr);
  params.c = static_cast<const float*>(as_ptr(c_ptr));
  params.group_info = static_cast<const int32_t*>(as_ptr(group_info_ptr));
  launch_with_params(kernel, shape.config(stream), params);
}

// A [T, m] and B [T, n] are MN-major: TMA boxes of 64 columns x block_k rows.
void launch_k_grouped(Kernel& kernel, const LaunchShape& shape, uint64_t a_ptr, uint64_t b_ptr,
                      uint64_t d_ptr, uint64_t c_ptr, uint64_t offs_ptr, int64_t m, int64_t n,
                      int64_t num_tokens, int64_t num_groups, int64_t lda, int64_t ldb,
                      uint64_t stream) {
  Sm90Bf16KGroupedParams params;
  params.m = checked_u32(m, "m");
  params.n = checked_u32(n, "n");
  params.num_tokens = checked_u32(num_tokens, "num_tokens");
  params.num_groups = checked_u32(num_groups, "num_groups");
  if (params.m == 0 || params.n == 0 || params.num_groups == 0) return;
  check_tile_count(uint64_t{params.num_groups} * ((params.m + shape.block_m - 1) / shape.block_m) *
                       ((params.n + shape.block_n - 1) / shape.block_n),
                   static_cast<uint64_t>(shape.num_blocks));
  // With no rows at all every group is empty; TMA cannot map a 0-row tensor, and the kernel
  // never loads, so a one-row map over the (unused) operand keeps the launch valid.
  const uint32_t mapped_rows = params.num_tokens > 0 ? params.num_tokens : 1;
  const uint32_t block_k = checked_u32(shape.block_k, "block_k");
  params.tma_a = make_tma_2d(as_ptr(a_ptr), kBf16, kBf16Bytes, mapped_rows, params.m,
                             checked_u32(lda, "lda"), block_k, 64, kSwizzle128B);
  params.tma_b = make_tma_2d(as_ptr(b_ptr), kBf16, kBf16Bytes, mapped_rows, params.n,
                             checked_u32(ldb, "ldb"), block_k, 64, kSwizzle128B);
  if (shape.store_cols != 0) {
    params.tma_d = make_tma_2d(as_ptr(d_ptr), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4,
                               static_cast<uint64_t>(params.num_groups) * params.m, params.n,
                               params.n, 64, checked_u32(shape.store_cols, "store_cols"),
                               kSwizzle128B);
  }
  params.d = static_cast<float*>(as_ptr(d_ptr));
  params.c = static_cast<const float*>(as_ptr(c_ptr));
  params.offs = static_cast<const int32_t*>(as_ptr(offs_ptr));
  launch_with_params(kernel, shape.config(stream), params);
}

class GroupedLauncher {
 public:
  // The cluster shape must be the one the kernel was built for (Scheduler::kClusterM/N): the
  // A and B box heights, the full barrier's byte count and the multicast mask follow from it.
  GroupedLauncher(Kernel& kernel, LaunchShape shape) : kernel_(kernel), shape_(shape) {
    const bool known_shape = (shape.cluster_m == 1 && shape.cluster_n == 1) ||
                             (shape.cluster_m == 2 && shape.cluster_n == 1) ||
                             (shape.cluster_m == 1 && shape.cluster_n == 2);
    if (!known_shape || shape.block_n % (8 * shape.cluster_m) != 0 ||
        shape.block_m % (8 * shape.cluster_n) != 0) {
      throw std::invalid_argument(
          "Sm90Bf16GemmLauncher: clusters are 1x1, 2x1 or 1x2, and each CTA's share of a tile "
          "is a multiple of 8 rows; got cluster " + std::to_string(shape.cluster_m) + "x" +
          std::to_string(shape.cluster_n) + " with block " + std::to_string(shape.block_m) +
          "x" + std::to_string(shape.block_n));
    }
    const int64_t cluster_size = shape.cluster_m * shape.cluster_n;
    if (cluster_size > 1) {
      // Persistent CTAs only help when all of them run at once: clusters that do not fit beside
      // the others would start after them and double the time of their share of the tiles.
      const int fit = kernel.max_active_clusters(checked_u32(cluster_size, "cluster size"),
                                                 checked_u32(shape.num_threads, "num_threads"),
                                                 checked_u32(shape.smem_bytes, "smem_bytes"));
      if (fit < 1) {
        throw std::runtime_error("Sm90Bf16GemmLauncher: no cluster of " +
                                 std::to_string(cluster_size) + " CTAs fits on this device");
      }
      shape_.num_blocks = std::min<int64_t>(shape.num_blocks, int64_t{fit} * cluster_size);
    }
  }

  int64_t num_blocks() const { return shape_.num_blocks; }

  void operator()(uint64_t a_ptr, uint64_t b_ptr, uint64_t d_ptr, uint64_t c_ptr,
                  uint64_t group_info_ptr, int64_t rows, int64_t m, int64_t n, int64_t k,
                  int64_t num_groups, int64_t lda, int64_t ldb, int64_t ldb_group, int64_t ldd,
                  int64_t ldc, uint64_t stream) {
    launch_grouped(kernel_, shape_, a_ptr, b_ptr, d_ptr, c_ptr, group_info_ptr, rows, m, n, k,
                   num_groups, lda, ldb, ldb_group, ldd, ldc, stream);
  }

 private:
  Kernel& kernel_;  // kept alive by the binding (keep_alive)
  LaunchShape shape_;
};

class KGroupedLauncher {
 public:
  KGroupedLauncher(Kernel& kernel, LaunchShape shape) : kernel_(kernel), shape_(shape) {
    if (shape.cluster_m != 1 || shape.cluster_n != 1) {
      throw std::invalid_argument("Sm90Bf16KGroupedLauncher: the k-grouped kernel takes no clusters");
    }
  }

  void operator()(uint64_t a_ptr, uint64_t b_ptr, uint64_t d_ptr, uint64_t c_ptr,
                  uint64_t offs_ptr, int64_t m, int64_t n, int64_t num_tokens, int64_t num_groups,
                  int64_t lda, int64_t ldb, uint64_t stream) {
    launch_k_grouped(kernel_, shape_, a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr, m, n, num_tokens,
                     num_groups, lda, ldb, stream);
  }

 private:
  Kernel& kernel_;
  LaunchShape shape_;
};

template <typename Launcher>
Launcher* make_launcher(Kernel& kernel, int64_t block_m, int64_t block_n, int64_t block_k,
                        int64_t num_blocks, int64_t num_threads, int64_t smem_bytes,
                        int64_t cluster_m, int64_t cluster_n, int64_t store_cols) {
  return new Launcher(kernel, LaunchShape{block_m, block_n, block_k, num_blocks, num_threads,
                                          smem_bytes, cluster_m, cluster_n, store_cols});
}

}  // namespace

void register_sm90_bf16_gemm(pybind11::module_& m) {
  namespace py = pybind11;
  auto shape_args = [](auto&& cls) {
    return cls.def(py::init(&make_launcher<typename std::decay_t<decltype(cls)>::type>),
                   py::arg("kernel"), py::arg("block_m"), py::arg("block_n"), py::arg("block_k"),
                   py::arg("num_blocks"), py::arg("num_threads"), py::arg("smem_bytes"),
                   py::arg("cluster_m"), py::arg("cluster_n"), py::arg("store_cols") = 0,
                   py::keep_alive<1, 2>());
  };
  shape_args(py::class_<GroupedLauncher>(
                 m, "Sm90Bf16GemmLauncher",
                 "Launches sm90_bf16_grouped_gemm (dense or m-grouped) with the kernel and its "
                 "launch shape bound. Call with (a_ptr, b_ptr, d_ptr, c_ptr, group_info_ptr, "
                 "rows, m, n, k, num_groups, lda, ldb, ldb_group, ldd, ldc, stream); strides in "
                 "elements, pointers 0 for absent C / group info. Never synchronizes."))
      .def("__call__", &GroupedLauncher::operator())
      .def_property_readonly("num_blocks", &GroupedLauncher::num_blocks);
  shape_args(py::class_<KGroupedLauncher>(
                 m, "Sm90Bf16KGroupedLauncher",
                 "Launches sm90_bf16_k_grouped_gemm with the kernel and its launch shape bound. "
                 "Call with (a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr, m, n, num_tokens, "
                 "num_groups, lda, ldb, stream). Never synchronizes."))
      .def("__call__", &KGroupedLauncher::operator());
}

}  // namespace moegemm
