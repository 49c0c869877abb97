"""Argument checks shared by the public functions. Every violation raises before any launch,
naming the argument, what was expected and what was given."""

from __future__ import annotations

import torch

TMA_ALIGN_BYTES = 16


def require_tensor(name: str, t: object, dtypes: tuple[torch.dtype, ...], ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {expected}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")


def require_shape(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def require_cuda_device(device: torch.device, **tensors: torch.Tensor | None) -> None:
    """All operands on one CUDA device, the current one (kernels launch there)."""
    for name, t in tensors.items():
        if t is not None and t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name} is on {t.device} but the operands are on {device}")
    current = torch.cuda.current_device()
    if device.index != current:
        raise ValueError(
            f"operands are on {device} but the current CUDA device is cuda:{current}; "
            "call torch.cuda.set_device first"
        )


def row_stride(name: str, t: torch.Tensor) -> int:
    """Row stride in elements of a 2-D row-major operand, checked for TMA: unit inner stride,
    16-byte aligned base and rows."""
    rows, cols = t.shape
    if rows == 0 or cols == 0:
        return cols  # nothing is read or written, so neither stride nor address matters
    if rows > 0 and cols > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must be row-major (stride(1) == 1), got strides {t.stride()}")
    ld = t.stride(0) if rows > 1 else cols
    if ld < cols:
        raise ValueError(f"{name} rows overlap: stride(0) = {ld} < {cols} columns")
    _require_tma_alignment(name, t, {"row": ld})
    return ld


def _require_tma_alignment(name: str, t: torch.Tensor, strides: dict[str, int]) -> None:
    """TMA addresses rows in 16-byte units: every stride and the base must be multiples."""
    elem = t.element_size()
    for what, stride in strides.items():
        if (stride * elem) % TMA_ALIGN_BYTES != 0:
            raise ValueError(
                f"{name} {what} stride must be a multiple of {TMA_ALIGN_BYTES} bytes "
                f"({TMA_ALIGN_BYTES // elem} elements), got {stride} elements"
            )
    if t.data_ptr() % TMA_ALIGN_BYTES != 0:
        raise ValueError(f"{name} must start on a {TMA_ALIGN_BYTES}-byte boundary")


def batched_row_stride(name: str, t: torch.Tensor, *, collapsible: bool) -> tuple[int, int]:
    """(row stride, batch stride) in elements of a 3-D row-major operand [batch, rows, cols],
    checked for TMA. collapsible: the batches must tile one 2-D [batch * rows, cols] tensor
    (what a kernel that addresses rows across batches needs)."""
    batch, rows, cols = t.shape
    if batch == 0 or rows == 0 or cols == 0:
        return cols, rows * cols
    if cols > 1 and t.stride(2) != 1:
        raise ValueError(f"{name} must be row-major (stride(2) == 1), got strides {t.stride()}")
    ld = t.stride(1) if rows > 1 else cols
    ld_batch = t.stride(0) if batch > 1 else rows * ld
    if ld < cols:
        raise ValueError(f"{name} rows overlap: stride(1) = {ld} < {cols} columns")
    if collapsible and ld_batch != rows * ld:
        raise ValueError(
            f"{name} batches must be contiguous rows: stride(0) must be {rows * ld}, got {ld_batch}"
        )
    if ld_batch < rows * ld:
        raise ValueError(f"{name} batches overlap: stride(0) = {ld_batch} < {rows * ld}")
    _require_tma_alignment(name, t, {"row": ld, "batch": ld_batch})
    return ld, ld_batch


def require_index_vector(name: str, t: object, length: int) -> None:
    """A contiguous int32 vector of `length` entries (group indices, offsets, row counts)."""
    require_tensor(name, t, (torch.int32,), 1)
    if t.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},), got {tuple(t.shape)}")
    if length > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")
