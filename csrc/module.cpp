// Python bindings of moegemm._C: the torch-free runtime (cubin loading, TMA descriptors, launch).
//
// Errors: driver failures raise RuntimeError naming the call; bad arguments raise ValueError
// (std::invalid_argument). Nothing here synchronizes or takes ownership of device memory.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <stdint.h>

#include <string>
#include <vector>

#include "driver.h"
#include "kernel.h"
#include "launch.h"
#include "tma.h"

namespace py = pybind11;

namespace moegemm {

// One registration function per family file (each calls register_launcher<Family>, launcher.h);
// a new kernel family adds a file and a line here.
void register_sm90_bf16_gemm(py::module_& m);
void register_sm90_fp8_fp4_gemm(py::module_& m);
void register_sm100_fp8_fp4_gemm(py::module_& m);
void register_moe_kernels(py::module_& m);
void register_ep_kernels(py::module_& m);

namespace {

// Typed for the signature line (dict[str, int]), which tools/gen_c_stub.py puts in the stub.
py::typing::Dict<py::str, py::int_> device_properties(int ordinal) {
  CUdevice device = 0;
  MOEGEMM_CU(cuDeviceGet, &device, ordinal);
  auto attribute = [device](CUdevice_attribute attr) {
    int value = 0;
    MOEGEMM_CU(cuDeviceGetAttribute, &value, attr, device);
    return value;
  };
  py::typing::Dict<py::str, py::int_> props;
  props["num_sms"] = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  props["smem_per_block_optin"] = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  props["l2_size"] = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  props["cc_major"] = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  props["cc_minor"] = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  return props;
}

CUtensorMapDataType tma_dtype(const std::string& name) {
  if (name == "bf16") return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if (name == "fp32") return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  // FP8 and packed FP4 are moved as raw bytes: TMA never converts, so UINT8 describes both.
  if (name == "u8" || name == "fp8") return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  throw std::invalid_argument("moegemm: TMA dtype must be one of bf16, fp32, u8, fp8; got '" +
                              name + "'");
}

py::bytes encode_tma_desc(uint64_t ptr, const std::string& dtype,
                          const std::vector<uint64_t>& dims,
                          const std::vector<uint64_t>& strides_bytes,
                          const std::vector<uint32_t>& box, int swizzle_bytes) {
  const size_t rank = dims.size();
  if (rank < 1 || rank > 5 || box.size() != rank || strides_bytes.size() + 1 != rank) {
    throw std::invalid_argument(
        "moegemm: encode_tma_desc needs 1..5 dims, as many box sizes and one stride fewer; got " +
        std::to_string(dims.size()) + " dims, " + std::to_string(strides_bytes.size()) +
        " strides, " + std::to_string(box.size()) + " box sizes");
  }
  CUtensorMap desc = make_tma_desc(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)),
                                   tma_dtype(dtype), static_cast<int>(rank), dims.data(),
                                   strides_bytes.data(), box.data(),
                                   swizzle_from_bytes(swizzle_bytes));
  return py::bytes(reinterpret_cast<const char*>(&desc), sizeof(desc));
}

}  // namespace
}  // namespace moegemm

PYBIND11_MODULE(_C, m) {
  using namespace moegemm;
  m.doc() = "moegemm runtime: loads JIT-compiled cubins, encodes TMA descriptors, launches "
            "kernels. Reaches the CUDA driver through dlopen, so it imports without one.";

  // The docstrings below are also the stub's (tools/gen_c_stub.py).
  py::class_<Kernel>(m, "Kernel",
                     "A cubin holding exactly one kernel, loaded with cuLibraryLoadData; unloaded "
                     "on deletion.")
      .def(py::init([](py::bytes cubin) { return new Kernel(std::string(cubin)); }),
           py::arg("cubin"))
      .def_property_readonly("name", &Kernel::name, "The kernel's (mangled) name.")
      .def_property_readonly("num_regs", &Kernel::num_regs,
                             "Registers per thread on the current context's device.");

  m.def("cubin_kernel_count",
        [](py::bytes cubin) { return cubin_kernel_count(std::string(cubin)); }, py::arg("cubin"),
        "Number of kernels in a cubin (loads and unloads it).");
  m.def("device_properties", &device_properties, py::arg("device"),
        "Keys: num_sms, smem_per_block_optin, l2_size, cc_major, cc_minor.");
  m.def("encode_tma_desc", &encode_tma_desc, py::arg("ptr"), py::arg("dtype"), py::arg("dims"),
        py::arg("strides_bytes"), py::arg("box"), py::arg("swizzle_bytes"),
        "The 128-byte CUtensorMap. dtype: \"bf16\", \"fp32\", \"u8\" or \"fp8\"; dims and box "
        "innermost first; strides_bytes has len(dims) - 1 entries (dims 1..); swizzle_bytes: 0, "
        "32, 64, 128.");
  m.def("set_pdl", &set_pdl, py::arg("enabled"),
        "Turn programmatic dependent launch on (the default) or off for later launches.");
  m.def("get_pdl", &get_pdl, "Whether launches use programmatic dependent launch.");
  m.attr("DRIVER_API_VERSION") = kDriverApiVersion;

  register_sm90_bf16_gemm(m);
  register_sm90_fp8_fp4_gemm(m);
  register_sm100_fp8_fp4_gemm(m);
  register_moe_kernels(m);
  register_ep_kernels(m);
}
