"""Expert parallelism across the GPUs of one host: EPMoE (dispatch -> the experts'
masked GEMMs -> combine over NVLink peer pointers from torch symmetric memory), its host buffer
plan, the multicast-off environment guards and a pure-torch reference model of placement and
combine. Above moegemm.moe (it runs fused_moe_masked), below nothing.

Status: written and CPU-tested (argument checks, buffer plan, reference model against
fused_moe_reference, host glue with recorded launches) and compile-tested (sm_90a SASS); never
run on a GPU (no multi-GPU machine was lent)."""

from __future__ import annotations

from .env import MULTICAST_OFF, require_multicast_off, set_multicast_off
from .layer import EPMoE
from .plan import EPBufferPlan
from .reference import Placement, dispatch_placement, ep_forward_reference
from .status import describe_status

__all__ = [
    "MULTICAST_OFF",
    "EPBufferPlan",
    "EPMoE",
    "Placement",
    "describe_status",
    "dispatch_placement",
    "ep_forward_reference",
    "require_multicast_off",
    "set_multicast_off",
]
