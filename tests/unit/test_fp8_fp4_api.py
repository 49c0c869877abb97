"""The FP8 x FP4 functions without a GPU: every argument check, both weight forms, the launch
arguments of the contract, plan hits, the custom ops (prepare_mxfp4_weights:
tests/unit/test_mxfp4_weights.py).

Checks run with CPU tensors (placement is checked last); launches use `FakeCuda` operands (CPU
tensors that report cuda:0) with the plan builder stubbed by `Rig`, as tests/unit/test_plans.py does
for BF16: plans record what the kernel would have received instead of launching."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import moegemm
from moegemm.api import fp8_fp4 as mod
from moegemm.families import lookup, select_config
from moegemm.heuristics import SM90
from moegemm.launch import plans as plans_mod
from moegemm.launch.device import registered_plan_caches
from moegemm.launch.plans import Plan, bound_integers

FP8, FP32, U8 = torch.float8_e4m3fn, torch.float32, torch.uint8
BF16, I32 = torch.bfloat16, torch.int32
G, M, N, K = 4, 256, 64, 160  # K = 160: a partial last 128-K block, nkb = 2
NKB = math.ceil(K / 128)


class FakeCuda(torch.Tensor):
    """A CPU tensor that reports itself on cuda:0."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)


def t(*shape: int, dtype: torch.dtype = BF16, fake: bool = False) -> torch.Tensor:
    x = torch.zeros(shape, dtype=dtype)
    return x.as_subclass(FakeCuda) if fake else x


def gpu(x: torch.Tensor) -> torch.Tensor:
    """x (a view of a plain CPU tensor) reporting cuda:0; views of a FakeCuda are plain."""
    return x.as_subclass(FakeCuda)


def shifted(shape: tuple[int, ...], dtype: torch.dtype, elements: int, fake: bool) -> torch.Tensor:
    """A row-major view whose base sits `elements` past a 64-byte aligned one."""
    count = math.prod(shape)
    x = torch.zeros(count + 64, dtype=dtype)[elements : elements + count].view(shape)
    return x.as_subclass(FakeCuda) if fake else x


def dense_ops(fake: bool = False, m: int = M, n: int = N, k: int = K) -> dict:
    nkb = math.ceil(k / 128)
    return {
        "a": t(m, k, dtype=FP8, fake=fake),
        "sfa": t(m, nkb, dtype=FP32, fake=fake),
        "b": t(n, k // 2, dtype=U8, fake=fake),
        "sfb": t(n, k // 32, dtype=U8, fake=fake),
        "d": t(m, n, fake=fake),
    }


def grouped_ops(fake: bool = False, rows: int = M) -> dict:
    ops = dense_ops(fake, m=rows)
    ops["b"] = t(G, N, K // 2, dtype=U8, fake=fake)
    ops["sfb"] = t(G, N, K // 32, dtype=U8, fake=fake)
    return ops


def masked_ops(fake: bool = False, max_m: int = 32) -> dict:
    ops = grouped_ops(fake)
    ops["a"] = t(G, max_m, K, dtype=FP8, fake=fake)
    ops["sfa"] = t(G, max_m, NKB, dtype=FP32, fake=fake)
    ops["d"] = t(G, max_m, N, fake=fake)
    return ops


def prepared_tensors(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights of b's shape in the prepared layout: codes [.., N, Kp / 2], offsets words int32
    [.., 2 KB, N]; on b's device (FakeCuda stays FakeCuda)."""
    n, k = b.shape[-2], 2 * b.shape[-1]
    nkb = math.ceil(k / 128)
    device = "cpu" if isinstance(b, FakeCuda) else b.device
    codes = torch.empty(*b.shape[:-1], 64 * nkb, dtype=U8, device=device)
    words = torch.empty(*b.shape[:-2], 2 * nkb, n, dtype=I32, device=device)
    if isinstance(b, FakeCuda):
        return gpu(codes), gpu(words)
    return codes, words


def prepared_like(b: torch.Tensor) -> moegemm.Mxfp4Weights:
    return moegemm.Mxfp4Weights(*prepared_tensors(b))


def pairs(o: dict, prepared: bool) -> tuple:
    """The two operand pairs of a call; o["pair_a"] / o["pair_b"] replace them as given."""
    weights = prepared_like(o["b"]) if prepared else (o["b"], o["sfb"])
    return o.get("pair_a", (o["a"], o["sfa"])), o.get("pair_b", weights)


def call_dense(o: dict, prepared: bool = False, **kw):
    return moegemm.fp8_fp4_gemm_nt(*pairs(o, prepared), o["d"], **kw)


def call_indices(o: dict, prepared: bool = False, **kw):
    f = moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    return f(*pairs(o, prepared), o["d"], o["m_indices"], **kw)


def call_offs(o: dict, prepared: bool = False, **kw):
    f = moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    return f(*pairs(o, prepared), o["d"], offs=o["offs"], **kw)


def call_masked(o: dict, prepared: bool = False, **kw):
    f = moegemm.m_grouped_fp8_fp4_gemm_nt_masked
    return f(*pairs(o, prepared), o["d"], o["masked_m"], o.get("expected_m", 16), **kw)


def case(name: str, fake: bool = False) -> tuple[Callable, dict]:
    if name == "dense":
        return call_dense, dense_ops(fake)
    if name == "m_indices":
        return call_indices, {**grouped_ops(fake), "m_indices": t(M, dtype=I32, fake=fake)}
    if name == "offs":
        return call_offs, {**grouped_ops(fake, rows=200), "offs": t(G, dtype=I32, fake=fake)}
    return call_masked, {**masked_ops(fake), "masked_m": t(G, dtype=I32, fake=fake)}


CASES = ("dense", "m_indices", "offs", "masked")


# ---- the checks, on CPU tensors ----


@pytest.mark.parametrize("name", CASES)
def test_valid_cpu_operands_are_refused_for_their_device(name: str) -> None:
    fn, o = case(name)
    for prepared in (False, True):
        with pytest.raises(ValueError, match="^a must be on a CUDA device, got cpu$"):
            fn(o, prepared)


@pytest.mark.parametrize("name", CASES)
def test_the_operand_pairs_are_typed_by_name(name: str) -> None:
    fn, o = case(name)
    for bad_a in (o["a"], (o["a"],), (o["a"], o["sfa"], o["sfa"]), None):
        with pytest.raises(TypeError, match=r"^a must be a tuple \(a, sfa\)"):
            fn({**o, "pair_a": bad_a})
    for bad_b in (o["b"], (o["b"],), {"b": o["b"]}, None):
        with pytest.raises(TypeError, match=r"^b must be a tuple \(b, sfb\).* or a moegemm"):
            fn({**o, "pair_b": bad_b})
    with pytest.raises(TypeError, match="^prepared must be a bool"):
        moegemm.Mxfp4Weights(o["b"], o["sfb"], prepared=1)
    # Lists are pairs too.
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        fn({**o, "pair_a": [o["a"], o["sfa"]], "pair_b": [o["b"], o["sfb"]]})


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize(
    "which,dtype,pattern",
    [
        ("a", BF16, "^a must have dtype torch.float8_e4m3fn, got torch.bfloat16$"),
        ("sfa", BF16, "^sfa must have dtype torch.float32, got torch.bfloat16$"),
        ("b", torch.int8, "^b must have dtype torch.uint8, got torch.int8$"),
        ("sfb", torch.int8, "^sfb must have dtype torch.uint8, got torch.int8$"),
        ("d", FP32, "^d must have dtype torch.bfloat16, got torch.float32$"),
    ],
)
def test_dtypes(name: str, which: str, dtype: torch.dtype, pattern: str) -> None:
    fn, o = case(name)
    o[which] = o[which].to(dtype)
    with pytest.raises(TypeError, match=pattern):
        fn(o)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("which", ["a", "sfa", "b", "sfb", "d"])
def test_non_tensors_and_ranks(name: str, which: str) -> None:
    fn, o = case(name)
    good = o[which]
    o[which] = good.tolist()
    with pytest.raises(TypeError, match=f"^{which} must be a torch.Tensor, got list$"):
        fn(o)
    o[which] = good.unsqueeze(0)
    with pytest.raises(ValueError, match=f"^{which} must be {good.dim()}-D, got shape"):
        fn(o)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("k", [0, 16, 48, 100, 130])
def test_k_must_be_a_positive_multiple_of_32(name: str, k: int) -> None:
    fn, o = case(name)
    o["a"] = t(*o["a"].shape[:-1], k, dtype=FP8)
    pattern = rf"^K \(a.shape\[-1\]\) must be a positive multiple of 32, got {k}$"
    with pytest.raises(ValueError, match=pattern):
        fn(o)


@pytest.mark.parametrize("name", CASES)
def test_n_must_be_a_multiple_of_8(name: str) -> None:
    fn, o = case(name)
    groups = o["b"].shape[:-2]
    o["b"] = t(*groups, 12, K // 2, dtype=U8)
    with pytest.raises(ValueError, match=r"^N \(b.shape\[-2\]\) must be a multiple of 8, got 12$"):
        fn(o)


@pytest.mark.parametrize("name", CASES)
def test_shapes(name: str) -> None:
    fn, o = case(name)
    groups = tuple(o["b"].shape[:-2])
    rows = tuple(o["a"].shape[:-1])
    bad = {
        "b": (t(*groups, N, K // 2 - 16, dtype=U8), (*groups, N, K // 2)),
        "sfb": (t(*groups, N, K // 16, dtype=U8), (*groups, N, K // 32)),
        # One scale per 128 of K, the last block partial: ceil(160 / 128) = 2, not 1.
        "sfa": (t(*rows, 1, dtype=FP32), (*rows, NKB)),
        "d": (t(*rows, N + 8), (*rows, N)),
    }
    for which, (tensor, expected) in bad.items():
        saved, o[which] = o[which], tensor
        with pytest.raises(ValueError, match=f"^{which} must have shape {re_tuple(expected)}"):
            fn(o)
        o[which] = saved


def re_tuple(shape: tuple[int, ...]) -> str:
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


@pytest.mark.parametrize("name", CASES)
def test_prepared_codes_with_gaps_between_rows_are_refused(name: str) -> None:
    """The prepared codes of a 64-row block are read as whole 4096-byte k-blocks: rows further
    apart than Kp / 2 bytes (a slice of wider codes) are refused before any launch."""
    fn, o = case(name, fake=True)
    codes, words = prepared_tensors(o["b"])
    wide = gpu(torch.zeros(*codes.shape[:-1], codes.shape[-1] + 64, dtype=U8))[..., :-64]
    o["pair_b"] = moegemm.Mxfp4Weights(wide, words)
    with pytest.raises(ValueError, match="^prepared b must have its rows back to back"):
        fn(o)


def test_grouped_shape_rules() -> None:
    fn, o = case("masked")
    o["b"] = t(G + 1, N, K // 2, dtype=U8)
    with pytest.raises(ValueError, match=r"^b must have shape \(4, 64, 80\) \(a's 4 groups\)"):
        fn(o)
    fn, o = case("offs")
    o["sfb"] = t(G + 1, N, K // 32, dtype=U8)
    with pytest.raises(ValueError, match=r"^sfb must have shape \(4, 64, 5\)"):
        fn(o)
    fn, o = case("m_indices")
    o["a"], o["sfa"], o["d"] = t(200, K, dtype=FP8), t(200, NKB, dtype=FP32), t(200, N)
    o["m_indices"] = t(200, dtype=I32)
    with pytest.raises(ValueError, match="^with m_indices, M must be a multiple of 128"):
        fn(o)
    o = case("offs")[1]
    f = moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    pairs = ((o["a"], o["sfa"]), (o["b"], o["sfb"]))
    with pytest.raises(ValueError, match="^pass exactly one of m_indices"):
        f(*pairs, o["d"])
    with pytest.raises(ValueError, match="^pass exactly one of m_indices"):
        f(*pairs, o["d"], t(200, dtype=I32), offs=o["offs"])
    with pytest.raises(ValueError, match=r"^offs must have shape \(4,\)"):
        f(*pairs, o["d"], offs=t(G + 1, dtype=I32))


def test_masked_rules() -> None:
    fn, o = case("masked")
    for bad, error in ((0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError),
                       (None, TypeError)):  # fmt: skip
        o["expected_m"] = bad
        with pytest.raises(error, match="^expected_m must be a positive int"):
            fn(o)
    o["expected_m"] = 16
    o["masked_m"] = t(G, dtype=torch.int64)
    with pytest.raises(TypeError, match="^masked_m must have dtype torch.int32"):
        fn(o)
    o["masked_m"] = t(G)
    # a and d rows of all groups must tile one [G * max_m, .] tensor (the kernel walks them so).
    o["masked_m"] = t(G, dtype=I32)
    o["a"] = t(G, 40, K, dtype=FP8)[:, :32]
    with pytest.raises(ValueError, match="^a batches must be contiguous rows"):
        fn(o)


@pytest.mark.parametrize("name", CASES)
def test_strides(name: str) -> None:
    fn, o = case(name)
    rows = tuple(o["a"].shape[:-1])
    groups = tuple(o["b"].shape[:-2])
    checks = {
        # Row-major with 16-byte aligned rows for the TMA operands.
        "a": (t(*rows, K + 8, dtype=FP8)[..., :K], "^a row stride must be a multiple of 16 bytes"),
        "b": (t(*groups, N, K // 2 + 8, dtype=U8)[..., : K // 2], "^b row stride must be a"),
        "d": (t(*rows, N + 4)[..., :N], "^d row stride must be a multiple of 16 bytes"),
        "sfb": (t(*groups, N, K // 16, dtype=U8)[..., ::2], "^sfb must have unit stride along"),
    }
    col_major = t(*rows[:-1], K, rows[-1], dtype=FP8).transpose(-1, -2)
    with pytest.raises(ValueError, match="^a must be row-major"):
        fn({**o, "a": col_major})
    for which, (tensor, pattern) in checks.items():
        with pytest.raises(ValueError, match=pattern):
            fn({**o, which: tensor})


@pytest.mark.parametrize("name", CASES)
def test_misaligned_bases_are_refused(name: str) -> None:
    """a, b, d are TMA operands and the producer copies sfa and sfb in aligned 4-byte words: all
    five bases on 16-byte boundaries."""
    fn, o = case(name)
    for which, elements in (("a", 8), ("b", 8), ("d", 4), ("sfa", 1), ("sfb", 3)):
        bad = shifted(tuple(o[which].shape), o[which].dtype, elements, fake=False)
        with pytest.raises(ValueError, match=f"^{which} must start on a 16-byte boundary$"):
            fn({**o, which: bad})


# ---- launches, through a stubbed plan builder ----


def launcher_of(desc) -> type:
    """The `_C` launcher class an SM90 plan of `desc` binds (the registry's answer)."""
    return getattr(moegemm._C, lookup(SM90, desc).launcher_name(desc, select_config(desc, SM90)))


class Rig:
    """Records plan builds (desc, forced config) and launches in the launcher's order:
    (*pointers, *integers, stream). As the bound launch, it refuses (False) a, b or d off a
    16-byte boundary."""

    def __init__(self) -> None:
        self.builds: list = []
        self.launches: list[tuple] = []

    def make_plan(self, device: int, desc, problem: tuple, config=None) -> Plan:
        args = bound_integers(launcher_of(desc), problem)
        self.builds.append((desc, config))

        def launch(*call: int) -> bool:
            assert len(call) == 7, call  # a, b, d, sfa, sfb, group info, and the stream
            if (call[0] | call[1] | call[2]) & 15:
                return False
            self.launches.append((*call[:-1], *args, call[-1]))
            return True

        return Plan(device, launch, args, config)


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch):
    rig = Rig()
    monkeypatch.setattr(plans_mod, "make_plan", rig.make_plan)
    for module in (mod, plans_mod):  # the hit path's stream, the miss path's
        monkeypatch.setattr(module, "raw_stream", lambda index: 1000 + index)
    monkeypatch.setattr(plans_mod, "current_device", lambda: 0)
    clear_plans()
    yield rig
    clear_plans()


def clear_plans() -> None:
    for cache in registered_plan_caches():
        cache.clear()


def ptrs(o: dict, info: str | None) -> tuple[int, ...]:
    names = ("a", "b", "d", "sfa", "sfb")
    return (*(o[n].data_ptr() for n in names), o[info].data_ptr() if info else 0)


def test_launch_arguments_are_the_contracts(rig: Rig) -> None:
    # dense: row-major sfa, lda padded to 16-byte rows.
    o = dense_ops(fake=True)
    o["a"] = gpu(t(M, K + 32, dtype=FP8)[:, :K])
    call_dense(o)
    kb = K // 32
    assert rig.launches[-1] == (
        *ptrs(o, None), M, M, N, K, 1, K + 32, K // 2, N * K // 2, N, 0, NKB, 1, 0, N * kb, kb,
        1000,
    )  # fmt: skip
    # m_indices with DeepGEMM's MN-major TMA-aligned sfa: strides (1, M_aligned).
    o = {**grouped_ops(fake=True), "m_indices": t(M, dtype=I32, fake=True)}
    o["sfa"] = gpu(t(NKB, M + 4, dtype=FP32).t()[:M])
    call_indices(o)
    assert rig.launches[-1] == (
        *ptrs(o, "m_indices"), M, M, N, K, G, K, K // 2, N * K // 2, N, 0, 1, M + 4, 0,
        N * kb, kb, 1000,
    )  # fmt: skip
    # offs: sfb with padded rows and groups (unit stride along K/32 is all it needs).
    o = {**grouped_ops(fake=True, rows=200), "offs": t(G, dtype=I32, fake=True)}
    o["sfb"] = gpu(t(G + 1, N, kb + 3, dtype=U8)[1:, :, :kb])
    call_offs(o)
    assert rig.launches[-1] == (
        *ptrs(o, "offs"), 200, 200, N, K, G, K, K // 2, N * K // 2, N, 0, NKB, 1, 0,
        N * (kb + 3), kb + 3, 1000,
    )  # fmt: skip
    # masked: per-group sfa slabs, MN-major inside a group.
    o = {**masked_ops(fake=True, max_m=32), "masked_m": t(G, dtype=I32, fake=True)}
    o["sfa"] = gpu(t(G, NKB, 40, dtype=FP32).transpose(1, 2)[:, :32])
    call_masked(o)
    assert rig.launches[-1] == (
        *ptrs(o, "masked_m"), G * 32, 32, N, K, G, K, K // 2, N * K // 2, N, NKB * 40, 1, 40,
        32, N * kb, kb, 1000,
    )  # fmt: skip


def test_descs_and_both_weight_forms(rig: Rig) -> None:
    expected = {
        "dense": ("bf16_gemm_nt", M, 1, 0),
        "m_indices": ("m_grouped_contiguous", M, G, 0),
        "offs": ("m_grouped_offsets", 200, G, 50),
        "masked": ("m_grouped_masked", 32, G, 16),
    }
    for name in CASES:
        fn, o = case(name, fake=True)
        for prepared, weights in ((False, "raw"), (True, "prepared")):
            rig.builds.clear()
            fn(o, prepared)
            fn(o, prepared)  # a hit: no second build
            ((desc, _),) = rig.builds
            kind, m, groups, expected_m = expected[name]
            assert (desc.kind, desc.m, desc.n, desc.k) == (kind, m, N, K), name
            assert (desc.num_groups, desc.expected_m) == (groups, expected_m), name
            assert (desc.ab_dtype, desc.d_dtype, desc.weights) == ("fp8_fp4", "bf16", weights)
        # Mxfp4Weights(prepared=False) is the checkpoint layout, as the tuple: the raw plan.
        rig.builds.clear()
        weights = moegemm.Mxfp4Weights(o["b"], o["sfb"], prepared=False)
        if name == "dense":
            moegemm.fp8_fp4_gemm_nt((o["a"], o["sfa"]), weights, o["d"])
            assert rig.builds == []


def test_masked_expected_m_is_capped_and_a_forced_config_is_passed(rig: Rig) -> None:
    fn, o = case("masked", fake=True)
    o["expected_m"] = 1000
    fn(o)
    assert rig.builds[-1][0].expected_m == 32  # min(expected_m, max_m)
    sentinel = object()
    fn(o, config=sentinel)
    fn(o, config=sentinel)  # forced configs neither read nor fill the plans
    assert [c for _, c in rig.builds] == [None, sentinel, sentinel]


@pytest.mark.parametrize("name", CASES)
def test_a_hit_launches_new_pointers_without_the_full_checks(
    name: str, rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn, o = case(name, fake=True)
    fn(o)
    first = rig.launches[-1]
    _, o2 = case(name, fake=True)
    with monkeypatch.context() as m:
        for check in ("check_dense", "check_contiguous", "check_masked"):
            m.setattr(mod, check, None)
        fn(o2)
    assert len(rig.builds) == 1
    second = rig.launches[-1]
    assert second[6:] == first[6:] and second[:6] != first[:6]
    # A hit whose a is off a 16-byte boundary falls back to the full checks, which name it.
    o3 = {**o2, "a": shifted(tuple(o2["a"].shape), FP8, 8, fake=True)}
    with pytest.raises(ValueError, match="^a must start on a 16-byte boundary$"):
        fn(o3)
    assert len(rig.launches) == 2


def test_scales_are_never_read(rig: Rig) -> None:
    """A NaN scale byte is not looked for (that would sync): the call launches."""
    fn, o = case("offs", fake=True)
    o["sfb"] = torch.full(tuple(o["sfb"].shape), 0xFF, dtype=U8).as_subclass(FakeCuda)
    fn(o)
    assert len(rig.launches) == 1


def test_empty_problems_launch_nothing(rig: Rig) -> None:
    call_dense(dense_ops(fake=True, m=0))
    call_dense(dense_ops(fake=True, n=0))
    o = {**grouped_ops(fake=True, rows=0), "offs": t(G, dtype=I32, fake=True)}
    call_offs(o)
    o = masked_ops(fake=True, max_m=0)
    call_masked({**o, "masked_m": t(G, dtype=I32, fake=True)})
    assert rig.builds == [] and rig.launches == []


# ---- the custom ops ----


SCHEMAS = {
    "fp8_fp4_gemm_nt": (
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a4!) d, bool prepared=False, bool windowed=False) -> ()"
    ),
    "m_grouped_fp8_fp4_gemm_nt_contiguous": (
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a4!) d, Tensor? m_indices=None, "
        "Tensor? offs=None, bool prepared=False, bool windowed=False) -> ()"
    ),
    "m_grouped_fp8_fp4_gemm_nt_masked": (
        "(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(a4!) d, Tensor masked_m, "
        "SymInt expected_m, bool prepared=False, bool windowed=False) -> ()"
    ),
}
OP_OF = {
    "dense": "fp8_fp4_gemm_nt",
    "m_indices": "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "offs": "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "masked": "m_grouped_fp8_fp4_gemm_nt_masked",
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_the_ops_and_their_schemas(name: str) -> None:
    schema = getattr(torch.ops.moegemm, name).default._schema
    assert str(schema) == f"moegemm::{name}{SCHEMAS[name]}"


def op_args(name: str, o: dict, prepared: bool) -> tuple:
    b, sfb = prepared_tensors(o["b"]) if prepared else (o["b"], o["sfb"])
    base = (o["a"], o["sfa"], b, sfb, o["d"])
    extra = {
        "dense": (),
        "m_indices": (o.get("m_indices"), None),
        "offs": (None, o.get("offs")),
        "masked": (o.get("masked_m"), 16),
    }[name]
    return (*base, *extra, prepared)


def meta(o: dict) -> dict:
    return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in o.items()}


@pytest.mark.parametrize("name", CASES)
def test_fake_impls_check_by_name(name: str) -> None:
    with FakeTensorMode():
        _, o = case(name)
        o = {
            k: torch.empty(v.shape, dtype=v.dtype, device="cuda")
            if isinstance(v, torch.Tensor)
            else v
            for k, v in o.items()
        }
        op = getattr(torch.ops.moegemm, OP_OF[name])
        assert op(*op_args(name, o, True)) is None
        o["sfa"] = torch.empty((*o["sfa"].shape[:-1], 1), device="cuda")
        with pytest.raises(ValueError, match="^sfa must have shape"):
            op(*op_args(name, o, False))


class Recorder:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(gm)
        return gm.forward


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("prepared", [False, True])
def test_fullgraph_compile_sees_one_custom_op(name: str, prepared: bool, fresh_dynamo) -> None:
    call, o = case(name)
    o = meta(o)
    backend = Recorder()
    out = torch.compile(lambda o: call(o, prepared), fullgraph=True, backend=backend)(o)
    assert out is o["d"]
    (gm,) = backend.graphs
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and "moegemm" in str(n.target)]
    assert [str(n.target).removesuffix(".default") for n in nodes] == [f"moegemm.{OP_OF[name]}"]
    # The weight layout last: prepared, then windowed (these weights carry the default False).
    assert tuple(nodes[0].args[-2:]) == (prepared, False)


@pytest.mark.parametrize("name", CASES)
def test_opcheck_on_meta_tensors(name: str) -> None:
    _, o = case(name)
    op = getattr(torch.ops.moegemm, OP_OF[name]).default
    torch.library.opcheck(op, op_args(name, meta(o), True))


def test_the_real_impls_are_the_checked_eager_path() -> None:
    _, o = case("masked")
    with pytest.raises(ValueError, match="^a must be on a CUDA device, got cpu$"):
        torch.ops.moegemm.m_grouped_fp8_fp4_gemm_nt_masked(*op_args("masked", o, True))


FORCED_CONFIG = object()


def test_config_is_refused_under_compile(fresh_dynamo) -> None:
    call, o = case("dense")
    fn = torch.compile(lambda o: call(o, config=FORCED_CONFIG), fullgraph=True, backend=Recorder())
    with pytest.raises(Exception, match="config= forces a kernel in eager calls only"):
        fn(meta(o))


@pytest.mark.parametrize("prepared", [False, True])
def test_dynamic_rows_compile_once_and_functionalize(prepared: bool, fresh_dynamo) -> None:
    """aot_eager functionalizes the mutation as inductor does; new row counts reach the fake
    impl's checks as symbols and reuse the graph."""
    backend = Recorder()

    def fn(a, sfa, b, sfb, d, offs):
        w = moegemm.Mxfp4Weights(b, sfb) if prepared else (b, sfb)
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offs)
        return d

    compiled = torch.compile(fn, fullgraph=True, backend=backend, dynamic=True)
    raw = torch.empty(G, N, K // 2, dtype=U8, device="meta")
    b, sfb = (
        prepared_tensors(raw)
        if prepared
        else (raw, torch.empty(G, N, K // 32, dtype=U8, device="meta"))
    )
    offs = t(G, dtype=I32).to("meta")
    for rows in (200, 300, 17):
        a, sfa, d = t(rows, K, dtype=FP8), t(rows, NKB, dtype=FP32), t(rows, N)
        args = [x.to("meta") for x in (a, sfa)] + [b, sfb, d.to("meta"), offs]
        assert compiled(*args) is args[4]
    assert len(backend.graphs) == 1
    aot = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    args = [x.to("meta") for x in (t(40, K, dtype=FP8), t(40, NKB, dtype=FP32))]
    args += [b, sfb, t(40, N).to("meta")]
    assert aot(*args, offs) is args[4]
