"""moegemm: JIT-compiled grouped GEMM kernels for Mixture-of-Experts on Hopper and Blackwell.

Importing moegemm needs neither a GPU nor a compiler; kernels are compiled on first use (or
ahead of time with `python -m moegemm.jit --warmup`). The JIT's own build subprocesses set
`MOEGEMM_LIGHT_IMPORT=1`, which defers the public API (and so torch) until first touched; every
other import loads it here, so a first GEMM call pays for no imports.

Every public GEMM is also the custom op `torch.ops.moegemm.<name>` (it mutates `d`), which
the functions call while torch.compile traces them: `torch.compile(fullgraph=True)` of a
model calling them captures one graph, which a CUDA graph can then record.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "MoEWorkspace": "moegemm.moe",
    "Mxfp4Weights": "moegemm.api",
    "PreparedW13": "moegemm.moe",
    "bf16_gemm_nt": "moegemm.api",
    "fp8_fp4_gemm_nt": "moegemm.api",
    "fused_moe": "moegemm.moe",
    "fused_moe_masked": "moegemm.moe",
    "get_mk_alignment_for_contiguous_layout": "moegemm.api",
    "get_num_sms": "moegemm.api",
    "get_pdl": "moegemm.api",
    "get_workspace_limit": "moegemm.api",
    "k_grouped_bf16_gemm_tn_contiguous": "moegemm.api",
    "m_grouped_bf16_gemm_nt_contiguous": "moegemm.api",
    "m_grouped_bf16_gemm_nt_masked": "moegemm.api",
    "m_grouped_fp8_fp4_gemm_nt_contiguous": "moegemm.api",
    "m_grouped_fp8_fp4_gemm_nt_masked": "moegemm.api",
    "prepare_moe_weights": "moegemm.moe",
    "prepare_mxfp4_weights": "moegemm.api",
    "set_num_sms": "moegemm.api",
    "set_pdl": "moegemm.api",
    "set_workspace_limit": "moegemm.api",
}
# Submodules reachable as attributes after a bare `import moegemm` (loaded on first touch).
_SUBMODULES = ("quant",)

__all__ = [*_PUBLIC, *_SUBMODULES, "__version__"]  # noqa: PLE0604 (strings: the keys)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"moegemm.{name}")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'moegemm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC) | set(_SUBMODULES))


# `python -m moegemm.jit` imports this package while it locates the module (sys.argv[0] is "-m"
# then): the public API (and torch) loads on first touch instead, after the entry point has
# installed its signal handlers, so a Ctrl-C in the first seconds is one line, not a traceback.
if not os.environ.get("MOEGEMM_LIGHT_IMPORT") and sys.argv[:1] != ["-m"]:
    for _name in _PUBLIC:
        __getattr__(_name)
    del _name
