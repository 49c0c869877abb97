// A fake libcuda.so.1 for CPU tests of moegemm._C's launchers (tests/unit/test_fake_driver.py).
//
// _C reaches the driver only through dlopen("libcuda.so.1") and cuGetProcAddress_v2, so a
// library of that name on LD_LIBRARY_PATH stands in for it: it hands out the entry points _C
// resolves (driver.h), records what the last launch received (launch shape, attributes, the
// bytes of the one params argument) and "encodes" TMA descriptors as the plain record of their
// arguments, so a test can read back exactly what the launcher passed. A few argument checks of
// the real driver are mimicked, so error paths can be tested too. Controlled through the
// extern "C" fake_* functions (ctypes).
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>
#include <type_traits>

#include "moegemm/common/sm90_gemm_params.h"

namespace {

// What fake encodes put into a CUtensorMap (it is 128 opaque bytes to _C).
struct FakeDesc {
  uint64_t magic;
  void* ptr;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
  int32_t dtype, rank, swizzle;
};
static_assert(sizeof(FakeDesc) <= sizeof(CUtensorMap), "a fake descriptor fits in a real one");
constexpr uint64_t kMagic = 0x4641'4B45'5444'4553ull;
constexpr int kNumDevices = 8;

struct State {
  std::vector<FakeDesc> encoded;  // every successful encode since fake_clear_encode_log()
  std::string encode_report;
  int max_active_clusters = 8;
  int kernel_count = 1;
  int smem_limit = 232448;  // the H200's opt-in maximum per block
  int context = 1;  // 0: none current; n: a context of device n - 1 (fake_set_context)
  int params_kind = 0;  // 0: Bf16GemmParams, 1: Bf16KGroupedParams
  // Counters and the last launch.
  int launches = 0, encodes = 0, set_attributes = 0, occupancy_queries = 0;
  CUlaunchConfig launch = {};
  unsigned cluster[3] = {0, 0, 0};
  int pdl = 0;
  unsigned occupancy_cluster = 0, occupancy_threads = 0, occupancy_smem = 0;
  alignas(64) unsigned char params[sizeof(moegemm::Bf16GemmParams) +
                                   sizeof(moegemm::Bf16KGroupedParams)];
  std::string report;
};
State g;

char g_library, g_kernel, g_function;  // their addresses are the handles

CUresult fake_cuInit(unsigned int) { return CUDA_SUCCESS; }

CUresult fake_cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; return CUDA_SUCCESS;
    default: *name = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult fake_cuGetErrorString(CUresult error, const char** text) {
  *text = error == CUDA_ERROR_INVALID_VALUE ? "invalid argument (fake driver)" : nullptr;
  return *text != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= kNumDevices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice) {
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = g.smem_limit; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 60 << 20; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetDevice(CUdevice* device) {
  if (g.context == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = g.context - 1;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryLoadData(CUlibrary* library, const void*, CUjit_option*, void**,
                                unsigned int, CUlibraryOption*, void**, unsigned int) {
  *library = reinterpret_cast<CUlibrary>(&g_library);
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryUnload(CUlibrary) { return CUDA_SUCCESS; }

CUresult fake_cuLibraryGetKernelCount(unsigned int* count, CUlibrary) {
  *count = static_cast<unsigned>(g.kernel_count);
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int, CUlibrary) {
  kernels[0] = reinterpret_cast<CUkernel>(&g_kernel);
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelGetName(const char** name, CUkernel) {
  *name = "fake_kernel";
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelGetAttribute(int* value, CUfunction_attribute, CUkernel, CUdevice) {
  *value = 168;
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel, CUdevice) {
  ++g.set_attributes;
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value > g.smem_limit) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelGetFunction(CUfunction* function, CUkernel) {
  *function = reinterpret_cast<CUfunction>(&g_function);
  return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void** args, void**) {
  ++g.launches;
  g.launch = *config;
  g.cluster[0] = g.cluster[1] = g.cluster[2] = 0;
  g.pdl = 0;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& attr = config->attrs[i];
    if (attr.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      g.cluster[0] = attr.value.clusterDim.x;
      g.cluster[1] = attr.value.clusterDim.y;
      g.cluster[2] = attr.value.clusterDim.z;
    } else if (attr.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      g.pdl = attr.value.programmaticStreamSerializationAllowed;
    }
  }
  const size_t bytes = g.params_kind == 0 ? sizeof(moegemm::Bf16GemmParams)
                                          : sizeof(moegemm::Bf16KGroupedParams);
  memcpy(g.params, args[0], bytes);
  return CUDA_SUCCESS;
}

CUresult fake_cuOccupancyMaxActiveClusters(int* clusters, CUfunction, const CUlaunchConfig* c) {
  ++g.occupancy_queries;
  g.occupancy_cluster = c->numAttrs == 1 ? c->attrs[0].value.clusterDim.x : 0;
  g.occupancy_threads = c->blockDimX;
  g.occupancy_smem = c->sharedMemBytes;
  *clusters = g.max_active_clusters;
  return CUDA_SUCCESS;
}

// The real driver's rules that the launchers' inputs can break: 16-byte aligned address and
// strides, non-zero dims, boxes of 1..256 elements.
CUresult fake_cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank,
                                     void* ptr, const cuuint64_t* dims, const cuuint64_t* strides,
                                     const cuuint32_t* box, const cuuint32_t*,
                                     CUtensorMapInterleave, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  ++g.encodes;
  if (rank < 1 || rank > 5 || reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeDesc desc = {};
  desc.magic = kMagic;
  desc.ptr = ptr;
  desc.dtype = static_cast<int32_t>(dtype);
  desc.rank = static_cast<int32_t>(rank);
  desc.swizzle = static_cast<int32_t>(swizzle);
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && strides[i] % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
    desc.dims[i] = dims[i];
    desc.box[i] = box[i];
    if (i + 1 < rank) desc.strides[i] = strides[i];
  }
  memset(map, 0, sizeof(*map));
  memcpy(map, &desc, sizeof(desc));
  g.encoded.push_back(desc);
  return CUDA_SUCCESS;
}

// Every fake has the exact type of the entry point it stands for (from <cuda.h>).
#define FAKE_FUNCS(X)                                                                          \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet) X(cuDeviceGetAttribute)       \
  X(cuCtxGetDevice) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernelCount)         \
  X(cuLibraryEnumerateKernels) X(cuKernelGetName) X(cuKernelGetAttribute)                      \
  X(cuKernelSetAttribute) X(cuLaunchKernelEx) X(cuKernelGetFunction)                           \
  X(cuOccupancyMaxActiveClusters) X(cuTensorMapEncodeTiled)
#define FAKE_CHECK_TYPE(name)                                                      \
  static_assert(std::is_same<decltype(&fake_##name), decltype(&::name)>::value, \
                #name " has the driver's type");
FAKE_FUNCS(FAKE_CHECK_TYPE)

void append_desc(std::string& out, const char* label, const CUtensorMap& map) {
  FakeDesc desc;
  memcpy(&desc, &map, sizeof(desc));
  char buf[512];
  if (desc.magic != kMagic) {
    snprintf(buf, sizeof(buf), " %s=unset", label);
  } else {
    snprintf(buf, sizeof(buf),
             " %s=ptr:%llu,dtype:%d,swizzle:%d,dims:%llu/%llu/%llu,strides:%llu/%llu,"
             "box:%u/%u/%u",
             label, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(desc.ptr)),
             desc.dtype, desc.swizzle, static_cast<unsigned long long>(desc.dims[0]),
             static_cast<unsigned long long>(desc.rank > 1 ? desc.dims[1] : 0),
             static_cast<unsigned long long>(desc.rank > 2 ? desc.dims[2] : 0),
             static_cast<unsigned long long>(desc.rank > 1 ? desc.strides[0] : 0),
             static_cast<unsigned long long>(desc.rank > 2 ? desc.strides[1] : 0), desc.box[0],
             desc.rank > 1 ? desc.box[1] : 0, desc.rank > 2 ? desc.box[2] : 0);
  }
  out += buf;
}

void append(std::string& out, const char* key, unsigned long long value) {
  out += ' ';
  out += key;
  out += '=';
  out += std::to_string(value);
}

unsigned long long address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                     CUdriverProcAddressQueryResult* status) {
#define FAKE_LOOKUP(name)                                 \
  if (strcmp(symbol, #name) == 0) {                       \
    *pfn = reinterpret_cast<void*>(&fake_##name);         \
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS; \
    return CUDA_SUCCESS;                                  \
  }
  FAKE_FUNCS(FAKE_LOOKUP)
#undef FAKE_LOOKUP
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

void fake_set_max_active_clusters(int clusters) { g.max_active_clusters = clusters; }
// 0: no context is current; n > 0: a context of device n - 1 is.
void fake_set_context(int device_plus_one) { g.context = device_plus_one; }
void fake_set_params_kind(int kind) { g.params_kind = kind; }
int fake_launches() { return g.launches; }
int fake_encodes() { return g.encodes; }
void fake_clear_encode_log() { g.encoded.clear(); }

// Every descriptor encoded since fake_clear_encode_log(), one a line, in encode order:
// "dtype swizzle rank dims/.. strides/.. box/..", the pointer left out.
const char* fake_encode_log() {
  std::string& out = g.encode_report;
  out.clear();
  char buf[512];
  for (const FakeDesc& d : g.encoded) {
    int n = snprintf(buf, sizeof(buf), "%d %d %d", d.dtype, d.swizzle, d.rank);
    for (int i = 0; i < d.rank; ++i) {
      n += snprintf(buf + n, sizeof(buf) - n, " %llu/%llu/%u",
                    static_cast<unsigned long long>(d.dims[i]),
                    static_cast<unsigned long long>(i + 1 < d.rank ? d.strides[i] : 0), d.box[i]);
    }
    out.append(buf);
    out.push_back('\n');
  }
  return out.c_str();
}
int fake_occupancy_queries() { return g.occupancy_queries; }

// The last launch and its params as "key=value" words, read by the tests.
const char* fake_last_launch() {
  std::string& out = g.report;
  out.clear();
  append(out, "grid", g.launch.gridDimX);
  append(out, "grid_yz", g.launch.gridDimY * g.launch.gridDimZ);
  append(out, "block", g.launch.blockDimX);
  append(out, "block_yz", g.launch.blockDimY * g.launch.blockDimZ);
  append(out, "smem", g.launch.sharedMemBytes);
  append(out, "stream", address(g.launch.hStream));
  append(out, "cluster", g.cluster[0]);
  append(out, "cluster_yz", g.cluster[1] * g.cluster[2]);
  append(out, "pdl", static_cast<unsigned>(g.pdl));
  append(out, "occupancy_cluster", g.occupancy_cluster);
  append(out, "occupancy_threads", g.occupancy_threads);
  append(out, "occupancy_smem", g.occupancy_smem);
  if (g.params_kind == 0) {
    moegemm::Bf16GemmParams p;
    memcpy(&p, g.params, sizeof(p));
    append_desc(out, "tma_a", p.tma_a);
    append_desc(out, "tma_b", p.tma_b);
    append_desc(out, "tma_d", p.tma_d);
    append(out, "d", address(p.d));
    append(out, "c", address(p.c));
    append(out, "group_info", address(p.group_info));
    append(out, "m", p.m);
    append(out, "rows", p.rows);
    append(out, "n", p.n);
    append(out, "k", p.k);
    append(out, "num_groups", p.num_groups);
    append(out, "ldd", p.ldd);
    append(out, "ldc", p.ldc);
  } else {
    moegemm::Bf16KGroupedParams p;
    memcpy(&p, g.params, sizeof(p));
    append_desc(out, "tma_a", p.tma_a);
    append_desc(out, "tma_b", p.tma_b);
    append_desc(out, "tma_d", p.tma_d);
    append(out, "d", address(p.d));
    append(out, "c", address(p.c));
    append(out, "offs", address(p.offs));
    append(out, "m", p.m);
    append(out, "n", p.n);
    append(out, "num_tokens", p.num_tokens);
    append(out, "num_groups", p.num_groups);
  }
  return out.c_str();
}

}  // extern "C"
