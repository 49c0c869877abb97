"""The full argument checks' building blocks. Every violation raises before any launch, naming
the argument as the caller passed it, what was expected and what was given.

A family's check runs in two steps: the *structure* (types, dtypes, ranks, shapes, strides,
contiguity), a function of the operands' signature alone, then the *placement* (16-byte
aligned bases, every operand on the current CUDA device), which can differ between calls of
one signature and is all that a plan hit re-checks (plans.py). The fake implementations of
the custom ops run the structure alone (fake tensors have no data pointers)."""

from __future__ import annotations

import torch

from ..heuristics import CONTIGUOUS_ALIGNMENT
from . import plans
from .plans import TMA_ALIGN_MASK

TMA_ALIGN_BYTES = TMA_ALIGN_MASK + 1


def require_tensor(name: str, t: object, dtypes: tuple[torch.dtype, ...], ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested or t.layout is not torch.strided:
        layout = "nested" if t.is_nested else str(t.layout)
        raise TypeError(f"{name} must be a dense (strided) tensor, got a {layout} tensor")
    if t.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {expected}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")


def require_shape(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def _require_stride_alignment(name: str, t: torch.Tensor, strides: dict[str, int]) -> None:
    """TMA addresses rows in 16-byte units: every stride must be a multiple."""
    elem = t.element_size()
    for what, stride in strides.items():
        if (stride * elem) % TMA_ALIGN_BYTES != 0:
            raise ValueError(
                f"{name} {what} stride must be a multiple of {TMA_ALIGN_BYTES} bytes "
                f"({TMA_ALIGN_BYTES // elem} elements), got {stride} elements"
            )


def row_stride(name: str, t: torch.Tensor) -> int:
    """Row stride in elements of a 2-D row-major operand, checked for TMA: unit inner stride,
    16-byte aligned rows (the base is a placement check: require_placement)."""
    rows, cols = t.shape
    if rows == 0 or cols == 0:
        return cols  # nothing is read or written, so neither stride nor address matters
    if cols > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must be row-major (stride(1) == 1), got strides {t.stride()}")
    ld = t.stride(0) if rows > 1 else cols
    if ld < cols:
        raise ValueError(f"{name} rows overlap: stride(0) = {ld} < {cols} columns")
    _require_stride_alignment(name, t, {"row": ld})
    return ld


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
    _require_stride_alignment(name, t, {"row": ld, "batch": ld_batch})
    return ld, ld_batch


def require_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")


def require_index_vector(name: str, t: object, length: int) -> None:
    """A contiguous int32 vector of `length` entries (group indices, offsets, row counts)."""
    require_tensor(name, t, (torch.int32,), 1)
    if t.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},), got {tuple(t.shape)}")
    if length > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride(0)}")


def contiguous_group_info(
    rows: int, num_groups: int, m_indices: object, offs: object
) -> dict[str, torch.Tensor]:
    """The contiguous layouts' group integers, checked: exactly one of m_indices (int32 [rows],
    rows a multiple of CONTIGUOUS_ALIGNMENT) or offs (int32 [num_groups]); returns it by the
    name the caller passed it under (for require_placement)."""
    if (m_indices is None) == (offs is None):
        raise ValueError("pass exactly one of m_indices (per-row groups) or offs (group ends)")
    if m_indices is not None:
        require_index_vector("m_indices", m_indices, rows)
        if rows % CONTIGUOUS_ALIGNMENT != 0:
            raise ValueError(
                f"with m_indices, M must be a multiple of {CONTIGUOUS_ALIGNMENT} (each group's "
                f"segment is padded to it), got {rows}"
            )
        return {"m_indices": m_indices}
    require_index_vector("offs", offs, num_groups)
    return {"offs": offs}


def require_placement(tma: dict[str, torch.Tensor | None], others: dict[str, torch.Tensor]) -> int:
    """The checks a plan hit repeats: every non-empty TMA operand in `tma` starts on a 16-byte
    boundary, then all operands (`tma` and `others`, named as the caller passed them) sit on
    one CUDA device, the current one. Returns its index. Alignment comes first so that every
    rule but the device can be exercised with CPU tensors."""
    for name, t in tma.items():
        if t is not None and t.numel() and t.data_ptr() & TMA_ALIGN_MASK:
            raise ValueError(f"{name} must start on a {TMA_ALIGN_BYTES}-byte boundary")
    tensors = {name: t for name, t in (*tma.items(), *others.items()) if t is not None}
    for name, t in tensors.items():
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    first, device = next(iter(tensors.items()))[0], next(iter(tensors.values())).device
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {first} is on {device}")
    current = plans.current_device()
    if device.index != current:
        raise ValueError(
            f"operands are on {device} but the current CUDA device is cuda:{current}; "
            "call torch.cuda.set_device first"
        )
    return device.index


def require_expected_m(expected_m: object, *, symbolic: bool = False) -> None:
    """expected_m, which only steers the kernel choice: a positive int (a TypeError for any
    other type, bool included; a ValueError for a non-positive one). symbolic: the fake
    implementations', where Dynamo traces a value that varies between calls as a SymInt."""
    ints = (int, torch.SymInt) if symbolic else int
    if isinstance(expected_m, bool) or not isinstance(expected_m, ints):
        raise TypeError(f"expected_m must be a positive int, got {expected_m!r}")
    if expected_m <= 0:
        raise ValueError(f"expected_m must be a positive int, got {expected_m!r}")


def sfa_strides(sfa: torch.Tensor) -> tuple[int, int, int]:
    """(group, row, k-block) strides in floats of FP8 activation scales sfa [.., M, nkb], any
    layout (row-major, or DeepGEMM's MN-major TMA-aligned one); a dim of size 1 gets the
    row-major stride (its index is always 0)."""
    shape, strides = sfa.shape, sfa.stride()
    kb = strides[-1] if shape[-1] > 1 else 1
    row = strides[-2] if shape[-2] > 1 else shape[-1] * kb
    if sfa.dim() == 3:
        return (strides[0] if shape[0] > 1 else shape[1] * row), row, kb
    return 0, row, kb


def refuse_config_when_compiling(config: object) -> None:
    """Under torch.compile a call is a custom op, whose schema has no place for a config."""
    if config is not None:
        raise TypeError(
            "config= forces a kernel in eager calls only; under torch.compile the heuristics "
            "choose (the custom op takes no config)"
        )
