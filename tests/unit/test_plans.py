"""The argument checker's signature-keyed plans (no GPU needed).

A call misses (full checks, plan stored) or hits (a plan of its signature exists: only the
pointers' alignment and the current device are checked). A hit must never accept what a miss
refuses, and must launch exactly as the miss did. The operands are CPU tensors wrapped in
`FakeCuda`, which reports a CUDA device; the current device, the stream getter and the plan
builder are stubbed, and plans record their launches instead of running a kernel."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import moegemm
from moegemm.api import bf16_gemm as dense_mod
from moegemm.api import k_grouped as kg_mod
from moegemm.api import m_grouped as mg_mod
from moegemm.families import lookup, select_config
from moegemm.heuristics import SM90
from moegemm.launch import plans as plans_mod
from moegemm.launch.device import registered_plan_caches
from moegemm.launch.plans import Plan, bound_integers

BF16, FP32, I32 = torch.bfloat16, torch.float32, torch.int32
FAMILIES = (dense_mod, mg_mod, kg_mod)


class FakeCuda(torch.Tensor):
    """A CPU tensor that reports itself on cuda:<index>."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self._fake_index)


class FakeXpu(FakeCuda):
    """Another accelerator numbering its devices like CUDA does: xpu:0."""

    @property
    def device(self) -> torch.device:
        return torch.device("xpu", self._fake_index)


def gpu(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    t = t.as_subclass(FakeCuda)
    t._fake_index = index
    return t


def dense(*shape: int, dtype: torch.dtype = BF16, index: int = 0) -> torch.Tensor:
    return gpu(torch.zeros(shape, dtype=dtype), index)


def shifted(shape: tuple[int, ...], dtype: torch.dtype, elements: int) -> torch.Tensor:
    """A contiguous-strided view whose base sits `elements` past a 64-byte aligned one: the
    same signature as dense(*shape), another data pointer."""
    count = 1
    for s in shape:
        count *= s
    base = torch.zeros(count + 64, dtype=dtype)
    return gpu(base[elements : elements + count].view(shape))


def launcher_of(desc) -> type:
    """The `_C` launcher class an SM90 plan of `desc` binds (the registry's answer)."""
    return getattr(moegemm._C, lookup(SM90, desc).launcher_name(desc, select_config(desc, SM90)))


class Rig:
    """Records plan builds and launches; `current` is what the current-device getter says.

    A plan's launch is bound to the device and integers its build was given (as _C's
    launcher.bind) and takes the pointers and the stream; as _C's bound launch it refuses (False,
    nothing recorded) an operand base off a 16-byte boundary or another current device (the
    C++ side of that is tests/helpers/fake_driver/cases.py's). A launch is recorded in the unbound
    launcher's order, (*pointers, *integers, stream): what the kernel would have received."""

    def __init__(self) -> None:
        self.builds: list = []
        self.launches: list[tuple] = []
        self.current = 0

    def make_plan(self, device: int, desc, problem: tuple, config=None) -> Plan:
        args = bound_integers(launcher_of(desc), problem)
        self.builds.append(desc)

        def launch(*call: int) -> bool:
            assert len(call) == 6, call  # five pointers and the stream, as the bound launches
            if (call[0] | call[1] | call[2] | call[3]) & 15 or self.current != device:
                return False
            self.launches.append((*call[:-1], *args, call[-1]))
            return True

        return Plan(device, launch, args, config)


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch):
    rig = Rig()
    for mod in (*FAMILIES, plans_mod):  # the hit path's stream; the miss path's plan and stream
        monkeypatch.setattr(mod, "raw_stream", lambda index: 1000 + index)
    monkeypatch.setattr(plans_mod, "make_plan", rig.make_plan)
    monkeypatch.setattr(plans_mod, "current_device", lambda: rig.current)  # the full checks'
    clear_plans()
    yield rig
    clear_plans()


def clear_plans() -> None:
    for cache in registered_plan_caches():
        cache.clear()


def cached_plans() -> int:
    return sum(len(cache) for cache in registered_plan_caches())


def outcome(rig: Rig, fn: Callable, args: tuple, kwargs: dict):
    """What a call did: its launches (pointers and all), or the error it raised."""
    rig.launches.clear()
    try:
        fn(*args, **kwargs)
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return list(rig.launches)


# ---- one valid call per public function and layout ----

G, M, N, K = 4, 256, 64, 128


def dense_call(c: bool = False) -> tuple[Callable, tuple, dict]:
    d = dense(M, N, dtype=FP32)
    args = (dense(M, K), dense(N, K), d) + ((dense(M, N, dtype=FP32),) if c else ())
    return moegemm.bf16_gemm_nt, args, {}


def indices_call() -> tuple[Callable, tuple, dict]:
    args = (dense(M, K), dense(G, N, K), dense(M, N), dense(M, dtype=I32))
    return moegemm.m_grouped_bf16_gemm_nt_contiguous, args, {}


def offs_call() -> tuple[Callable, tuple, dict]:
    args = (dense(200, K), dense(G, N, K), dense(200, N))
    return moegemm.m_grouped_bf16_gemm_nt_contiguous, args, {"offs": dense(G, dtype=I32)}


def masked_call(expected_m: object = 32) -> tuple[Callable, tuple, dict]:
    args = (dense(G, 64, K), dense(G, N, K), dense(G, 64, N), dense(G, dtype=I32), expected_m)
    return moegemm.m_grouped_bf16_gemm_nt_masked, args, {}


def k_grouped_call(c: bool = False) -> tuple[Callable, tuple, dict]:
    d = dense(G, M, N, dtype=FP32)
    args = (dense(300, M), dense(300, N), d, dense(G, dtype=I32))
    return moegemm.k_grouped_bf16_gemm_tn_contiguous, args + ((d,) if c else ()), {}


CALLS = {
    "dense": dense_call,
    "dense_c": lambda: dense_call(c=True),
    "m_indices": indices_call,
    "offs": offs_call,
    "masked": masked_call,
    "k_grouped": k_grouped_call,
    "k_grouped_c": lambda: k_grouped_call(c=True),
}


def test_a_hit_launches_as_the_miss_did_without_the_full_checks(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, make in CALLS.items():
        fn, args, kwargs = make()
        first = outcome(rig, fn, args, kwargs)
        assert len(first) == 1, (name, first)
        assert len(rig.builds) == 1, name
        # A second call of the same signature, new tensors: no checks, no build.
        fn, args2, kwargs2 = make()
        with monkeypatch.context() as m:
            for check in ("check_dense", "check_contiguous", "check_masked", "check_k_grouped"):
                for mod in FAMILIES:
                    if hasattr(mod, check):
                        m.setattr(mod, check, None)
            second = outcome(rig, fn, args2, kwargs2)
        assert len(rig.builds) == 1, name
        ptrs = len(second[0]) - len(first[0][5:]) - 1
        assert second[0][5:] == first[0][5:], name  # the same integers and stream
        assert second[0][:ptrs] != first[0][:ptrs], name  # the new call's pointers
        rig.builds.clear()
        clear_plans()


def test_launch_arguments() -> None:
    """What the plans bind after the pointers (the launchers' argument order, csrc/)."""
    rig = Rig()
    with pytest.MonkeyPatch.context() as m:
        for mod in (*FAMILIES, plans_mod):
            m.setattr(mod, "raw_stream", lambda index: 7)
        m.setattr(plans_mod, "make_plan", rig.make_plan)
        m.setattr(plans_mod, "current_device", lambda: 0)
        clear_plans()
        a = gpu(torch.zeros(M, K + 8, dtype=BF16)[:, :K])
        b, d = dense(N, K), dense(M, N, dtype=FP32)
        moegemm.bf16_gemm_nt(a, b, d, d)
        assert rig.launches[-1][3] == d.data_ptr()  # c
        assert rig.launches[-1][4:] == (0, M, M, N, K, 1, K + 8, K, N * K, N, N, 7)
        fn, args, kwargs = offs_call()
        fn(*args, **kwargs)
        assert rig.launches[-1][3:] == (0, kwargs["offs"].data_ptr(), 200, 200, N, K, G, K, K,
                                        N * K, N, 0, 7)  # fmt: skip
        fn, args, _ = masked_call(999)
        fn(*args)  # expected_m is clamped to max_m for the choice
        assert rig.launches[-1][5:] == (G * 64, 64, N, K, G, K, K, N * K, N, 0, 7)
        assert rig.builds[-1].expected_m == 64
        fn, args, _ = k_grouped_call(c=True)
        fn(*args)
        assert rig.launches[-1][3] == args[2].data_ptr()
        assert rig.launches[-1][5:] == (M, N, 300, G, M, N, 7)
        assert rig.builds[-1].k == 75 and rig.builds[-1].with_c  # k: expected rows per group
        clear_plans()


# ---- a hit never accepts what a miss refuses: every variant, cold and warm ----


def _with(args: tuple, position: int, value: object) -> tuple:
    return (*args[:position], value, *args[position + 1 :])


def variant(base: str, edit: Callable[[tuple, dict], tuple[tuple, dict]]) -> Callable[[], tuple]:
    """A call made from a fresh base call by `edit(args, kwargs) -> (args, kwargs)`."""

    def make() -> tuple:
        fn, args, kwargs = CALLS[base]()
        return (fn, *edit(args, kwargs))

    return make


def replaced(base: str, position: int, value: Callable[[torch.Tensor], object]) -> Callable:
    """The base call with its argument at `position` replaced by value(that argument)."""
    return variant(base, lambda args, kw: (_with(args, position, value(args[position])), kw))


def on_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor)


def on_cuda1(t: torch.Tensor) -> torch.Tensor:
    return gpu(on_cpu(t), 1)


def on_xpu0(t: torch.Tensor) -> torch.Tensor:
    t = on_cpu(t).as_subclass(FakeXpu)
    t._fake_index = 0
    return t


def variants() -> list[tuple[str, str, Callable[[], tuple]]]:
    """(base call, variant name, variant): each variant keeps the base's signature and changes
    what a signature does not capture, or changes one thing a signature does capture."""
    out = []
    # Views of every TMA operand at another address: the same shape, strides, dtype, device.
    tma = {
        "dense": (0, 1, 2),
        "dense_c": (3,),
        "m_indices": (0, 1, 2),
        "masked": (0, 1, 2),
        "k_grouped": (0, 1, 2),
        "k_grouped_c": (4,),
    }
    for base, positions in tma.items():
        for position in positions:
            for offset in (4, 8, 32):  # bytes; 32: aligned, accepted both ways

                def view(t: torch.Tensor, offset: int = offset) -> torch.Tensor:
                    return shifted(tuple(t.shape), t.dtype, offset // t.element_size())

                out.append((base, f"shifted-{position}-{offset}", replaced(base, position, view)))
    # One operand on another device, or on the CPU (an index vector included).
    for base, make in CALLS.items():
        _, args, _ = make()
        for position, x in enumerate(args):
            if isinstance(x, torch.Tensor):
                out.append((base, f"cuda1-{position}", replaced(base, position, on_cuda1)))
                out.append((base, f"cpu-{position}", replaced(base, position, on_cpu)))
                out.append((base, f"xpu0-{position}", replaced(base, position, on_xpu0)))
    out.append(
        ("offs", "cpu-offs", variant("offs", lambda a, kw: (a, {"offs": on_cpu(kw["offs"])})))
    )
    # Non-tensor arguments the signature must tell apart (2.0 == 2 and True == 1 as dict keys).
    for value in (32.0, True, "32", None, [32], 0, -1, 64):
        out.append(("masked", f"expected-{value!r}", replaced("masked", 4, lambda _, v=value: v)))
    out += [
        ("offs", "both-layouts", variant("offs", lambda args, kw: (
            (*args, dense(200, dtype=I32)), kw))),
        ("offs", "no-layout", variant("offs", lambda args, kw: (args, {}))),
        ("offs", "offs-as-m_indices", variant("offs", lambda args, kw: ((*args, kw["offs"]), {}))),
        ("dense", "duck-typed-a", replaced("dense", 0, lambda t: Duck(t))),
        ("dense", "c-bf16", variant("dense", lambda args, kw: ((*args, dense(M, N)), kw))),
        ("dense_c", "no-c", variant("dense_c", lambda args, kw: (args[:3], kw))),
        ("k_grouped", "c-wrong-shape", variant("k_grouped", lambda args, kw: (
            (*args, dense(G, M, N - 8, dtype=FP32)), kw))),
        ("k_grouped_c", "c-padded", replaced("k_grouped_c", 4, lambda t: gpu(
            torch.zeros(G, M, N + 8)[..., :N]))),
        ("m_indices", "m_indices-strided", replaced("m_indices", 3, lambda t: gpu(
            torch.zeros(2 * M, dtype=I32)[::2]))),
    ]  # fmt: skip
    return out


class Duck:
    """Quacks like a tensor (the signature's attributes and data_ptr) but is not one."""

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device
        self._t = t

    def stride(self) -> tuple[int, ...]:
        return self._t.stride()

    def data_ptr(self) -> int:
        return self._t.data_ptr()


VARIANTS = variants()


@pytest.mark.parametrize("base,name,make", VARIANTS, ids=[f"{b}-{n}" for b, n, _ in VARIANTS])
def test_a_warm_cache_decides_as_a_cold_one(rig: Rig, base: str, name: str, make: Callable) -> None:
    fn, args, kwargs = make()
    clear_plans()
    cold = outcome(rig, fn, args, kwargs)
    clear_plans()
    prime_fn, prime_args, prime_kwargs = CALLS[base]()
    assert len(outcome(rig, prime_fn, prime_args, prime_kwargs)) == 1  # the base is valid
    warm = outcome(rig, fn, args, kwargs)
    assert warm == cold
    if name.startswith("shifted"):  # misaligned views refused, aligned ones launched
        aligned = name.endswith("-32")
        assert (cold[0] is ValueError and "16-byte boundary" in cold[1]) != aligned, cold
    if name.startswith(("cuda1", "cpu", "xpu0")):
        assert cold[0] is ValueError and "cuda" in cold[1].lower(), cold


@pytest.mark.parametrize("base", list(CALLS))
def test_a_hit_checks_the_current_device(rig: Rig, base: str) -> None:
    fn, args, kwargs = CALLS[base]()
    assert len(outcome(rig, fn, args, kwargs)) == 1
    rig.current = 1
    err = outcome(rig, fn, args, kwargs)
    assert err[0] is ValueError and "current CUDA device is cuda:1" in err[1]
    rig.current = 0
    assert len(outcome(rig, fn, args, kwargs)) == 1


def test_the_layout_is_part_of_the_signature(rig: Rig) -> None:
    """An index tensor that fits both layouts (G = M = 128 rows): passed as offs and then as
    m_indices, each call builds and launches its own layout's kernel."""
    a, b, d = dense(128, K), dense(128, N, K), dense(128, N)
    info = dense(128, dtype=I32)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=info)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, info)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=info)
    assert [desc.kind for desc in rig.builds] == ["m_grouped_offsets", "m_grouped_contiguous"]


def test_expected_m_is_part_of_the_signature(rig: Rig) -> None:
    for expected_m in (8, 16, 8):
        fn, args, _ = masked_call(expected_m)
        fn(*args)
    assert [desc.expected_m for desc in rig.builds] == [8, 16]


def test_set_num_sms_clears_the_plans(rig: Rig) -> None:
    for make in CALLS.values():
        fn, args, kwargs = make()
        fn(*args, **kwargs)
    assert cached_plans() == len(CALLS)
    try:
        moegemm.set_num_sms(8)
        assert cached_plans() == 0
    finally:
        moegemm.set_num_sms(None)
    fn, args, kwargs = dense_call()
    fn(*args, **kwargs)
    assert len(rig.builds) == len(CALLS) + 1


def test_a_forced_config_neither_reads_nor_fills_the_plans(rig: Rig) -> None:
    forced = object()
    for make in CALLS.values():
        fn, args, kwargs = make()
        fn(*args, **kwargs)  # cached
        fn(*args, **kwargs, config=forced)  # built again with the forced config, not stored
    assert cached_plans() == len(CALLS)
    assert len(rig.builds) == 2 * len(CALLS)


def test_empty_problems_store_no_plan(rig: Rig) -> None:
    moegemm.bf16_gemm_nt(dense(0, K), dense(N, K), dense(0, N))
    moegemm.m_grouped_bf16_gemm_nt_contiguous(
        dense(0, K), dense(G, N, K), dense(0, N), offs=dense(G, dtype=I32)
    )
    moegemm.m_grouped_bf16_gemm_nt_masked(
        dense(G, 0, K), dense(G, N, K), dense(G, 0, N), dense(G, dtype=I32), 4
    )
    moegemm.k_grouped_bf16_gemm_tn_contiguous(
        dense(300, 0), dense(300, N), dense(G, 0, N, dtype=FP32), dense(G, dtype=I32)
    )
    assert cached_plans() == 0 and rig.launches == [] and rig.builds == []


def test_real_cpu_tensors_are_refused_and_never_cached(rig: Rig) -> None:
    a, b, d = torch.zeros(M, K, dtype=BF16), torch.zeros(N, K, dtype=BF16), torch.zeros(M, N)
    for _ in range(2):
        with pytest.raises(ValueError, match="a must be on a CUDA device, got cpu"):
            moegemm.bf16_gemm_nt(a, b, d)
    assert cached_plans() == 0


# ---- errors name the argument as the caller passed it ----


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda i: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            dense(200, K), dense(G, N, K), dense(200, N), offs=i(G)), "offs"),
        (lambda i: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            dense(M, K), dense(G, N, K), dense(M, N), i(M)), "m_indices"),
        (lambda i: moegemm.m_grouped_bf16_gemm_nt_masked(
            dense(G, 64, K), dense(G, N, K), dense(G, 64, N), i(G), 8), "masked_m"),
        (lambda i: moegemm.k_grouped_bf16_gemm_tn_contiguous(
            dense(300, M), dense(300, N), dense(G, M, N, dtype=FP32), i(G)), "offs"),
    ],
    ids=["offs", "m_indices", "masked_m", "k_grouped_offs"],
)  # fmt: skip
def test_errors_name_the_index_argument(rig: Rig, call: Callable, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be on a CUDA device, got cpu$"):
        call(lambda n: torch.zeros(n, dtype=I32))
    with pytest.raises(ValueError, match=rf"^{name} is on cuda:1 but a is on cuda:0$"):
        call(lambda n: dense(n, dtype=I32, index=1))
    with pytest.raises(TypeError, match=rf"^{name} must have dtype torch.int32"):
        call(lambda n: dense(n, dtype=torch.int64))
    with pytest.raises(ValueError, match=rf"^{name} must have shape"):
        call(lambda n: dense(n + 1, dtype=I32))
    with pytest.raises(ValueError, match=rf"^{name} must be contiguous"):
        call(lambda n: gpu(torch.zeros(2 * n, dtype=I32)[::2]))


@pytest.mark.parametrize(
    "desc",
    [
        ("bf16_gemm_nt", 4096, 7168, 2048, 1, 0, False),
        ("m_grouped_offsets", 4096, 4096, 7168, 8, 512, False),
        ("m_grouped_masked", 64, 4096, 7168, 32, 8, False),
        ("k_grouped", 2048, 7168, 512, 8, 0, True),
    ],
    ids=lambda d: d[0],
)
@pytest.mark.parametrize("arch_name", ["sm_90a", "sm_100f"])
def test_a_plan_binds_the_heuristics_pick(
    monkeypatch: pytest.MonkeyPatch, desc: tuple, arch_name: str
) -> None:
    """build_launcher hands the launcher the chosen config's kernel, tile and launch shape; the
    SM100 BF16 kernels (compiled and statically checked, not run on hardware) take the SM90
    launchers, whose params they share."""
    import moegemm._C as C
    from moegemm.families import select_config
    from moegemm.heuristics import GemmDesc, arch_for

    seen: dict = {}

    class Launcher:
        bind_args = ("rows", "m", "n")

        def __init__(self, kernel, *shape: int, **storage: object) -> None:
            seen.update(kernel=kernel, shape=shape, storage=storage)

        def bind(self, device: int, *integers: int) -> tuple:
            seen.update(bound=(device, *integers))
            return ("bound", self)

    class KGroupedLauncher(Launcher):
        pass

    arch = arch_for(arch_name, 132 if arch_name == "sm_90a" else 148)
    monkeypatch.setattr(C, "Bf16GemmLauncher", Launcher)
    monkeypatch.setattr(C, "Bf16KGroupedLauncher", KGroupedLauncher)
    monkeypatch.setattr(plans_mod, "load_kernel", lambda spec: spec)
    monkeypatch.setattr(plans_mod, "arch_for_device", lambda device: arch)
    kind, m, n, k, groups, expected, with_c = desc
    d_dtype = "fp32" if kind == "k_grouped" else "bf16"
    gemm = GemmDesc(kind, m, n, k, groups, d_dtype=d_dtype, with_c=with_c, expected_m=expected)
    plan = plans_mod.make_plan(0, gemm, {"rows": 1, "m": 2, "n": 3, "k": 4})
    config = select_config(gemm, arch)
    assert plan.config == config and plan.args == (1, 2, 3) and plan.device == 0
    # The plan's launch is its launcher bound to the call's integers.
    assert seen["bound"] == (0, 1, 2, 3) and plan.launch == ("bound", plan.launcher)
    del seen["bound"]
    unbound = plans_mod.build_plan(0, gemm)  # for tools: the launcher itself, nothing bound
    assert unbound.launch is unbound.launcher and unbound.args == () and "bound" not in seen
    assert seen["kernel"] == plans_mod.kernel_spec(gemm, config, arch)
    assert seen["kernel"].arch == arch.name
    assert isinstance(plan.launcher, KGroupedLauncher) == (kind == "k_grouped")
    lay = config.layout
    block_m, block_n, block_k, num_blocks, threads, smem, cluster_m, cluster_n = seen["shape"]
    assert (block_m, block_n, block_k) == (lay.block_m, lay.block_n, lay.block_k)
    assert (cluster_m, cluster_n) == (lay.cluster_m, lay.cluster_n)
    assert (threads, smem) == (config.launch.num_threads, config.pipeline.smem_bytes)
    assert 0 < num_blocks <= arch.num_sms and num_blocks % lay.cluster_size == 0
    assert seen["storage"] == config.storage.launcher_kwargs()  # the boxes, from the config


def test_a_launch_refused_after_the_full_checks_raises(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full checks passed (torch's current device is the operands'), yet the bound launch
    refuses: the CUDA context current on the thread is another device's. Never silent."""
    make = rig.make_plan

    def refusing(device: int, desc, problem: tuple, config=None) -> Plan:
        plan = make(device, desc, problem, config)
        plan.launch = lambda *call: False
        return plan

    monkeypatch.setattr(plans_mod, "make_plan", refusing)
    for make_call in CALLS.values():
        fn, args, kwargs = make_call()
        for _ in range(2):  # the miss, then the refused hit that falls back to the full checks
            with pytest.raises(RuntimeError, match="not on cuda:0, torch's current device"):
                fn(*args, **kwargs)
    assert rig.launches == [] and len(rig.builds) == 2 * len(CALLS)
