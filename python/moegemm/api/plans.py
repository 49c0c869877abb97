"""Plans: a chosen config, its loaded kernel and a launcher with the launch shape bound.

A plan is built once per problem signature and kept in a dict, so a call's hot path is one
lookup and one `_C` call. Plans depend on the SM count, so `set_num_sms` clears them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from ..heuristics import GemmConfig, GemmDesc, select_config
from ..heuristics.sm90 import store_cols
from ..jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec
from ..jit.runtime import load_kernel
from .device import arch_for_device, register_plan_cache


class Plan(NamedTuple):
    config: GemmConfig
    launch: Callable[..., None]


plans: dict[tuple, Plan] = register_plan_cache({})


def max_ctas(desc: GemmDesc, config: GemmConfig) -> int:
    """CTAs worth launching: the tile count where the host knows it, else an upper bound."""
    lay = config.layout
    # CTAs per row of cluster tiles, and the rows of one cluster tile.
    n_blocks = math.ceil(desc.n / (lay.block_n * lay.cluster_n)) * lay.cluster_size
    rows = lay.block_m * lay.cluster_m
    if desc.kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        return math.ceil(desc.m / rows) * n_blocks
    if desc.kind == "m_grouped_offsets":  # each group may end in a partial block
        return (math.ceil(desc.m / rows) + desc.num_groups) * n_blocks
    if desc.kind == "m_grouped_masked":
        return desc.num_groups * math.ceil(desc.m / rows) * n_blocks
    return desc.num_groups * math.ceil(desc.m / rows) * n_blocks  # k_grouped


def build_plan(
    device: int, desc: GemmDesc, config: GemmConfig | None = None, stage_variant: int = 0
) -> Plan:
    """The heuristics' config for `desc` (or the given one), compiled, loaded and bound.
    stage_variant builds a timing-only kernel (see jit/codegen.py); never used by the API."""
    from .. import _C

    arch = arch_for_device(device)
    if config is None:
        config = select_config(desc, arch)
    lay = config.layout
    if desc.kind == "k_grouped":
        kernel = load_kernel(sm90_bf16_k_grouped_spec(config, desc.with_c, stage_variant))
        launcher_type = _C.Sm90Bf16KGroupedLauncher
    else:
        spec = sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind, stage_variant)
        kernel = load_kernel(spec)
        launcher_type = _C.Sm90Bf16GemmLauncher
    # Persistent CTAs, whole clusters of them (a cluster's CTAs share an operand of each tile).
    cluster = lay.cluster_m * lay.cluster_n
    wanted = -(-max_ctas(desc, config) // cluster) * cluster
    num_blocks = max(cluster, min(arch.num_sms, wanted) // cluster * cluster)
    launch = launcher_type(
        kernel,
        lay.block_m,
        lay.block_n,
        lay.block_k,
        num_blocks,
        config.launch.num_threads,
        config.pipeline.smem_bytes,
        lay.cluster_m,
        lay.cluster_n,
        store_cols=store_cols(config),
    )
    return Plan(config=config, launch=launch)


def get_plan(key: tuple, device: int, desc_fn: Callable[[], GemmDesc], config=None) -> Plan:
    """The cached plan for `key`; `desc_fn` builds the problem description only on a miss. A
    forced `config` (benchmarks, tests) bypasses the cache."""
    if config is not None:
        return build_plan(device, desc_fn(), config)
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = build_plan(device, desc_fn())
    return plan
