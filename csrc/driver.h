// The CUDA driver API, reached through dlopen("libcuda.so.1") at first use.
//
// The extension never links libcuda or libcudart, so it builds and imports on a machine without a
// GPU or driver (CI, the JIT warmup host); only calls that need the driver fail, with a message.
// Entry points are resolved through cuGetProcAddress with a pinned API version, so the driver
// hands out the ABI variant that matches the prototypes in the <cuda.h> we compiled against.
#pragma once

#include <cuda.h>

#include <string>

namespace moegemm {

// The driver API version whose function ABIs we request. 12.8 is the oldest driver that has every
// call used here (cuLibraryEnumerateKernels needs 12.4); newer drivers still honour the request.
constexpr int kDriverApiVersion = 12080;

#define MOEGEMM_DRIVER_FUNCS(X) \
  X(cuInit)                     \
  X(cuGetErrorName)             \
  X(cuGetErrorString)           \
  X(cuDeviceGet)                \
  X(cuDeviceGetAttribute)       \
  X(cuCtxGetDevice)             \
  X(cuLibraryLoadData)          \
  X(cuLibraryUnload)            \
  X(cuLibraryGetKernelCount)    \
  X(cuLibraryEnumerateKernels)  \
  X(cuKernelGetName)            \
  X(cuKernelGetAttribute)       \
  X(cuKernelSetAttribute)       \
  X(cuLaunchKernelEx)           \
  X(cuKernelGetFunction)        \
  X(cuOccupancyMaxActiveClusters) \
  X(cuTensorMapEncodeTiled)

// One function pointer per entry point, typed from the <cuda.h> prototype (decltype needs no
// definition, so nothing is linked).
struct DriverApi {
#define MOEGEMM_DECLARE_FUNC(name) decltype(&::name) name = nullptr;
  MOEGEMM_DRIVER_FUNCS(MOEGEMM_DECLARE_FUNC)
#undef MOEGEMM_DECLARE_FUNC
};

// Loads libcuda and runs cuInit(0) on the first call; throws std::runtime_error (a Python
// RuntimeError) when the driver is missing or cuInit fails. Later calls cost one guard check.
const DriverApi& driver();

// "cuFoo failed: CUDA_ERROR_BAR (description)".
std::string driver_error_message(const char* call, CUresult result);

// Out of line so the inline check below stays two instructions on the hot path.
[[noreturn]] void throw_driver_error(const char* call, CUresult result);

// Throws std::runtime_error with driver_error_message() unless result is CUDA_SUCCESS.
inline void check_driver(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw_driver_error(call, result);
}

// Calls driver().fn(args...) and turns a failure into an exception naming fn.
#define MOEGEMM_CU(fn, ...) ::moegemm::check_driver(::moegemm::driver().fn(__VA_ARGS__), #fn)

// The device of the calling thread's current context (torch makes the primary context current);
// throws a clear error when there is none.
CUdevice current_device();

}  // namespace moegemm
