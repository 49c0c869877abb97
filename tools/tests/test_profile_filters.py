"""The profiling tools' kernel filters against the names codegen emits (no GPU, no compile):
each KernelSpec's source instantiates `template __global__ void moegemm::<ns>::<function><...>`,
from which the names a profiler sees follow: Nsight Compute's -k matches the function's name
(its default --kernel-name-base), the torch profiler reports the demangled signature."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/

import profile_case
import profile_fp8_fp4
import profile_moe

from moegemm.families import kernel_spec, select_config
from moegemm.heuristics import SM90, GemmDesc
from moegemm.jit.codegen import moe_combine_spec, moe_quantize_rows_spec, moe_route_gather_spec
from moegemm.moe.layer import layer_gemms

INSTANCE = re.compile(
    r"template __global__ void ((?:\w+::)*)(\w+)<(.*?)>\(\s*const __grid_constant__ (\S+)\);",
    re.DOTALL,
)


def profiler_names(spec) -> tuple[str, str]:
    """(the function's name, the demangled signature) of the kernel `spec` instantiates."""
    found = INSTANCE.search(spec.source)
    assert found, spec.source
    scope, function, targs, params = found.groups()
    return function, f"void {scope}{function}<{targs}>({params})"


def spec_of(desc: GemmDesc):
    return kernel_spec(desc, select_config(desc, SM90), SM90)


BF16_DESCS = [
    GemmDesc("m_grouped_offsets", 512, 4096, 7168, 32, expected_m=16),
    GemmDesc("m_grouped_masked", 64, 4096, 7168, 32, expected_m=8),
    GemmDesc("m_grouped_contiguous", 4096, 4096, 7168, 32),
    GemmDesc("k_grouped", 4096, 7168, 2048, 32, d_dtype="fp32"),
]
FP8_FP4_DESCS = [
    dataclasses.replace(d, ab_dtype="fp8_fp4", weights=w)
    for d in BF16_DESCS[:3]
    for w in ("raw", "prepared")
]


def ncu_matches(regex: str, spec) -> bool:
    function, _ = profiler_names(spec)
    return re.search(regex, function) is not None


@pytest.mark.parametrize("desc", BF16_DESCS, ids=lambda d: d.kind)
def test_profile_case_filter_matches_the_bf16_kernels(desc: GemmDesc) -> None:
    spec = spec_of(desc)
    assert ncu_matches(profile_case.NCU_KERNEL_REGEX, spec), profiler_names(spec)
    assert f"regex:{profile_case.NCU_KERNEL_REGEX} " in profile_case.__doc__


@pytest.mark.parametrize("desc", FP8_FP4_DESCS, ids=lambda d: f"{d.kind}-{d.weights}")
def test_profile_fp8_fp4_filter_matches_its_kernels(desc: GemmDesc) -> None:
    """Also the tool's own pick for its description (masked decode by default)."""
    spec = spec_of(desc)
    assert ncu_matches(profile_fp8_fp4.NCU_KERNEL_REGEX, spec), profiler_names(spec)
    assert not ncu_matches(profile_case.NCU_KERNEL_REGEX, spec)  # each filter its own family
    assert f"regex:{profile_fp8_fp4.NCU_KERNEL_REGEX} " in profile_fp8_fp4.__doc__


@pytest.mark.parametrize("layout", ["masked", "offs", "m_indices"])
def test_profile_fp8_fp4_filter_matches_the_tools_pick(layout: str) -> None:
    for weights in ("prepared", "raw"):
        args = profile_fp8_fp4.parse(["--layout", layout, "--weights", weights, "--rows", "8"])
        spec = spec_of(profile_fp8_fp4.desc_of(args))
        assert ncu_matches(profile_fp8_fp4.NCU_KERNEL_REGEX, spec), profiler_names(spec)


def test_the_old_fp8_fp4_filter_matched_nothing() -> None:
    """Why the filter changed: sm90_fp8fp4 is the JIT name, not the function's."""
    spec = spec_of(FP8_FP4_DESCS[0])
    assert spec.name.startswith("sm90_fp8fp4_") and not ncu_matches("sm90_fp8fp4", spec)


@pytest.mark.parametrize("activation", ["silu", "swiglu_oai"])
@pytest.mark.parametrize("weights", ["bf16", "raw", "prepared"])
def test_profile_moe_names_every_layer_kernel(activation: str, weights: str) -> None:
    """The layer's GEMMs by their KernelSpec name, its own kernels by their function."""
    sizes = {"tokens": 512, "top_k": 8, "experts": 32, "hidden": 2048, "intermediate": 768,
             "ldw2": 768, "ldw2_group": 2048 * 768}  # fmt: skip
    for desc, _ in layer_gemms(sizes, activation):
        if weights != "bf16":
            desc = dataclasses.replace(desc, ab_dtype="fp8_fp4", weights=weights)
        spec = spec_of(desc)
        assert profile_moe.short_kernel_name(profiler_names(spec)[1]) == spec.name
    layer = [moe_route_gather_spec(), moe_route_gather_spec(fp8=True), moe_combine_spec(),
             moe_quantize_rows_spec()]  # fmt: skip
    for spec in layer:
        function, demangled = profiler_names(spec)
        assert profile_moe.short_kernel_name(demangled) == function
