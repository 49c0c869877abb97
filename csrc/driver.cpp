#include "driver.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace moegemm {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

DriverApi load_driver() {
  // RTLD_LOCAL keeps libcuda's symbols out of the global namespace other extensions see.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(std::string("moegemm: libcuda.so.1 could not be loaded (") +
                             (why != nullptr ? why : "unknown dlopen error") +
                             "); a CUDA driver is needed to run kernels");
  }
  // Deliberately never dlclosed: function pointers and loaded libraries outlive any scope here.
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    throw std::runtime_error(
        "moegemm: libcuda.so.1 has no cuGetProcAddress_v2; the CUDA driver is too old "
        "(moegemm needs a driver for CUDA 12.8 or newer)");
  }

  DriverApi api;
  auto resolve = [&](const char* name, void** slot) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult result = get_proc(name, slot, kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || *slot == nullptr) {
      const char* reason = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                               ? "the driver is older than this entry point"
                               : "symbol not found";
      throw std::runtime_error(std::string("moegemm: cuGetProcAddress could not resolve ") + name +
                               " (" + reason + "); moegemm needs a CUDA 12.8 or newer driver");
    }
  };
#define MOEGEMM_RESOLVE_FUNC(name) resolve(#name, reinterpret_cast<void**>(&api.name));
  MOEGEMM_DRIVER_FUNCS(MOEGEMM_RESOLVE_FUNC)
#undef MOEGEMM_RESOLVE_FUNC

  // cuInit is idempotent; a failure (no device, driver/library mismatch) propagates, and the
  // static below stays uninitialized so the next call retries.
  CUresult result = api.cuInit(0);
  if (result != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    api.cuGetErrorName(result, &name);
    api.cuGetErrorString(result, &text);
    throw std::runtime_error(std::string("cuInit failed: ") + (name ? name : "CUDA_ERROR_?") +
                             " (" + (text ? text : "no description") + ")");
  }
  return api;
}

}  // namespace

const DriverApi& driver() {
  // A function-local static: thread-safe one-time init, and a throw leaves it to be retried.
  static const DriverApi api = load_driver();
  return api;
}

std::string driver_error_message(const char* call, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& api = driver();
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = nullptr;
  if (api.cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) text = nullptr;
  std::string message = std::string(call) + " failed: ";
  message += name != nullptr ? name : "CUDA_ERROR_" + std::to_string(static_cast<int>(result));
  message += " (";
  message += text != nullptr ? text : "unrecognized error code";
  message += ")";
  return message;
}

void throw_driver_error(const char* call, CUresult result) {
  throw std::runtime_error(driver_error_message(call, result));
}

CUdevice current_device() {
  CUdevice device = 0;
  CUresult result = driver().cuCtxGetDevice(&device);
  if (result == CUDA_ERROR_INVALID_CONTEXT) {
    throw std::runtime_error(
        "moegemm: no CUDA context is current on this thread; touch the device from torch first "
        "(e.g. torch.cuda.init() or allocate a CUDA tensor) before launching kernels");
  }
  check_driver(result, "cuCtxGetDevice");
  return device;
}

}  // namespace moegemm
