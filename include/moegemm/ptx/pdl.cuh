// Programmatic dependent launch: wait until the previous grid's writes are visible; let the
// next grid begin its prologue. Both are no-ops when the launch did not enable PDL.
#pragma once

namespace moegemm {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" :::);
}

}  // namespace moegemm
