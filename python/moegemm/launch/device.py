"""Runtime knobs and per-device facts, read from the driver once per device."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..heuristics import ArchSpec, arch_for, arch_for_compute_capability

_num_sms_override: int | None = None
_plan_caches: list[dict] = []  # plans depend on the SM count: cleared when it changes


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    arch: ArchSpec  # with the device's own SM count
    l2_bytes: int


@functools.cache
def device_info(index: int) -> DeviceInfo:
    from .. import _C

    props = _C.device_properties(index)
    arch_name = arch_for_compute_capability(props["cc_major"], props["cc_minor"])
    arch = arch_for(arch_name, props["num_sms"])
    return DeviceInfo(index=index, arch=arch, l2_bytes=props["l2_size"])


def register_plan_cache(cache: dict) -> dict:
    _plan_caches.append(cache)
    return cache


def registered_plan_caches() -> tuple[dict, ...]:
    """Every plan cache `set_num_sms` clears (tests and tools count plans with it)."""
    return tuple(_plan_caches)


def set_num_sms(num_sms: int | None) -> None:
    """Limit the SMs kernels occupy (e.g. to leave room for communication); None = all."""
    global _num_sms_override
    if num_sms is not None:
        # bool is an int in Python, but True is no SM count.
        if isinstance(num_sms, bool) or not isinstance(num_sms, int):
            raise TypeError(
                f"num_sms must be a positive int or None, got {type(num_sms).__name__} {num_sms!r}"
            )
        if num_sms <= 0:
            raise ValueError(f"num_sms must be a positive int or None, got {num_sms!r}")
    _num_sms_override = num_sms
    for cache in _plan_caches:
        cache.clear()


def set_workspace_limit(nbytes: int) -> None:
    """The most bytes of transient workspace one call may allocate from torch's caching
    allocator (the FP8 x FP4 convert-ahead kernel's E4M3 copy of the call's weights; the decode
    kernel's FP32 partial sums where its last wave is split along K, at most ~8.7 MB); calls
    needing more take kernels without one. 0 turns both off; the default is 4 GiB. Clears the
    plans and the config picks made under the previous limit."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__} {nbytes!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    from ..families import select_config
    from ..heuristics import sm90_fp8_fp4_convert_ahead

    sm90_fp8_fp4_convert_ahead.set_workspace_limit(nbytes)
    select_config.cache_clear()
    for cache in _plan_caches:
        cache.clear()


def get_workspace_limit() -> int:
    from ..heuristics import sm90_fp8_fp4_convert_ahead

    return sm90_fp8_fp4_convert_ahead.workspace_limit()


def get_num_sms(index: int | None = None) -> int:
    if _num_sms_override is not None:
        return _num_sms_override
    import torch

    return device_info(torch.cuda.current_device() if index is None else index).arch.num_sms


def arch_for_device(index: int) -> ArchSpec:
    arch = device_info(index).arch
    if _num_sms_override is not None:
        arch = arch.with_num_sms(min(_num_sms_override, arch.num_sms))
    return arch


def set_pdl(enabled: bool) -> None:
    """Launch kernels with programmatic dependent launch (on by default: overlaps each
    kernel's prologue with the previous kernel's tail; every kernel waits for its
    predecessor before touching global memory). TypeError for anything but a bool:
    bool('no') is True, so a string or an int would silently switch it on."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__} {enabled!r}")
    from .. import _C

    _C.set_pdl(enabled)


def get_pdl() -> bool:
    from .. import _C

    return bool(_C.get_pdl())
