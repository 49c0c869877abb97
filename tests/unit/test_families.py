"""The family registry (moegemm.families): each arch x operand type resolves to its record, the
records name the heuristics, kernel-spec functions and launchers each layer uses, and the
config-selection entry points dispatch through them."""

from __future__ import annotations

import dataclasses
import re
from types import ModuleType

import pytest

import moegemm._C as C
from moegemm import families
from moegemm.heuristics import SM90, SM100, ArchSpec, GemmDesc, arch_for
from moegemm.heuristics import sm90_bf16 as sm90_bf16_model
from moegemm.heuristics import sm90_fp8_fp4 as sm90_fp8_fp4_model
from moegemm.heuristics import sm100_bf16 as sm100_bf16_model
from moegemm.heuristics import sm100_fp8_fp4 as sm100_fp8_fp4_model
from moegemm.jit.codegen import (
    sm90_bf16_gemm_spec,
    sm90_bf16_k_grouped_spec,
    sm90_fp8_fp4_spec,
    sm90_kernel_spec,
)
from moegemm.jit.codegen_sm100 import (
    sm100_bf16_gemm_spec,
    sm100_bf16_k_grouped_spec,
    sm100_fp8_fp4_gemm_spec,
    sm100_kernel_spec,
)
from moegemm.launch import plans

# (arch name, ab_dtype) -> (record, heuristics module, kernel-spec function, MXFP4 forms,
# checked on a GPU)
RECORDS = {
    ("sm_90a", "bf16"): (families.sm90_bf16.FAMILY, sm90_bf16_model, sm90_kernel_spec, (), True),
    ("sm_90a", "fp8_fp4"): (
        families.sm90_fp8_fp4.FAMILY, sm90_fp8_fp4_model, sm90_kernel_spec, ("raw", "prepared"),
        True,
    ),
    ("sm_100f", "bf16"): (
        families.sm100_bf16.FAMILY, sm100_bf16_model, sm100_kernel_spec, (), False,
    ),
    ("sm_100f", "fp8_fp4"): (
        families.sm100_fp8_fp4.FAMILY, sm100_fp8_fp4_model, sm100_kernel_spec, ("prepared",),
        False,
    ),
}  # fmt: skip


def _desc(kind: str, ab_dtype: str = "bf16", **kw) -> GemmDesc:
    m = {"bf16_gemm_nt": 512, "m_grouped_masked": 64}.get(kind, 4096)
    groups = 1 if kind == "bf16_gemm_nt" else 32
    if kind == "k_grouped":
        kw.setdefault("d_dtype", "fp32")
        return GemmDesc(kind, 4096, 7168, 128, groups, ab_dtype=ab_dtype, **kw)
    if kind in ("m_grouped_offsets", "m_grouped_masked"):
        kw.setdefault("expected_m", 16)
    return GemmDesc(kind, m, 4096, 7168, groups, ab_dtype=ab_dtype, **kw)


def test_the_registry_holds_one_record_per_arch_and_operand_type() -> None:
    assert {f.key for f in families.FAMILIES} == set(RECORDS)
    assert len(families.FAMILIES) == len(RECORDS)
    for name in ("sm_90a", "sm_100f"):
        assert {f.ab_dtype for f in families.of_arch(arch_for(name))} == {"bf16", "fp8_fp4"}


@pytest.mark.parametrize("key", sorted(RECORDS), ids="-".join)
def test_every_pair_resolves_to_its_record(key: tuple[str, str]) -> None:
    record, model, spec_fn, forms, checked = RECORDS[key]
    name, ab_dtype = key
    # Any SM count (set_num_sms, a warmup for another GPU) and the arch's alias find the record.
    for arch in (
        arch_for(name),
        arch_for(name, 78),
        arch_for("sm_100a" if "100" in name else name),
    ):
        assert families.lookup(arch, _desc("bf16_gemm_nt", ab_dtype)) is record
        assert families.for_operands(arch, ab_dtype) is record
    assert record.key == key and record.arch == arch_for(name)
    assert record.heuristics is model and isinstance(record.heuristics, ModuleType)
    assert record.kernel_spec is spec_fn
    assert record.mxfp4_forms == forms and record.hardware_checked is checked


def test_sm100_records_skip_what_their_kernels_lack() -> None:
    """The warmup skips what `unsupported` names: SM100's families say why; SM90's selection
    raises instead, so their records skip nothing."""
    assert families.sm100_bf16.FAMILY.unsupported is sm100_bf16_model.supported
    assert families.sm100_fp8_fp4.FAMILY.unsupported is sm100_fp8_fp4_model.supported
    bf16_bad = _desc("k_grouped", d_dtype="bf16")
    assert families.lookup(SM100, bf16_bad).unsupported(bf16_bad) is not None
    assert families.lookup(SM90, bf16_bad).unsupported(bf16_bad) is None


@pytest.mark.parametrize("ab_dtype", ["bf16", "fp8_fp4"])
def test_unsupported_pairs_raise_the_heuristics_error(ab_dtype: str) -> None:
    other = dataclasses.replace(SM90, name="sm_80")
    desc = _desc("bf16_gemm_nt", ab_dtype)
    message = re.escape("moegemm has no kernels for sm_80 yet; SM90 (Hopper) is supported")
    for call in (
        lambda: families.lookup(other, desc),
        lambda: families.for_operands(other, ab_dtype),
        lambda: families.select_config(desc, other),
        lambda: families.enumerate_configs(desc, other),
        lambda: families.selection_key(desc, other),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    with pytest.raises(ValueError, match=re.escape("no kernels for sm_90a yet")):
        families.for_operands(SM90, "fp16")
    assert families.of_arch(other) == ()


# (arch, desc) -> the `_C` launcher class the plans bind.
LAUNCHERS = [
    (SM90, _desc("bf16_gemm_nt"), "Bf16GemmLauncher"),
    (SM90, _desc("m_grouped_offsets"), "Bf16GemmLauncher"),
    (SM90, _desc("k_grouped"), "Bf16KGroupedLauncher"),
    (SM90, _desc("k_grouped", with_c=True), "Bf16KGroupedLauncher"),
    (SM90, _desc("m_grouped_offsets", epilogue="swiglu"), "Bf16MoeGemmLauncher"),
    (SM90, _desc("m_grouped_masked", epilogue="row_scale"), "Bf16MoeGemmLauncher"),
    (SM100, _desc("bf16_gemm_nt"), "Bf16GemmLauncher"),
    (SM100, _desc("k_grouped"), "Bf16KGroupedLauncher"),
    (SM100, _desc("m_grouped_offsets", epilogue="swiglu_oai"), "Bf16MoeGemmLauncher"),
    (SM90, _desc("m_grouped_offsets", "fp8_fp4"), "Sm90Fp8Fp4GemmLauncher"),
    (SM90, _desc("bf16_gemm_nt", "fp8_fp4"), "Sm90Fp8Fp4GemmLauncher"),
    (SM90, _desc("m_grouped_offsets", "fp8_fp4", epilogue="swiglu"), "Sm90Fp8Fp4MoeGemmLauncher"),
    (
        SM90,
        _desc("m_grouped_masked", "fp8_fp4", weights="prepared", expected_m=8),
        "Sm90Fp8Fp4TableGemmLauncher",
    ),
    (
        SM90,
        _desc(
            "m_grouped_masked", "fp8_fp4", weights="prepared", epilogue="row_scale", expected_m=8
        ),
        "Sm90Fp8Fp4TableMoeGemmLauncher",
    ),
    # The decode kernel with its last wave split along K (32 rows: 5.3 waves of long tiles).
    (
        SM90,
        _desc("m_grouped_masked", "fp8_fp4", weights="prepared", expected_m=32),
        "Sm90Fp8Fp4TableSplitGemmLauncher",
    ),
    (SM100, _desc("m_grouped_offsets", "fp8_fp4", weights="prepared"), "Sm100Fp8Fp4GemmLauncher"),
    (SM100, _desc("bf16_gemm_nt", "fp8_fp4", weights="prepared"), "Sm100Fp8Fp4GemmLauncher"),
    (
        SM100,
        _desc("m_grouped_offsets", "fp8_fp4", weights="prepared", epilogue="swiglu"),
        "Sm100Fp8Fp4MoeGemmLauncher",
    ),
    (
        SM100,
        _desc("m_grouped_masked", "fp8_fp4", weights="prepared", epilogue="row_scale"),
        "Sm100Fp8Fp4MoeGemmLauncher",
    ),
]


@pytest.mark.parametrize(("arch", "desc", "name"), LAUNCHERS, ids=lambda v: getattr(v, "name", v))
def test_launcher_names_and_what_the_plans_bind(
    monkeypatch: pytest.MonkeyPatch, arch: ArchSpec, desc: GemmDesc, name: str
) -> None:
    config = families.select_config(desc, arch)
    assert families.lookup(arch, desc).launcher_name(desc, config) == name
    assert isinstance(getattr(C, name), type)

    class Launcher:
        def __init__(self, kernel, *shape: int, **storage: object) -> None:
            self.kernel, self.storage = kernel, storage

    for launcher in {n for _, _, n in LAUNCHERS}:
        monkeypatch.setattr(C, launcher, type(launcher, (Launcher,), {}))
    monkeypatch.setattr(plans, "load_kernel", lambda spec: spec)
    monkeypatch.setattr(plans, "arch_for_device", lambda device: arch)
    config, launcher = plans.build_launcher(0, desc)
    assert type(launcher).__name__ == name
    assert launcher.kernel == families.kernel_spec(desc, config, arch)
    assert launcher.storage == config.storage.launcher_kwargs()  # the boxes come from the config


def test_a_forced_split_config_with_a_moe_epilogue_takes_the_split_moe_launcher() -> None:
    """The search offers split configs to the plain epilogue only (a fused-layer call allocates
    nothing); forced, a split config takes the split launcher with the MoE epilogue too."""
    plain = _desc("m_grouped_masked", "fp8_fp4", weights="prepared", expected_m=32)
    split = families.select_config(plain, SM90)
    assert split.layout.split_tail
    fused = dataclasses.replace(plain, epilogue="row_scale")
    assert families.select_config(fused, SM90).layout.split_tail == 0
    assert families.is_legal(split, fused, SM90)
    name = families.lookup(SM90, fused).launcher_name(fused, split)
    assert name == "Sm90Fp8Fp4TableSplitMoeGemmLauncher" and isinstance(getattr(C, name), type)


def _kernel_spec_cases() -> list[tuple[ArchSpec, GemmDesc, object]]:
    """(arch, desc, the leaf codegen call its kernel must equal) over both archs' families."""
    cases = []
    for kind in ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked"):
        d = _desc(kind)
        cases.append((SM90, d, lambda c, d=d: sm90_bf16_gemm_spec(c, "bf16", False, d.kind)))
        cases.append((SM100, d, lambda c, d=d: sm100_bf16_gemm_spec(c, "bf16", False, d.kind)))
        for weights in ("raw", "prepared"):
            f = _desc(kind, "fp8_fp4", weights=weights)
            cases.append((SM90, f, lambda c, f=f: sm90_fp8_fp4_spec(c, f.kind, f.weights)))
        f = _desc(kind, "fp8_fp4", weights="prepared")
        cases.append((SM100, f, lambda c, f=f: sm100_fp8_fp4_gemm_spec(c, f.kind)))
    for with_c in (False, True):
        d = _desc("k_grouped", with_c=with_c)
        cases.append((SM90, d, lambda c, w=with_c: sm90_bf16_k_grouped_spec(c, w)))
        cases.append((SM100, d, lambda c, w=with_c: sm100_bf16_k_grouped_spec(c, w)))
    moe = _desc("m_grouped_offsets", epilogue="swiglu")
    cases.append(
        (SM90, moe, lambda c: sm90_bf16_gemm_spec(c, "bf16", False, moe.kind, epilogue="swiglu"))
    )
    return cases


@pytest.mark.parametrize(("arch", "desc", "leaf"), _kernel_spec_cases())
def test_kernel_spec_through_the_record_is_the_codegen_one(
    arch: ArchSpec, desc: GemmDesc, leaf
) -> None:
    config = families.select_config(desc, arch)
    spec = families.lookup(arch, desc).kernel_spec(desc, config)
    old = sm90_kernel_spec if arch.name == SM90.name else sm100_kernel_spec
    assert spec == old(desc, config) == leaf(config)
    assert spec == families.kernel_spec(desc, config, arch) and spec.arch == arch.name


@pytest.mark.parametrize(
    ("arch", "desc"),
    [
        (SM90, _desc("m_grouped_offsets")),
        (SM90, _desc("m_grouped_masked", "fp8_fp4", weights="prepared")),
        (SM100, _desc("k_grouped")),
        (arch_for("sm_100f", 100), _desc("m_grouped_offsets", "fp8_fp4", weights="prepared")),
    ],
)
def test_the_entry_points_dispatch_to_the_records_heuristics(
    arch: ArchSpec, desc: GemmDesc
) -> None:
    model = families.lookup(arch, desc).heuristics
    pick = families.select_config(desc, arch)
    assert pick == model.select(desc, arch) and families.select_config(desc, arch) is pick
    assert list(families.enumerate_configs(desc, arch)) == list(model.enumerate_configs(desc, arch))
    assert families.is_legal(pick, desc, arch) and model.is_legal(pick, desc, arch)
    assert families.estimate_cycles(pick, desc, arch) == model.estimate_cycles(pick, desc, arch)
    assert families.selection_key(desc, arch) == (arch, model.selection_key(desc))
