#include "tma.h"

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

#include "driver.h"

namespace moegemm {
namespace {

// uint64_t is unsigned long and cuuint64_t unsigned long long on LP64: same bits, other type.
static_assert(sizeof(uint64_t) == sizeof(cuuint64_t), "cuuint64_t must be 64-bit");
static_assert(sizeof(uint32_t) == sizeof(cuuint32_t), "cuuint32_t must be 32-bit");

template <typename T>
void append_list(std::ostringstream& out, const char* label, const T* values, int count) {
  out << ' ' << label << "={";
  for (int i = 0; i < count; ++i) out << (i ? ", " : "") << values[i];
  out << '}';
}

int swizzle_bytes(CUtensorMapSwizzle swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
    default: return 0;
  }
}

// Everything cuTensorMapEncodeTiled reads, so equal keys give bit-identical descriptors.
struct TmaKey {
  void* ptr;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
  int32_t rank;
  int32_t dtype;
  int32_t swizzle;

  bool operator==(const TmaKey& other) const {
    return std::memcmp(this, &other, sizeof(*this)) == 0;
  }
};

struct TmaCacheEntry {
  TmaKey key;
  CUtensorMap desc;
  bool valid = false;
};

// Encoding costs about a microsecond of driver code per descriptor, a large share of a small
// GEMM's host time; inference calls reuse the same weight and activation buffers, so a small
// direct-mapped memo per thread (no locking) skips most encodes.
constexpr size_t kTmaCacheSlots = 64;
thread_local TmaCacheEntry g_tma_cache[kTmaCacheSlots];

size_t slot_of(const TmaKey& key) {
  uint64_t h = reinterpret_cast<uintptr_t>(key.ptr) * 0x9E3779B97F4A7C15ull;
  h ^= (key.dims[0] + 31 * key.dims[1]) * 0xC2B2AE3D27D4EB4Full;
  h ^= (static_cast<uint64_t>(key.box[0]) << 32 | key.box[1]) + key.dtype;
  return static_cast<size_t>(h ^ (h >> 29)) % kTmaCacheSlots;
}

CUtensorMap encode_tma_desc(void* ptr, CUtensorMapDataType dtype, int rank, const uint64_t* dims,
                            const uint64_t* strides_bytes, const uint32_t* box,
                            CUtensorMapSwizzle swizzle) {
  if (rank < 1 || rank > 5) {
    throw std::invalid_argument("moegemm: TMA rank must be 1..5, got " + std::to_string(rank));
  }
  static const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMap desc;
  CUresult result = driver().cuTensorMapEncodeTiled(
      &desc, dtype, static_cast<cuuint32_t>(rank), ptr, reinterpret_cast<const cuuint64_t*>(dims),
      reinterpret_cast<const cuuint64_t*>(strides_bytes), box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    // The driver only says "invalid value"; the arguments are what tells a bad stride from a bad
    // box or a misaligned pointer, so they go into the message.
    std::ostringstream out;
    out << driver_error_message("cuTensorMapEncodeTiled", result) << ":";
    out << " ptr=" << ptr << " dtype=" << static_cast<int>(dtype) << " rank=" << rank;
    append_list(out, "dims", dims, rank);
    append_list(out, "strides_bytes", strides_bytes, rank - 1);
    append_list(out, "box", box, rank);
    out << " swizzle=" << swizzle_bytes(swizzle) << "B";
    throw std::runtime_error(out.str());
  }
  return desc;
}

// The memo's entry for these arguments, encoded on a miss. The reference stays valid until the
// next encode on this thread: callers copy it out at once.
const CUtensorMap& memoised_tma_desc(void* ptr, CUtensorMapDataType dtype, int rank,
                                     const uint64_t* dims, const uint64_t* strides_bytes,
                                     const uint32_t* box, CUtensorMapSwizzle swizzle) {
  if (rank < 1 || rank > 5) {  // before the key, which holds at most 5 dims
    throw std::invalid_argument("moegemm: TMA rank must be 1..5, got " + std::to_string(rank));
  }
  TmaKey key;
  std::memset(&key, 0, sizeof(key));  // padding and unused dims take part in the comparison
  key.ptr = ptr;
  key.rank = rank;
  key.dtype = static_cast<int32_t>(dtype);
  key.swizzle = static_cast<int32_t>(swizzle);
  for (int i = 0; i < rank; ++i) {
    key.dims[i] = dims[i];
    key.box[i] = box[i];
    if (i + 1 < rank) key.strides[i] = strides_bytes[i];
  }
  TmaCacheEntry& entry = g_tma_cache[slot_of(key)];
  if (entry.valid && entry.key == key) return entry.desc;
  const CUtensorMap desc = encode_tma_desc(ptr, dtype, rank, dims, strides_bytes, box, swizzle);
  entry.key = key;
  entry.desc = desc;
  entry.valid = true;
  return entry.desc;
}

}  // namespace

CUtensorMap make_tma_desc(void* ptr, CUtensorMapDataType dtype, int rank, const uint64_t* dims,
                          const uint64_t* strides_bytes, const uint32_t* box,
                          CUtensorMapSwizzle swizzle) {
  return memoised_tma_desc(ptr, dtype, rank, dims, strides_bytes, box, swizzle);
}

void encode_tma_view(const TmaView& view, CUtensorMap& out) {
  // Straight from the memo into the params field: a 128-byte copy fewer than by value.
  out = memoised_tma_desc(view.ptr, view.dtype, view.rank, view.dims, view.strides_bytes,
                          view.box, view.swizzle);
}

CUtensorMapSwizzle swizzle_from_bytes(int bytes) {
  switch (bytes) {
    case 0: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      throw std::invalid_argument("moegemm: TMA swizzle must be 0, 32, 64 or 128 bytes, got " +
                                  std::to_string(bytes));
  }
}

}  // namespace moegemm
