"""The public GEMMs as `torch.library` custom ops, for torch.compile.

Dynamo cannot trace the eager path (it reads data pointers, the current device and calls the
pybind launcher), so while it traces, each public function calls its op instead
(`torch.compiler.is_compiling()`); eager calls never touch the dispatcher. Each op mutates `d`
alone and returns nothing (a custom op may not return an alias of an input); its fake
implementation runs the structural checks, so a bad shape fails at trace time with the same
message, and leaves `d` as it is. `config=` is an eager-only knob and not part of any op.

The real implementations call the public functions: they run when the compiled graph runs,
where `is_compiling()` is False, so they take the eager path with its plans."""

# No `from __future__ import annotations`: torch.library reads the annotations as types.

from collections.abc import Callable

from torch import Tensor

from ..launch.ops import custom_op
from . import fp8_fp4
from .bf16_gemm import bf16_gemm_nt, check_dense
from .k_grouped import check_k_grouped, k_grouped_bf16_gemm_tn_contiguous
from .m_grouped import (
    check_contiguous,
    check_masked,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
)
from .mxfp4_weights import Mxfp4Weights


def _op(name: str, check: Callable[..., object]) -> Callable:
    """The custom op moegemm::<name>, which writes `d`; its fake runs `check` (the function's
    full checks) on the call's arguments without the placement (placed=False: fake tensors
    have no data), `prepared` passed by keyword (`windowed` steers the kernel choice only)."""

    def fake(operands: dict[str, object]) -> None:
        layout = {"prepared": operands.pop("prepared")} if "prepared" in operands else {}
        operands.pop("windowed", None)
        check(*operands.values(), placed=False, **layout)

    return custom_op(name, ("d",), fake)


@_op("bf16_gemm_nt", check_dense)
def bf16_gemm_nt_op(a: Tensor, b: Tensor, d: Tensor, c: Tensor | None = None) -> None:
    bf16_gemm_nt(a, b, d, c)


@_op("m_grouped_bf16_gemm_nt_contiguous", check_contiguous)
def m_grouped_contiguous_op(
    a: Tensor,
    b: Tensor,
    d: Tensor,
    m_indices: Tensor | None = None,
    offs: Tensor | None = None,
) -> None:
    m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, offs=offs)


@_op("m_grouped_bf16_gemm_nt_masked", check_masked)
def m_grouped_masked_op(a: Tensor, b: Tensor, d: Tensor, masked_m: Tensor, expected_m: int) -> None:
    m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


@_op("k_grouped_bf16_gemm_tn_contiguous", check_k_grouped)
def k_grouped_op(a: Tensor, b: Tensor, d: Tensor, offs: Tensor, c: Tensor | None = None) -> None:
    k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, c)


# FP8 x FP4: the operand pairs are flattened (a schema has no tuples nor dataclasses), and
# `prepared` (then `windowed`, last) say which weight layout b holds (an Mxfp4Weights of
# prepare_mxfp4_weights, or the checkpoint's (b, sfb)): the real impls rebuild the second
# operand from them.


def _weights(b: Tensor, sfb: Tensor, prepared: bool, windowed: bool) -> object:
    if not prepared:
        return (b, sfb)
    return Mxfp4Weights(b, sfb, prepared=True, windowed=windowed)


@_op("fp8_fp4_gemm_nt", fp8_fp4.check_dense)
def fp8_fp4_gemm_nt_op(
    a: Tensor,
    sfa: Tensor,
    b: Tensor,
    sfb: Tensor,
    d: Tensor,
    prepared: bool = False,
    windowed: bool = False,
) -> None:
    fp8_fp4.fp8_fp4_gemm_nt((a, sfa), _weights(b, sfb, prepared, windowed), d)


@_op("m_grouped_fp8_fp4_gemm_nt_contiguous", fp8_fp4.check_contiguous)
def m_grouped_fp8_fp4_contiguous_op(
    a: Tensor,
    sfa: Tensor,
    b: Tensor,
    sfb: Tensor,
    d: Tensor,
    m_indices: Tensor | None = None,
    offs: Tensor | None = None,
    prepared: bool = False,
    windowed: bool = False,
) -> None:
    weights = _weights(b, sfb, prepared, windowed)
    fp8_fp4.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), weights, d, m_indices, offs=offs)


@_op("m_grouped_fp8_fp4_gemm_nt_masked", fp8_fp4.check_masked)
def m_grouped_fp8_fp4_masked_op(
    a: Tensor,
    sfa: Tensor,
    b: Tensor,
    sfb: Tensor,
    d: Tensor,
    masked_m: Tensor,
    expected_m: int,
    prepared: bool = False,
    windowed: bool = False,
) -> None:
    weights = _weights(b, sfb, prepared, windowed)
    fp8_fp4.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), weights, d, masked_m, expected_m)


OPS = {
    "bf16_gemm_nt": bf16_gemm_nt_op,
    "m_grouped_bf16_gemm_nt_contiguous": m_grouped_contiguous_op,
    "m_grouped_bf16_gemm_nt_masked": m_grouped_masked_op,
    "k_grouped_bf16_gemm_tn_contiguous": k_grouped_op,
    "fp8_fp4_gemm_nt": fp8_fp4_gemm_nt_op,
    "m_grouped_fp8_fp4_gemm_nt_contiguous": m_grouped_fp8_fp4_contiguous_op,
    "m_grouped_fp8_fp4_gemm_nt_masked": m_grouped_fp8_fp4_masked_op,
}
