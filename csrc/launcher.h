// The generic host launcher of every kernel family, and its pybind11 registration.
//
// A family (one struct in a file of its own, e.g. sm90_bf16_gemm.cpp) says only what is its
// own: the params struct the kernel takes as its one `__grid_constant__` argument, the cluster
// shapes it was built for, and how one call's pointers and sizes fill that struct (scalars, plus
// the TMA descriptors as a list of views). Everything else is here, the same for all families:
//   plan time (once per plan, python/moegemm/launch/plans.py): the launch shape (grid, block,
//     dynamic shared memory, cluster), its limits, and the cluster occupancy clamp;
//   bind time (once per plan signature): launcher.bind(device, *integers) checks the integers
//     (the same range and tile-count checks as a launch) and returns a bound launch, a plain
//     Python callable taking only the pointers and the stream, which also checks what a plan's
//     signature cannot tell (operand alignment, the current device) and returns whether it ran;
//   call time (the hot path): fill, encode the listed descriptors (memoised, tma.cpp) into the
//     params' fields, launch on the caller's stream with PDL when switched on (launch.cpp).
// No allocation, no Python object, no synchronization per call. A bound launch converts six
// ints through CPython's vectorcall (no pybind11 dispatch) and keeps a descriptor memo keyed by
// the pointer alone (its dims, strides and boxes are fixed by the bound integers); the unbound
// call `launcher(*pointers, *integers, stream)` stays for tests and hand-made launches.
//
// The family interface (checked at compile time by FamilyLauncher's specialization):
//
//   struct MyFamily {
//     using Params = MyKernelParams;                       // include/moegemm/common/...
//     static constexpr const char* kName = "MyLauncher";   // the Python class name
//     static constexpr const char* kDoc = "...";           // the class's docstring
//     static constexpr const char* kInitDoc = "...";       // optional: __init__'s docstring
//     // The names of fill's trailing parameters (the call's arguments without the stream), for
//     // the signatures pybind11 writes (tools/gen_c_stub.py builds python/moegemm/_C.pyi from
//     // them), and the docstrings of __call__, bind and num_blocks.
//     static constexpr const char* kArgNames[] = {"a_ptr", ..., "ldc"};
//     static constexpr const char* kCallDoc = "...";
//     static constexpr const char* kBindDoc = "...";
//     static constexpr const char* kNumBlocksDoc = "...";
//     // The leading pointers a bound launch requires on 16-byte boundaries (0 = absent passes).
//     static constexpr size_t kNumAlignedPointers = 4;
//     // Plan time: refuse what the kernel was not built for (std::invalid_argument).
//     static void check_shape(const LaunchShape& shape);
//     // Call time: fill `params` and list its descriptors in `tma`; false = nothing to launch
//     // (an empty output). The call's Python arguments are the trailing parameters, then a
//     // stream the launcher adds itself: the pointers first (uint64_t), then the integers
//     // (int64_t), which a bound launch fixes. fill must depend on nothing else, and list the
//     // same descriptors with the same views whatever the pointers (the bound memo relies on it).
//     static bool fill(const LaunchShape& shape, Params& params, TmaList& tma, <args>...);
//   };
//   void register_my_family(pybind11::module_& m) { register_launcher<MyFamily>(m); }
//
// plus one line in module.cpp calling register_my_family. The families: sm90_bf16_gemm.cpp (two
// launchers) and sm90_fp8_fp4_gemm.cpp (FP8 activations x MXFP4 weights: two TMA descriptors and
// the scales' pointers and strides, which the kernel's producer copies itself).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <cuda.h>
#include <stdint.h>

#include <array>
#include <cstddef>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "driver.h"
#include "kernel.h"
#include "launch.h"
#include "tma.h"

namespace moegemm {

// A device address passed from Python as an int (tensor.data_ptr()).
inline void* as_ptr(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

// The launch shape of one planned kernel, from its GemmConfig; bound once per plan so the
// per-call binding converts only the per-call values (a measurable share of a launch-bound
// call's host time). The launcher uses num_blocks .. cluster_n; the tile fields are for the
// family's tile-count bound, the boxes for its TMA maps.
struct LaunchShape {
  int64_t block_m, block_n, block_k;
  int64_t num_blocks;  // persistent CTAs, whole clusters; clamped to those that fit at once
  int64_t num_threads;
  int64_t smem_bytes;  // dynamic shared memory per CTA
  // CTAs of a cluster along M and N, launched as one 1-D cluster of cluster_m * cluster_n along
  // x (the kernel's scheduler knows the split); the cluster shape must be the compiled one.
  int64_t cluster_m, cluster_n;
  TmaBox load_a, load_b;  // each CTA's box of A and of B (its share of a multicast tile)
  TmaBox load_sfb;        // the prepared scale words' box, where a kernel loads them by TMA
  TmaBox store_d;         // the TMA-store epilogue's box; absent: stores from registers

  int64_t cluster_size() const { return cluster_m * cluster_n; }
};

// Builds the LaunchConfig of a plan (everything but the stream and PDL, which are per call) and
// clamps shape.num_blocks: with clusters, to the clusters the device holds at once (persistent
// CTAs only help when all of them run together: clusters that do not fit beside the others would
// start after them and double the time of their share of the tiles). `launcher` names the
// Python class in errors. Out of line: it runs once per plan.
LaunchConfig plan_launch(Kernel& kernel, LaunchShape& shape, const char* launcher);

// The TMA descriptors of one launch: which params field each goes into and the view it encodes.
// Fixed capacity on the stack; a family lists its descriptors, the launcher encodes them all.
class TmaList {
 public:
  static constexpr int kCapacity = 8;

  // `field` must be a CUtensorMap member of the params object being filled.
  void add(CUtensorMap& field, const TmaView& view) {
    if (count_ == kCapacity) throw std::logic_error("moegemm: more than 8 TMA descriptors");
    fields_[count_] = &field;
    views_[count_] = view;
    ++count_;
  }

  void encode() const {
    for (int i = 0; i < count_; ++i) encode_tma_view(views_[i], *fields_[i]);
  }

  // The descriptors of one bound launch, keyed by their pointer alone: a bound launch lists the
  // same views every call but for the pointers, so an equal pointer means an equal descriptor.
  // Skips the shared memo's key building and hashing; a new pointer goes through it. Shared by
  // the threads calling one plan, and safe because a bound call never releases the GIL.
  struct BoundMemo {
    void* ptrs[kCapacity] = {};
    CUtensorMap descs[kCapacity];
    bool valid[kCapacity] = {};
  };

  void encode(BoundMemo& memo) const {
    for (int i = 0; i < count_; ++i) {
      if (!memo.valid[i] || memo.ptrs[i] != views_[i].ptr) {
        encode_tma_view(views_[i], memo.descs[i]);  // throws before the entry changes
        memo.ptrs[i] = views_[i].ptr;
        memo.valid[i] = true;
      }
      *fields_[i] = memo.descs[i];
    }
  }

 private:
  CUtensorMap* fields_[kCapacity];
  TmaView views_[kCapacity];
  int count_ = 0;
};

// Family::fill's trailing parameters become the call's arguments; the specialization below
// extracts them from fill's type (and fails to compile when fill does not fit the interface).
template <typename Family, typename Fill = decltype(&Family::fill)>
class FamilyLauncher;

// How many of fill's call arguments are pointers: the leading uint64_t ones.
template <typename... Args>
constexpr size_t leading_pointers() {
  constexpr bool is_pointer[] = {std::is_same_v<Args, uint64_t>..., false};
  size_t count = 0;
  while (count < sizeof...(Args) && is_pointer[count]) ++count;
  return count;
}

// A launch with its integers bound: what a Python call of it reaches, through CPython's
// vectorcall (launcher.cpp). `values` are the call's pointers, then the stream. Returns false,
// having done nothing, where the plan's own checks refuse the call (an operand base off a
// 16-byte boundary, or the current context not on the bound device): the caller then takes its
// full checks, which name the problem.
class BoundLaunch {
 public:
  explicit BoundLaunch(size_t num_values) : num_values_(num_values) {}
  virtual ~BoundLaunch() = default;
  size_t num_values() const { return num_values_; }
  virtual bool launch(const uint64_t* values) = 0;

 private:
  size_t num_values_;
};

// Wraps a bound launch as a Python callable, a builtin function (METH_FASTCALL: the cheapest
// call CPython has, no pybind11 dispatch). It owns `bound` and keeps `owner` (the launcher, and
// so its kernel) alive. Bad arguments raise TypeError; the launch's errors, as pybind11 would
// translate them (ValueError for std::invalid_argument, else RuntimeError).
pybind11::object make_bound_callable(std::unique_ptr<BoundLaunch> bound, pybind11::object owner);

template <typename Family, typename... Args>
class FamilyLauncher<Family, bool (*)(const LaunchShape&, typename Family::Params&, TmaList&,
                                      Args...)> {
 public:
  using Params = typename Family::Params;
  static constexpr size_t kNumPointers = leading_pointers<Args...>();
  static constexpr size_t kNumIntegers = sizeof...(Args) - kNumPointers;
  using Pointers = std::array<uint64_t, kNumPointers>;
  using Integers = std::array<int64_t, kNumIntegers>;
  using UnboundCall = void (FamilyLauncher::*)(Args..., uint64_t);

  FamilyLauncher(Kernel& kernel, const LaunchShape& shape) : kernel_(kernel), shape_(shape) {
    static_assert(std::is_same_v<std::tuple<Args...>, decltype(std::tuple_cat(
                      std::declval<Pointers>(), std::declval<Integers>()))>,
                  "fill's call arguments: uint64_t pointers, then int64_t integers");
    Family::check_shape(shape_);
    config_ = plan_launch(kernel_, shape_, Family::kName);
  }

  int64_t num_blocks() const { return shape_.num_blocks; }

  // The unbound call. `params` is filled field by field: what the kernel does not read (tma_d
  // when it stores from registers) stays unset, as it is never read.
  void operator()(Args... args, uint64_t stream) {
    Params params;
    TmaList tma;
    if (!Family::fill(shape_, params, tma, args...)) return;
    tma.encode();
    launch(params, stream);
  }

  // The bound call (the hot path of every plan): the same fill and launch on `device` (the
  // current context's), the integers from the bind and the descriptors from `memo`.
  void operator()(const Pointers& pointers, const Integers& integers, uint64_t stream,
                  TmaList::BoundMemo& memo, CUdevice device) {
    Params params;
    TmaList tma;
    if (!fill(params, tma, pointers, integers)) return;
    tma.encode(memo);
    launch(params, stream, device);
  }

  // Bind time: fill with null pointers runs every check of the integers (a bad one raises here,
  // when the plan is built, not at its first launch) and tells whether a launch writes anything.
  bool check_integers(const Integers& integers) const {
    Params params;
    TmaList tma;
    return fill(params, tma, Pointers{}, integers);
  }

 private:
  bool fill(Params& params, TmaList& tma, const Pointers& pointers,
            const Integers& integers) const {
    return fill(params, tma, pointers, integers, std::make_index_sequence<kNumPointers>{},
                std::make_index_sequence<kNumIntegers>{});
  }

  template <size_t... P, size_t... I>
  bool fill(Params& params, TmaList& tma, const Pointers& pointers, const Integers& integers,
            std::index_sequence<P...>, std::index_sequence<I...>) const {
    return Family::fill(shape_, params, tma, pointers[P]..., integers[I]...);
  }

  void launch(const Params& params, uint64_t stream, CUdevice device = current_device()) {
    LaunchConfig config = config_;
    config.stream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
    config.pdl = get_pdl();
    launch_with_params(kernel_, config, params, device);
  }

  Kernel& kernel_;  // kept alive by the binding (keep_alive)
  LaunchShape shape_;
  LaunchConfig config_;
};

// The bound launch of one FamilyLauncher: its device, integers and descriptor memo. The
// launcher's Python object is kept alive by the callable (make_bound_callable), so the
// launcher and its kernel outlive this.
template <typename Family, typename Launcher>
class FamilyBoundLaunch final : public BoundLaunch {
 public:
  FamilyBoundLaunch(Launcher& launcher, int device, const typename Launcher::Integers& integers)
      : BoundLaunch(Launcher::kNumPointers + 1),
        launcher_(launcher),
        device_(device_handle(device)),
        integers_(integers),
        launches_(launcher.check_integers(integers)) {}

  bool launch(const uint64_t* values) override {
    // What a plan's signature cannot tell, checked as the Python hit path used to: the operand
    // bases (the leading kNumAlignedPointers; 0 = absent passes) and the current device.
    uint64_t bases = 0;
    for (size_t i = 0; i < Family::kNumAlignedPointers; ++i) bases |= values[i];
    if (bases & 15) return false;
    const CUdevice device = current_device();  // throws where no context is current
    if (device != device_) return false;
    if (!launches_) return true;  // an empty output: as the unbound call, nothing is launched
    typename Launcher::Pointers pointers;
    for (size_t i = 0; i < Launcher::kNumPointers; ++i) pointers[i] = values[i];
    launcher_(pointers, integers_, values[Launcher::kNumPointers], memo_, device);
    return true;
  }

 private:
  static CUdevice device_handle(int ordinal) {
    CUdevice device = 0;
    MOEGEMM_CU(cuDeviceGet, &device, ordinal);
    return device;
  }

  static_assert(Family::kNumAlignedPointers <= Launcher::kNumPointers, "aligned pointers");
  Launcher& launcher_;
  CUdevice device_;
  typename Launcher::Integers integers_;
  bool launches_;
  TmaList::BoundMemo memo_;
};

template <size_t>
using Int64 = int64_t;
template <size_t>
using Uint64 = uint64_t;

// What bind returns, typed for the signature line: launch(*pointers, stream) -> bool.
template <size_t... P>
using BoundLaunchCallable = pybind11::typing::Callable<bool(Uint64<P>..., uint64_t)>;

// launcher.bind(device, *integers): a method taking the device ordinal and fill's integers one by
// one (named as the call's, positional only).
template <typename Family, typename Launcher, size_t... P, size_t... I>
auto bind_method(std::index_sequence<P...>, std::index_sequence<I...>) {
  return [](pybind11::object self, int device, Int64<I>... integers) {
    Launcher& launcher = self.cast<Launcher&>();
    auto bound = std::make_unique<FamilyBoundLaunch<Family, Launcher>>(
        launcher, device, typename Launcher::Integers{integers...});
    return BoundLaunchCallable<P...>(make_bound_callable(std::move(bound), std::move(self)));
  };
}

// Family::kInitDoc where the family has one, else no docstring.
template <typename Family, typename = void>
struct InitDoc {
  static constexpr const char* value = nullptr;
};
template <typename Family>
struct InitDoc<Family, std::void_t<decltype(Family::kInitDoc)>> {
  static constexpr const char* value = Family::kInitDoc;
};

// __call__ and bind, their arguments named by Family::kArgNames and positional only: a call
// passes them by position (pybind11 reads no keywords where none are passed), and the names
// reach the signature lines that tools/gen_c_stub.py turns into python/moegemm/_C.pyi.
template <typename Family, typename Launcher, size_t... A, size_t... I>
void def_calls(pybind11::class_<Launcher>& cls, std::index_sequence<A...>,
               std::index_sequence<I...>) {
  namespace py = pybind11;
  static_assert(std::size(Family::kArgNames) == sizeof...(A), "one name per call argument");
  cls.def("__call__", static_cast<typename Launcher::UnboundCall>(&Launcher::operator()),
          py::arg(Family::kArgNames[A])..., py::arg("stream"), py::pos_only(), Family::kCallDoc)
      .def("bind",
           bind_method<Family, Launcher>(std::make_index_sequence<Launcher::kNumPointers>{},
                                         std::index_sequence<I...>{}),
           py::arg("device"), py::arg(Family::kArgNames[Launcher::kNumPointers + I])...,
           py::pos_only(), Family::kBindDoc);
  // The names of bind's integers, in order: a plan fills them from a problem record by name
  // (python/moegemm/launch/plans.py), so no caller keeps the order by hand.
  cls.attr("bind_args") = py::make_tuple(py::str(Family::kArgNames[Launcher::kNumPointers + I])...);
}

// Binds FamilyLauncher<Family> as the Python class Family::kName:
//   Family::kName(kernel, block_m, block_n, block_k, num_blocks, num_threads, smem_bytes,
//                 cluster_m, cluster_n, *, <StorageConfig's boxes and swizzles>)
//                                                          plan time, keeps `kernel` alive
//   launcher(*fill's trailing args, stream)                call time, positional only
//   launcher.bind(device, *fill's integers) -> launch      plan time, positional only
//   launch(*fill's pointers, stream) -> bool               call time, a builtin function
//   launcher.num_blocks                                    CTAs launched, after the clamp
//   Family::kName.bind_args                                bind's integer names, in order
// tools/gen_c_stub.py writes python/moegemm/_C.pyi from these bindings; tests/unit/test_c_stub.py
// keeps the two in step.
// A StorageConfig box and its swizzle as the constructor takes them (keyword arguments named
// as StorageConfig's fields; (0, 0): no map).
inline TmaBox tma_box(const std::array<int64_t, 2>& box, int64_t swizzle) {
  if (box[0] < 0 || box[1] < 0 || box[0] > 256 || box[1] > 256 || (box[0] == 0) != (box[1] == 0)) {
    throw std::invalid_argument("moegemm: a TMA box spans 1..256 elements a dimension, or is (0, 0)");
  }
  return TmaBox{box[0], box[1], swizzle};
}

template <typename Family>
void register_launcher(pybind11::module_& m) {
  namespace py = pybind11;
  using Launcher = FamilyLauncher<Family>;
  using Box = std::array<int64_t, 2>;
  py::class_<Launcher> cls(m, Family::kName, Family::kDoc);
  cls.def(py::init([](Kernel& kernel, int64_t block_m, int64_t block_n, int64_t block_k,
                      int64_t num_blocks, int64_t num_threads, int64_t smem_bytes,
                      int64_t cluster_m, int64_t cluster_n, const Box& load_box_a,
                      const Box& load_box_b, int64_t swizzle_a, int64_t swizzle_b,
                      const Box& load_box_sfb, const Box& store_box_d, int64_t swizzle_d) {
            LaunchShape shape{block_m, block_n, block_k, num_blocks, num_threads, smem_bytes,
                              cluster_m, cluster_n};
            shape.load_a = tma_box(load_box_a, swizzle_a);
            shape.load_b = tma_box(load_box_b, swizzle_b);
            shape.load_sfb = tma_box(load_box_sfb, 0);
            shape.store_d = tma_box(store_box_d, swizzle_d);
            return new Launcher(kernel, shape);
          }),
          py::arg("kernel"), py::arg("block_m"), py::arg("block_n"), py::arg("block_k"),
          py::arg("num_blocks"), py::arg("num_threads"), py::arg("smem_bytes"),
          py::arg("cluster_m"), py::arg("cluster_n"), py::kw_only(),
          py::arg("load_box_a") = Box{0, 0}, py::arg("load_box_b") = Box{0, 0},
          py::arg("swizzle_a") = 0, py::arg("swizzle_b") = 0,
          py::arg("load_box_sfb") = Box{0, 0}, py::arg("store_box_d") = Box{0, 0},
          py::arg("swizzle_d") = 0, py::keep_alive<1, 2>(), InitDoc<Family>::value);
  def_calls<Family, Launcher>(
      cls, std::make_index_sequence<Launcher::kNumPointers + Launcher::kNumIntegers>{},
      std::make_index_sequence<Launcher::kNumIntegers>{});
  cls.def_property_readonly("num_blocks", &Launcher::num_blocks, Family::kNumBlocksDoc);
}

}  // namespace moegemm
