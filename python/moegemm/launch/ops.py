"""The custom ops' registration (torch.compile), one mechanism for the GEMMs (api/ops.py) and
the fused layers (moe/ops.py)."""

# No `from __future__ import annotations`: torch.library reads the annotations as types.

import inspect
from collections.abc import Callable

import torch

OPS_NAMESPACE = "moegemm"  # the torch.library namespace of every moegemm custom op


def custom_op(
    name: str, mutates_args: tuple[str, ...], fake: Callable[[dict[str, object]], object]
) -> Callable:
    """Registers the decorated implementation as the custom op moegemm::<name>. Its fake
    implementation (shapes only, run while Dynamo traces) calls `fake` with the call's
    arguments by name, defaults applied: the dispatcher passes them as the caller did."""

    def register(impl: Callable) -> object:
        signature = inspect.signature(impl)

        def fake_impl(*args: object, **kwargs: object) -> None:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            fake(dict(bound.arguments))

        op = torch.library.custom_op(f"{OPS_NAMESPACE}::{name}", mutates_args=mutates_args)(impl)
        op.register_fake(fake_impl)
        return op

    return register
