#include "kernel.h"

#include <elf.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "driver.h"

namespace moegemm {
namespace {

// cuLibraryLoadData takes no size: the driver trusts the ELF headers and reads wherever they
// point, so a truncated cubin (a half-written cache file) would crash the process instead of
// failing. Everything the headers reference must lie inside the image.
void validate_cubin(const std::string& image) {
  auto refuse = [&](const char* why) {
    throw std::runtime_error(std::string("moegemm: refusing cuLibraryLoadData on an image that ") +
                             "is not a complete cubin (" + why + "; " +
                             std::to_string(image.size()) + " bytes)");
  };
  // Anything that is not ELF or fatbin the driver takes for NUL-terminated PTX and JIT-compiles:
  // garbage would "load" as a library with zero kernels.
  if (image.size() < sizeof(Elf64_Ehdr) || image.compare(0, SELFMAG, ELFMAG) != 0) {
    refuse("no ELF header");
  }
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_machine != EM_CUDA) {
    refuse("not a 64-bit CUDA ELF");
  }
  const uint64_t size = image.size();
  auto inside = [size](uint64_t offset, uint64_t count, uint64_t entry) {
    return offset <= size && count <= (size - offset) / (entry ? entry : 1);
  };
  if (!inside(header.e_shoff, header.e_shnum, header.e_shentsize) ||
      !inside(header.e_phoff, header.e_phnum, header.e_phentsize) ||
      (header.e_shnum > 0 && header.e_shentsize < sizeof(Elf64_Shdr)) ||
      (header.e_phnum > 0 && header.e_phentsize < sizeof(Elf64_Phdr))) {
    refuse("truncated: header tables past the end");
  }
  for (uint16_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section;
    std::memcpy(&section, image.data() + header.e_shoff + uint64_t(i) * header.e_shentsize,
                sizeof(section));
    if (section.sh_type != SHT_NOBITS && !inside(section.sh_offset, section.sh_size, 1)) {
      refuse("truncated: a section past the end");
    }
  }
  for (uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, image.data() + header.e_phoff + uint64_t(i) * header.e_phentsize,
                sizeof(segment));
    if (!inside(segment.p_offset, segment.p_filesz, 1)) refuse("truncated: a segment past the end");
  }
}

CUlibrary load_library(const std::string& image) {
  validate_cubin(image);
  CUlibrary library = nullptr;
  // No JIT or library options: the image is an sm_90a/sm_100a cubin, never PTX.
  MOEGEMM_CU(cuLibraryLoadData, &library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  return library;
}

unsigned int kernel_count(CUlibrary library) {
  unsigned int count = 0;
  CUresult result = driver().cuLibraryGetKernelCount(&count, library);
  if (result != CUDA_SUCCESS) {
    driver().cuLibraryUnload(library);
    throw_driver_error("cuLibraryGetKernelCount", result);
  }
  return count;
}

}  // namespace

Kernel::Kernel(std::string cubin) : image_(std::move(cubin)) {
  smem_set_.fill(-1);
  library_ = load_library(image_);
  unsigned int count = kernel_count(library_);
  if (count != 1) {
    driver().cuLibraryUnload(library_);
    library_ = nullptr;
    // The driver reports no error for a cubin of another architecture: it just has no kernels.
    throw std::runtime_error(
        "moegemm: a kernel cubin must hold exactly one kernel, this one holds " +
        std::to_string(count) +
        (count == 0 ? " (a cubin built for another GPU architecture loads with none)" : ""));
  }
  CUresult result = driver().cuLibraryEnumerateKernels(&kernel_, 1, library_);
  if (result != CUDA_SUCCESS) {
    driver().cuLibraryUnload(library_);
    library_ = nullptr;
    throw_driver_error("cuLibraryEnumerateKernels", result);
  }
}

Kernel::~Kernel() {
  // Errors are ignored: a destructor must not throw, and at interpreter exit the driver may
  // already be shutting down (CUDA_ERROR_DEINITIALIZED).
  if (library_ != nullptr) driver().cuLibraryUnload(library_);
}

std::string Kernel::name() const {
  const char* name = nullptr;
  MOEGEMM_CU(cuKernelGetName, &name, kernel_);
  return name != nullptr ? std::string(name) : std::string();
}

int Kernel::num_regs() const {
  int regs = 0;
  MOEGEMM_CU(cuKernelGetAttribute, &regs, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel_, current_device());
  return regs;
}

void Kernel::ensure_dynamic_smem(CUdevice device, int bytes) {
  bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && smem_set_[device] == bytes) return;
  MOEGEMM_CU(cuKernelSetAttribute, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes, kernel_,
             device);
  if (cacheable) smem_set_[device] = bytes;
}

int Kernel::max_active_clusters(uint32_t cluster_x, uint32_t threads, uint32_t smem_bytes) {
  const CUdevice device = current_device();
  ensure_dynamic_smem(device, static_cast<int>(smem_bytes));
  CUfunction function = nullptr;
  MOEGEMM_CU(cuKernelGetFunction, &function, kernel_);
  CUlaunchAttribute attr;
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = cluster_x;
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig config = {};
  config.gridDimX = cluster_x;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = smem_bytes;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  MOEGEMM_CU(cuOccupancyMaxActiveClusters, &clusters, function, &config);
  return clusters;
}

unsigned int cubin_kernel_count(const std::string& cubin) {
  CUlibrary library = load_library(cubin);
  unsigned int count = kernel_count(library);
  driver().cuLibraryUnload(library);
  return count;
}

}  // namespace moegemm
