"""Prints how many CTAs each cluster config's plan launches (co-resident clusters x 2) next to
the SM count, for the prefill configs the heuristics enumerate. GPU only."""

from __future__ import annotations

import os

import torch

from moegemm.api.device import arch_for_device
from moegemm.api.plans import build_plan
from moegemm.heuristics import GemmDesc
from moegemm.heuristics.sm90 import EXPERIMENTAL_CLUSTERS_ENV, enumerate_configs

os.environ[EXPERIMENTAL_CLUSTERS_ENV] = "1"
torch.zeros(1, device="cuda")  # makes the primary context current for the driver calls
device = torch.cuda.current_device()
arch = arch_for_device(device)
desc = GemmDesc("m_grouped_offsets", 32768, 4096, 7168, 32, expected_m=1024)
seen = set()
for config in enumerate_configs(desc, arch):
    lay = config.layout
    key = (lay.block_m, config.launch.num_math_warpgroups, config.pipeline.smem_bytes)
    if lay.cluster_m != 2 or key in seen:
        continue
    seen.add(key)
    plan = build_plan(device, desc, config)
    print(
        f"{config.short_name():28s} smem {config.pipeline.smem_bytes:7d}  "
        f"CTAs launched {plan.launch.num_blocks:4d} of {arch.num_sms} SMs"
    )
