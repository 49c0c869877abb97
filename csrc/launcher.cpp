#include "launcher.h"

#include <Python.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moegemm {
namespace {

constexpr const char* kBoundCapsule = "moegemm.BoundLaunch";
constexpr size_t kMaxBoundValues = 16;

// What the capsule behind a bound callable holds.
struct BoundCallable {
  std::unique_ptr<BoundLaunch> bound;
  PyObject* owner;  // a strong reference: the launcher outlives `bound`
};

void destroy_bound_callable(PyObject* capsule) {
  auto* callable = static_cast<BoundCallable*>(PyCapsule_GetPointer(capsule, kBoundCapsule));
  if (callable == nullptr) return;
  callable->bound.reset();
  Py_XDECREF(callable->owner);
  delete callable;
}

// The hot path's whole Python boundary: six ints in, a bool out, C++ errors as Python ones.
PyObject* call_bound(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  auto* callable = static_cast<BoundCallable*>(PyCapsule_GetPointer(capsule, kBoundCapsule));
  if (callable == nullptr) return nullptr;
  BoundLaunch& bound = *callable->bound;
  if (nargs < 0 || static_cast<size_t>(nargs) != bound.num_values()) {
    PyErr_Format(PyExc_TypeError,
                 "moegemm: a bound launch takes %zu arguments (the pointers, then the stream), "
                 "got %zd", bound.num_values(), nargs);
    return nullptr;
  }
  uint64_t values[kMaxBoundValues];
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    // Exactly ints, as pybind11's uint64_t conversion without implicit conversion.
    values[i] = PyLong_Check(args[i]) ? PyLong_AsUnsignedLongLong(args[i]) : 0;
    if (!PyLong_Check(args[i]) || (values[i] == static_cast<uint64_t>(-1) && PyErr_Occurred())) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "moegemm: bound launch argument %zd must be an int in [0, 2**64) (a device "
                   "pointer or a stream), got %R", i, args[i]);
      return nullptr;
    }
  }
  bool launched = false;
  try {
    launched = bound.launch(values);
  } catch (pybind11::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return PyBool_FromLong(launched);
}

PyMethodDef g_bound_launch_def = {
    "launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&call_bound)),
    METH_FASTCALL,
    "launch(*pointers, stream, /) -> bool: the bound launcher's launch with these device "
    "pointers on this CUstream, the integers bound by launcher.bind; False, having done nothing, "
    "for an operand off a 16-byte boundary or a current context on another device. Never "
    "synchronizes."};

}  // namespace

pybind11::object make_bound_callable(std::unique_ptr<BoundLaunch> bound, pybind11::object owner) {
  if (bound->num_values() > kMaxBoundValues) {
    throw std::logic_error("moegemm: a bound launch takes at most 16 arguments");
  }
  auto* callable = new BoundCallable{std::move(bound), owner.release().ptr()};
  PyObject* capsule = PyCapsule_New(callable, kBoundCapsule, &destroy_bound_callable);
  if (capsule == nullptr) {
    Py_DECREF(callable->owner);
    delete callable;
    throw pybind11::error_already_set();
  }
  PyObject* function = PyCFunction_NewEx(&g_bound_launch_def, capsule, nullptr);
  Py_DECREF(capsule);  // the function holds it now (or it is freed with the callable)
  if (function == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(function);
}

LaunchConfig plan_launch(Kernel& kernel, LaunchShape& shape, const char* launcher) {
  const std::string name(launcher);
  const uint32_t cluster_size = checked_u32(shape.cluster_size(), "cluster_m * cluster_n");
  const uint32_t num_threads = checked_u32(shape.num_threads, "num_threads");
  const uint32_t smem_bytes = checked_u32(shape.smem_bytes, "smem_bytes");
  checked_u32(shape.num_blocks, "num_blocks");
  if (shape.cluster_m < 1 || shape.cluster_n < 1 || num_threads == 0) {
    throw std::invalid_argument(name + ": cluster_m, cluster_n and num_threads must be positive, "
                                "got " + std::to_string(shape.cluster_m) + ", " +
                                std::to_string(shape.cluster_n) + ", " +
                                std::to_string(shape.num_threads));
  }
  if (cluster_size > 1) {
    const int fit = kernel.max_active_clusters(cluster_size, num_threads, smem_bytes);
    if (fit < 1) {
      throw std::runtime_error(name + ": no cluster of " + std::to_string(cluster_size) +
                               " CTAs fits on this device");
    }
    shape.num_blocks = std::min<int64_t>(shape.num_blocks, int64_t{fit} * cluster_size);
  }
  // Checked here, once, rather than found by the driver at every launch.
  if (shape.num_blocks < 1 || shape.num_blocks % cluster_size != 0) {
    throw std::invalid_argument(name + ": num_blocks " + std::to_string(shape.num_blocks) +
                                " is not a positive multiple of the cluster size " +
                                std::to_string(cluster_size));
  }
  LaunchConfig config;
  config.grid_x = static_cast<uint32_t>(shape.num_blocks);
  config.block_x = num_threads;
  config.smem_bytes = smem_bytes;
  config.cluster_x = cluster_size;
  return config;
}

}  // namespace moegemm
