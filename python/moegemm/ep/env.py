"""NVLink multicast stays off for expert parallelism: NCCL's NVLS, torch symmetric
memory's multicast object and NVSHMEM's NVLS are all disabled in every process, and no kernel
of moegemm.ep uses multimem instructions (tests/compile/test_compile_ep.py checks the SASS).

Call `set_multicast_off()` first thing in every process (before torch.distributed or NCCL
initializes: they read the variables once); EPMoE verifies with `require_multicast_off()`."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

MULTICAST_OFF: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def multicast_off_problems(env: MutableMapping[str, str] | None = None) -> list[str]:
    """One line per variable that does not hold its multicast-off value."""
    env = os.environ if env is None else env
    return [
        f"{name}={env[name]!r} (needs {value!r})"
        if name in env
        else f"{name} unset (needs {value!r})"
        for name, value in MULTICAST_OFF.items()
        if env.get(name) != value
    ]


def set_multicast_off(env: MutableMapping[str, str] | None = None) -> None:
    """Sets the three variables; refuses (ValueError) one already set to another value rather
    than overriding a deliberate choice silently."""
    env = os.environ if env is None else env
    clashes = [f"{n}={env[n]!r}" for n, v in MULTICAST_OFF.items() if n in env and env[n] != v]
    if clashes:
        raise ValueError(
            "moegemm.ep keeps NVLink multicast off, but the environment turns it on: "
            + ", ".join(clashes)
        )
    for name, value in MULTICAST_OFF.items():
        env[name] = value


def require_multicast_off(env: MutableMapping[str, str] | None = None) -> None:
    """RuntimeError naming each variable that is not set to its multicast-off value."""
    problems = multicast_off_problems(env)
    if problems:
        raise RuntimeError(
            "moegemm.ep needs NVLink multicast off in every process: call "
            "moegemm.ep.set_multicast_off() before torch.distributed initializes; "
            + "; ".join(problems)
        )
