// Host launcher of include/moegemm/impls/sm90_bf16_gemm: D[m, n] = A[m, k] . B[n, k]^T (+ C).
//
// This is the hot path of every BF16 GEMM call: the Python side has already checked shapes,
// picked the config and loaded the kernel, so this only encodes two TMA descriptors on the stack
// and launches. No allocation, no Python objects, no synchronization.
#include <pybind11/pybind11.h>

#include <stdint.h>

#include "launch.h"
#include "moegemm/common/sm90_gemm_params.h"
#include "tma.h"

namespace moegemm {
namespace {

constexpr uint32_t kBf16Bytes = 2;

inline void* as_ptr(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

void launch_sm90_bf16_gemm(Kernel& kernel, uint64_t a_ptr, uint64_t b_ptr, uint64_t d_ptr,
                           uint64_t c_ptr, int64_t m, int64_t n, int64_t k, int64_t lda,
                           int64_t ldb, int64_t ldd, int64_t ldc, int64_t d_is_fp32,
                           int64_t block_m, int64_t block_n, int64_t block_k, int64_t num_blocks,
                           int64_t num_threads, int64_t smem_bytes, int64_t cluster_m,
                           int64_t cluster_n, uint64_t stream) {
  // D's element type is a template parameter of the compiled kernel; the flag is part of the
  // uniform argument list the Python side passes but changes nothing here. It is an int, not a
  // bool, so pybind11 matches every argument in its first, no-conversion pass.
  (void)d_is_fp32;
  Sm90Bf16GemmParams params;
  params.m = checked_u32(m, "m");
  params.n = checked_u32(n, "n");
  params.k = checked_u32(k, "k");
  params.ldd = checked_u32(ldd, "ldd");
  params.ldc = checked_u32(ldc, "ldc");
  // An empty output has nothing to write, and a zero-sized TMA dimension would not encode.
  if (params.m == 0 || params.n == 0) return;

  const CUtensorMapDataType bf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  params.tma_a = make_tma_2d(as_ptr(a_ptr), bf16, kBf16Bytes, params.m, params.k,
                             checked_u32(lda, "lda"), checked_u32(block_m, "block_m"),
                             checked_u32(block_k, "block_k"), swizzle);
  params.tma_b = make_tma_2d(as_ptr(b_ptr), bf16, kBf16Bytes, params.n, params.k,
                             checked_u32(ldb, "ldb"), checked_u32(block_n, "block_n"),
                             checked_u32(block_k, "block_k"), swizzle);
  params.d = as_ptr(d_ptr);
  params.c = static_cast<const float*>(as_ptr(c_ptr));

  LaunchConfig config;
  config.grid_x = checked_u32(num_blocks, "num_blocks");
  config.block_x = checked_u32(num_threads, "num_threads");
  config.smem_bytes = checked_u32(smem_bytes, "smem_bytes");
  config.cluster_x = checked_u32(cluster_m * cluster_n, "cluster_m * cluster_n");
  config.stream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
  launch_with_params(kernel, config, params);
}

// The launch constants of one planned GEMM, bound once: the per-call binding then converts 12
// arguments instead of 22, a measurable share of a launch-bound call's host time.
class Sm90Bf16GemmLauncher {
 public:
  Sm90Bf16GemmLauncher(Kernel& kernel, int64_t block_m, int64_t block_n, int64_t block_k,
                       int64_t num_blocks, int64_t num_threads, int64_t smem_bytes,
                       int64_t cluster_m, int64_t cluster_n)
      : kernel_(kernel), block_m_(block_m), block_n_(block_n), block_k_(block_k),
        num_blocks_(num_blocks), num_threads_(num_threads), smem_bytes_(smem_bytes),
        cluster_m_(cluster_m), cluster_n_(cluster_n) {}

  void operator()(uint64_t a_ptr, uint64_t b_ptr, uint64_t d_ptr, uint64_t c_ptr, int64_t m,
                  int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldd, int64_t ldc,
                  uint64_t stream) {
    launch_sm90_bf16_gemm(kernel_, a_ptr, b_ptr, d_ptr, c_ptr, m, n, k, lda, ldb, ldd, ldc, 0,
                          block_m_, block_n_, block_k_, num_blocks_, num_threads_, smem_bytes_,
                          cluster_m_, cluster_n_, stream);
  }

 private:
  Kernel& kernel_;  // kept alive by the Python binding (keep_alive)
  int64_t block_m_, block_n_, block_k_, num_blocks_, num_threads_, smem_bytes_, cluster_m_,
      cluster_n_;
};

}  // namespace

void register_sm90_bf16_gemm(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<Sm90Bf16GemmLauncher>(
      m, "Sm90Bf16GemmLauncher",
      "launch_sm90_bf16_gemm with the kernel and its launch shape bound; call it with "
      "(a_ptr, b_ptr, d_ptr, c_ptr, m, n, k, lda, ldb, ldd, ldc, stream).")
      .def(py::init<Kernel&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t>(),
           py::arg("kernel"), py::arg("block_m"), py::arg("block_n"), py::arg("block_k"),
           py::arg("num_blocks"), py::arg("num_threads"), py::arg("smem_bytes"),
           py::arg("cluster_m"), py::arg("cluster_n"), py::keep_alive<1, 2>())
      .def("__call__", &Sm90Bf16GemmLauncher::operator());
  m.def("launch_sm90_bf16_gemm", &launch_sm90_bf16_gemm, py::arg("kernel"), py::arg("a_ptr"),
        py::arg("b_ptr"), py::arg("d_ptr"), py::arg("c_ptr"), py::arg("m"), py::arg("n"),
        py::arg("k"), py::arg("lda"), py::arg("ldb"), py::arg("ldd"), py::arg("ldc"),
        py::arg("d_is_fp32"), py::arg("block_m"), py::arg("block_n"), py::arg("block_k"),
        py::arg("num_blocks"), py::arg("num_threads"), py::arg("smem_bytes"),
        py::arg("cluster_m"), py::arg("cluster_n"), py::arg("stream"),
        "D[m, n] = A[m, k] . B[n, k]^T (+ C) with a JIT-compiled SM90 BF16 kernel. Pointers and "
        "the stream are ints; strides are row strides in elements; c_ptr 0 means no C. "
        "Asynchronous: never synchronizes.");
}

}  // namespace moegemm
