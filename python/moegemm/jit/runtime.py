"""Loading compiled kernels into the process: memory first, then the disk cache."""

from __future__ import annotations

import threading
from typing import Any

from . import cache
from .spec import KernelSpec

_LOADED: dict[KernelSpec, Any] = {}
_LOCK = threading.Lock()


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
            except Exception as exc:  # noqa: BLE001 - whatever the driver says, the cubin is unusable
                cache.invalidate(spec, f"cubin failed to load: {exc}")
                _, data = cache.load_or_build(spec)
                kernel = _C.Kernel(data)
            _LOADED[spec] = kernel
    return kernel


def clear_loaded() -> None:
    """Forget in-process kernels (tests; after a cache wipe)."""
    with _LOCK:
        _LOADED.clear()
