"""Loading compiled kernels into the process: memory first, then the disk cache."""

from __future__ import annotations

import threading
from typing import Any

from . import cache
from .spec import KernelSpec

_LOADED: dict[KernelSpec, Any] = {}
_LOCK = threading.Lock()

# What `_C.Kernel` says of an image that is itself unusable (truncated, not a cubin, another
# arch, not one kernel). Anything else (out of memory, a context in an error state, no driver)
# says nothing about the cached file: deleting it would cost every process of a shared, prebuilt
# cache its kernel, and on an image without nvcc there is no way back.
_BAD_IMAGE_MARKS = (
    "not a complete cubin",
    "exactly one kernel",
    "CUDA_ERROR_INVALID_IMAGE",
    "CUDA_ERROR_NO_BINARY_FOR_GPU",
    "CUDA_ERROR_INVALID_SOURCE",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
)


def is_bad_image(exc: BaseException) -> bool:
    """Whether a kernel load failure blames the cubin bytes rather than the process."""
    message = str(exc)
    return any(mark in message for mark in _BAD_IMAGE_MARKS)


def load_kernel(spec: KernelSpec) -> Any:
    """A `moegemm._C.Kernel` for spec. A cached kernel loads without nvcc; a missing one is
    compiled, or raises cache.KernelNotCachedError where it cannot be (no nvcc, read-only
    cache). A cubin the driver refuses is reported, removed from the cache and rebuilt once."""
    kernel = _LOADED.get(spec)
    if kernel is not None:
        return kernel
    from moegemm import _C  # lazy: the extension initialises CUDA state

    with _LOCK:
        kernel = _LOADED.get(spec)
        if kernel is None:
            _, data = cache.load_or_build(spec)
            try:
                kernel = _C.Kernel(data)
            except Exception as exc:
                if not is_bad_image(exc):
                    raise
                cache.invalidate(spec, f"cubin failed to load: {exc}")
                _, data = cache.load_or_build(spec)
                kernel = _C.Kernel(data)
            _LOADED[spec] = kernel
    return kernel


def clear_loaded() -> None:
    """Forget in-process kernels (tests; after a cache wipe)."""
    with _LOCK:
        _LOADED.clear()
