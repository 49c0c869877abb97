"""The public functions: argument checks with signature-keyed plans (plans.py), dispatch, and
their custom ops for torch.compile (ops.py). Depends on heuristics and jit, never on the
warmup (which sits above the API)."""

from __future__ import annotations

from ..launch.device import (
    get_num_sms,
    get_pdl,
    get_workspace_limit,
    set_num_sms,
    set_pdl,
    set_workspace_limit,
)
from . import ops as ops  # registers the moegemm:: custom ops
from .bf16_gemm import bf16_gemm_nt
from .fp8_fp4 import (
    fp8_fp4_gemm_nt,
    m_grouped_fp8_fp4_gemm_nt_contiguous,
    m_grouped_fp8_fp4_gemm_nt_masked,
)
from .k_grouped import k_grouped_bf16_gemm_tn_contiguous
from .m_grouped import (
    get_mk_alignment_for_contiguous_layout,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
)
from .mxfp4_weights import Mxfp4Weights, prepare_mxfp4_weights

__all__ = [
    "Mxfp4Weights",
    "bf16_gemm_nt",
    "fp8_fp4_gemm_nt",
    "get_mk_alignment_for_contiguous_layout",
    "get_num_sms",
    "get_pdl",
    "get_workspace_limit",
    "k_grouped_bf16_gemm_tn_contiguous",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_masked",
    "prepare_mxfp4_weights",
    "set_num_sms",
    "set_pdl",
    "set_workspace_limit",
]
