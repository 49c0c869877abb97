"""The launchers of moegemm._C against a fake CUDA driver (libcuda_fake.cpp), on the CPU: the
launch shape, the cluster clamp, PDL, every params field and TMA descriptor the BF16 families
fill, and the errors. Run by tests/unit/test_fake_driver.py in a subprocess whose LD_LIBRARY_PATH
puts the fake first; skipped when the libcuda.so.1 found is not the fake."""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import itertools
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

try:
    FAKE = ctypes.CDLL("libcuda.so.1")
    FAKE.fake_last_launch.restype = ctypes.c_char_p
    FAKE.fake_encode_log.restype = ctypes.c_char_p
except (OSError, AttributeError):
    pytest.skip("libcuda.so.1 is not the fake driver", allow_module_level=True)


def _load_extension() -> ModuleType:
    """The checkout's _C without importing the package (and torch with it), else the installed."""
    for path in sorted(glob.glob(str(REPO / "python" / "moegemm" / "_C*.so"))):
        spec = importlib.util.spec_from_file_location("moegemm._C", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module("moegemm._C")
    except ImportError:
        pytest.skip("moegemm._C is not built", allow_module_level=True)


C = _load_extension()

# A well-formed 64-bit CUDA ELF header with no sections: passes _C's bounds checks.
ELF = b"\x7fELF\x02\x01\x01" + bytes(9)
ELF += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0)
BF16, FP32 = 9, 7  # CUtensorMapDataType
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CUtensorMapSwizzle
GEMM, K_GROUPED = 0, 1  # which params struct the fake decodes
A, B, D, CPTR, INFO = 0x10000, 0x20000, 0x30000, 0x40000, 0x50000  # 16-byte aligned "pointers"
_BASES = itertools.count(1)  # own_pointers: n << 32, above every fixed pointer here


def last_launch() -> dict[str, object]:
    """The fake's record of the last launch; descriptors as dicts of tuples."""
    report: dict[str, object] = {}
    for word in FAKE.fake_last_launch().decode().split():
        key, value = word.split("=", 1)
        if ":" not in value:
            report[key] = value if value == "unset" else int(value)
            continue
        desc: dict[str, tuple[int, ...]] = {}
        for part in value.split(","):
            name, numbers = part.split(":")
            desc[name] = tuple(int(x) for x in numbers.split("/"))
        report[key] = desc
    return report


def desc(ptr, dtype, swizzle_bytes, dims, strides, box):
    """What the fake records for a descriptor (unused trailing dims/strides/box as 0)."""
    pad = lambda xs, n: tuple(xs) + (0,) * (n - len(xs))
    return {
        "ptr": (ptr,), "dtype": (dtype,), "swizzle": (SWIZZLE[swizzle_bytes],),
        "dims": pad(dims, 3), "strides": pad(strides, 2), "box": pad(box, 3),
    }  # fmt: skip


@pytest.fixture(autouse=True)
def _fake_state():
    FAKE.fake_set_max_active_clusters(8)
    FAKE.fake_set_context(1)
    FAKE.fake_set_params_kind(GEMM)
    pdl = C.get_pdl()
    yield
    C.set_pdl(pdl)


@pytest.fixture(scope="module")
def kernel():
    return C.Kernel(ELF)


def gemm_launcher(kernel, **overrides):
    """A Bf16GemmLauncher with the boxes its config would state (StorageConfig): each CTA's
    share of a multicast tile's rows, BLOCK_K wide; D in store_cols x 64 boxes."""
    shape = {
        "block_m": 128, "block_n": 128, "block_k": 64, "num_blocks": 132, "num_threads": 384,
        "smem_bytes": 200_000, "cluster_m": 1, "cluster_n": 1,
    }  # fmt: skip
    store_cols = overrides.pop("store_cols", 0)
    shape.update(overrides)
    boxes = {
        "load_box_a": (shape["block_k"], shape["block_m"] // shape["cluster_n"]),
        "load_box_b": (shape["block_k"], shape["block_n"] // shape["cluster_m"]),
        "swizzle_a": 128, "swizzle_b": 128, **d_boxes(store_cols, 2),
    }  # fmt: skip
    return C.Bf16GemmLauncher(kernel, **shape, **boxes)


def d_boxes(store_cols: int, elem_bytes: int) -> dict:
    """The TMA-store epilogue's box (store_cols x 64 rows) and swizzle; none for 0."""
    if not store_cols:
        return {}
    return {"store_box_d": (store_cols, 64), "swizzle_d": elem_bytes * store_cols}


def k_grouped_launcher(kernel, store_cols: int = 0, cluster_m: int = 1):
    """A Bf16KGroupedLauncher with its config's boxes: MN-major 64-column chunks of block_k
    rows, FP32 D."""
    return C.Bf16KGroupedLauncher(
        kernel, 128, 256, 64, 100, 256, 150_000, cluster_m, 1, load_box_a=(64, 64),
        load_box_b=(64, 64), swizzle_a=128, swizzle_b=128, **d_boxes(store_cols, 4),
    )  # fmt: skip


# (a, b, d, c, group_info, rows, m, n, k, num_groups, lda, ldb, ldb_group, ldd, ldc)
def gemm_args(**overrides):
    args = {
        "a": A, "b": B, "d": D, "c": 0, "info": 0, "rows": 1000, "m": 1000, "n": 2048,
        "k": 7168, "groups": 1, "lda": 7168, "ldb": 7168, "ldb_group": 2048 * 7168,
        "ldd": 2048, "ldc": 0,
    }  # fmt: skip
    args.update(overrides)
    return tuple(args.values())


@pytest.mark.parametrize(
    "cluster_m, cluster_n, store_cols", [(1, 1, 0), (2, 1, 64), (1, 2, 32), (1, 1, 16)]
)
@pytest.mark.parametrize("pdl", [False, True])
def test_gemm_launch_fills_every_field(kernel, cluster_m, cluster_n, store_cols, pdl):
    cluster = cluster_m * cluster_n
    launcher = gemm_launcher(
        kernel, block_m=256, cluster_m=cluster_m, cluster_n=cluster_n, store_cols=store_cols
    )
    # With a cluster: as many clusters as fit at once (the fake says 8), else the planned count.
    assert launcher.num_blocks == (8 * cluster if cluster > 1 else 132)
    C.set_pdl(pdl)
    before = FAKE.fake_launches()
    rows, m, n, k, groups = 4000, 1000, 2048, 7168, 4
    args = gemm_args(c=CPTR, info=INFO, rows=rows, m=m, n=n, k=k, groups=groups, ldd=2056)
    launcher(*args[:-1], 2048, 0xABC)  # ldc, stream
    assert FAKE.fake_launches() == before + 1
    got = last_launch()
    assert (got["grid"], got["grid_yz"], got["block"], got["block_yz"]) == (
        launcher.num_blocks, 1, 384, 1)  # fmt: skip
    assert (got["smem"], got["stream"], got["pdl"]) == (200_000, 0xABC, int(pdl))
    assert (got["cluster"], got["cluster_yz"]) == ((cluster, 1) if cluster > 1 else (0, 0))
    fields = ("m", "rows", "n", "k", "num_groups", "ldd", "ldc", "d", "c", "group_info")
    assert [got[f] for f in fields] == [m, rows, n, k, groups, 2056, 2048, D, CPTR, INFO]
    # Each CTA of a cluster along N loads its share of A's rows; along M, of B's.
    assert got["tma_a"] == desc(A, BF16, 128, (k, rows), (7168 * 2,), (64, 256 // cluster_n))
    assert got["tma_b"] == desc(
        B, BF16, 128, (k, n, groups), (7168 * 2, 2048 * 7168 * 2), (64, 128 // cluster_m, 1)
    )
    if store_cols:
        assert got["tma_d"] == desc(
            D, BF16, 2 * store_cols, (n, rows), (2056 * 2,), (store_cols, 64)
        )


def test_cluster_clamp_asks_the_driver_with_the_launch_shape(kernel):
    FAKE.fake_set_max_active_clusters(3)
    before = FAKE.fake_occupancy_queries()
    launcher = gemm_launcher(kernel, cluster_m=2, num_threads=256, smem_bytes=150_000)
    assert launcher.num_blocks == 6
    assert FAKE.fake_occupancy_queries() == before + 1  # once, at plan time
    launcher(*gemm_args(), 0)
    launcher(*gemm_args(), 0)
    assert FAKE.fake_occupancy_queries() == before + 1
    got = last_launch()
    assert (got["occupancy_cluster"], got["occupancy_threads"], got["occupancy_smem"]) == (
        2, 256, 150_000)  # fmt: skip
    # Fewer planned CTAs than fit: kept. No cluster: the driver is not asked.
    assert gemm_launcher(kernel, cluster_n=2, num_blocks=4).num_blocks == 4
    assert gemm_launcher(kernel, num_blocks=7).num_blocks == 7
    assert FAKE.fake_occupancy_queries() == before + 2
    FAKE.fake_set_max_active_clusters(0)
    with pytest.raises(RuntimeError, match="Bf16GemmLauncher: no cluster of 2 CTAs fits"):
        gemm_launcher(kernel, cluster_m=2)


@pytest.mark.parametrize(
    "args", [{"rows": 0, "m": 0}, {"n": 0}, {"groups": 0}], ids=["rows", "n", "groups"]
)
def test_an_empty_output_launches_nothing(kernel, args):
    launcher = gemm_launcher(kernel)
    before = (FAKE.fake_launches(), FAKE.fake_encodes())
    launcher(*gemm_args(**args), 0)
    assert (FAKE.fake_launches(), FAKE.fake_encodes()) == before


def own_pointers(count: int) -> tuple[int, ...]:
    """Pointers no other case passes. The descriptor memo (tma.cpp) lives as long as the process
    and keys on the pointer: a case counting encodes on shared pointers would count what the
    cases before it left there, and pass or fail with the order they run in."""
    base = next(_BASES) << 32
    return tuple(base + (i << 24) for i in range(count))


def test_descriptors_are_memoised_per_view(kernel):
    launcher = gemm_launcher(kernel, store_cols=64)
    a, b, d = own_pointers(3)
    encodes = FAKE.fake_encodes()
    launcher(*gemm_args(a=a, b=b, d=d), 0)
    assert FAKE.fake_encodes() == encodes + 3  # three new views
    launcher(*gemm_args(a=a, b=b, d=d), 0)
    assert FAKE.fake_encodes() == encodes + 3  # the same three views: no encode
    launcher(*gemm_args(a=a + 256, b=b, d=d), 0)
    assert FAKE.fake_encodes() == encodes + 4  # only A moved
    assert last_launch()["tma_a"]["ptr"] == (a + 256,)


@pytest.mark.parametrize(
    "shape, match",
    [
        ({"cluster_m": 2, "cluster_n": 2}, "clusters are 1x1, 2x1 or 1x2"),
        ({"cluster_m": 2, "block_n": 8}, "multiple of 8 rows"),
        ({"cluster_m": 2, "num_blocks": 3}, "multiple of the cluster size 2"),
        ({"num_blocks": 0}, "positive multiple"),
        ({"num_threads": 0}, "must be positive"),
        ({"smem_bytes": -1}, "smem_bytes out of range"),
        ({"store_cols": 128}, "swizzle must be 0, 32, 64 or 128 bytes, got 256"),
    ],
)
def test_bad_launch_shapes_are_value_errors(kernel, shape, match):
    with pytest.raises(ValueError, match=match):
        gemm_launcher(kernel, **shape)(*gemm_args(), 0)


def test_call_errors(kernel):
    launcher = gemm_launcher(kernel)
    with pytest.raises(ValueError, match="m out of range for a 32-bit kernel field: -1"):
        launcher(*gemm_args(m=-1), 0)
    with pytest.raises(ValueError, match="2\\^31"):
        launcher(*gemm_args(rows=1 << 31, m=1 << 31, n=1 << 20), 0)
    # The driver's refusal names the call and every argument.
    with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled failed.*ptr=0x10001 .*box="):
        launcher(*gemm_args(a=A + 1), 0)
    with pytest.raises(RuntimeError, match="cuKernelSetAttribute failed"):
        gemm_launcher(kernel, smem_bytes=300_000)(*gemm_args(), 0)
    FAKE.fake_set_context(0)
    with pytest.raises(RuntimeError, match="no CUDA context is current"):
        launcher(*gemm_args(), 0)


def test_launcher_keeps_its_kernel_alive():
    kernel = C.Kernel(ELF)
    refs = sys.getrefcount(kernel)
    launcher = gemm_launcher(kernel)
    assert sys.getrefcount(kernel) == refs + 1
    del launcher


@pytest.mark.parametrize("num_tokens, store_cols", [(1000, 0), (0, 32), (17, 32)])
def test_k_grouped_launch_fills_every_field(kernel, num_tokens, store_cols):
    FAKE.fake_set_params_kind(K_GROUPED)
    launcher = k_grouped_launcher(kernel, store_cols)
    assert launcher.num_blocks == 100
    m, n, groups = 512, 768, 4
    launcher(A, B, D, CPTR, INFO, m, n, num_tokens, groups, 520, 776, 7)
    got = last_launch()
    assert (got["grid"], got["block"], got["smem"], got["stream"], got["cluster"]) == (
        100, 256, 150_000, 7, 0)  # fmt: skip
    fields = ("m", "n", "num_tokens", "num_groups", "d", "c", "offs")
    assert [got[f] for f in fields] == [m, n, num_tokens, groups, D, CPTR, INFO]
    rows = max(num_tokens, 1)  # no rows at all: a one-row map the kernel never loads from
    assert got["tma_a"] == desc(A, BF16, 128, (m, rows), (520 * 2,), (64, 64))
    assert got["tma_b"] == desc(B, BF16, 128, (n, rows), (776 * 2,), (64, 64))
    if store_cols:
        assert got["tma_d"] == desc(D, FP32, 128, (n, groups * m), (n * 4,), (store_cols, 64))
    before = FAKE.fake_launches()
    launcher(A, B, D, 0, INFO, 0, n, num_tokens, groups, 520, 776, 7)
    assert FAKE.fake_launches() == before  # m = 0: nothing to write


def test_k_grouped_takes_no_clusters(kernel):
    with pytest.raises(ValueError, match="Bf16KGroupedLauncher: the k-grouped kernel takes"):
        k_grouped_launcher(kernel, cluster_m=2)


# ---- bound launches: launcher.bind(0, *integers)(*pointers, stream), the plans' hot path ----

GEMM_POINTERS = 5  # a, b, d, c, group_info (k-grouped: a, b, d, c, offs)


def bound_and_unbound(launcher, args, stream):
    """The fake's records of the unbound call and of the bound launch of the same arguments."""
    launcher(*args, stream)
    unbound = FAKE.fake_last_launch().decode()
    launches = FAKE.fake_launches()
    launcher.bind(0, *args[GEMM_POINTERS:])(*args[:GEMM_POINTERS], stream)
    assert FAKE.fake_launches() == launches + 1
    return unbound, FAKE.fake_last_launch().decode()


@pytest.mark.parametrize(
    "cluster_m, cluster_n, store_cols", [(1, 1, 0), (2, 1, 64), (1, 2, 32), (1, 1, 16)]
)
@pytest.mark.parametrize("pdl", [False, True])
def test_a_bound_launch_launches_what_the_unbound_call_does(
    kernel, cluster_m, cluster_n, store_cols, pdl
):
    launcher = gemm_launcher(
        kernel, block_m=256, cluster_m=cluster_m, cluster_n=cluster_n, store_cols=store_cols
    )
    C.set_pdl(pdl)
    args = gemm_args(c=CPTR, info=INFO, rows=4000, groups=4, ldd=2056, ldc=2048)
    unbound, bound = bound_and_unbound(launcher, args, 0xABC)
    # Every launch field, scalar and descriptor the fake records: grid, cluster, PDL, params.
    assert bound == unbound and "tma_a=ptr:" in bound and f"pdl={int(pdl)}" in bound


@pytest.mark.parametrize("num_tokens, store_cols", [(1000, 0), (0, 32), (17, 32)])
def test_a_bound_k_grouped_launch_launches_what_the_unbound_call_does(
    kernel, num_tokens, store_cols
):
    FAKE.fake_set_params_kind(K_GROUPED)
    launcher = k_grouped_launcher(kernel, store_cols)
    args = (A, B, D, CPTR, INFO, 512, 768, num_tokens, 4, 520, 776)
    unbound, bound = bound_and_unbound(launcher, args, 7)
    assert bound == unbound and f"num_tokens={num_tokens}" in bound


def test_a_bound_launch_reads_its_pointers_and_stream_at_every_call(kernel):
    launcher = gemm_launcher(kernel, store_cols=64)
    args = gemm_args()
    launch = launcher.bind(0, *args[GEMM_POINTERS:])
    for a, d, stream in ((A, D, 1), (A + 256, D, 2), (A, D + 512, 3), (A + 256, D + 512, 4)):
        call = (a, B, d, *args[3:])
        unbound, bound = bound_and_unbound(launcher, call, stream)
        launch(*call[:GEMM_POINTERS], stream)
        assert FAKE.fake_last_launch().decode() == bound == unbound
        got = last_launch()
        assert (got["tma_a"]["ptr"], got["tma_d"]["ptr"], got["d"], got["stream"]) == (
            (a,), (d,), d, stream)  # fmt: skip


def test_a_bound_launch_memoises_its_descriptors_by_pointer(kernel):
    launcher = gemm_launcher(kernel, store_cols=64)
    a, b, d = own_pointers(3)  # views no other case encodes, whatever the order
    args = gemm_args(a=a, b=b, d=d)
    launch = launcher.bind(0, *args[GEMM_POINTERS:])
    encodes = FAKE.fake_encodes()
    launch(*args[:GEMM_POINTERS], 0)
    assert FAKE.fake_encodes() == encodes + 3  # a, b, d: new views
    launch(*args[:GEMM_POINTERS], 0)
    assert FAKE.fake_encodes() == encodes + 3  # the same pointers: from the bound memo
    launch(a + 512, *args[1:GEMM_POINTERS], 0)
    assert FAKE.fake_encodes() == encodes + 4  # only A moved
    # Back to A: the bound memo holds A + 512 now, so A's view comes from the shared memo
    # (tma.cpp), or is encoded again where A + 512's view took its slot there.
    launch(*args[:GEMM_POINTERS], 0)
    back = FAKE.fake_encodes()
    assert encodes + 4 <= back <= encodes + 5
    launch(*args[:GEMM_POINTERS], 0)
    assert FAKE.fake_encodes() == back  # and the bound memo holds it again
    assert last_launch()["tma_a"]["ptr"] == (a,)


def test_bind_checks_the_integers_before_any_launch(kernel):
    launcher = gemm_launcher(kernel)
    before = (FAKE.fake_launches(), FAKE.fake_encodes())
    with pytest.raises(ValueError, match="m out of range for a 32-bit kernel field: -1"):
        launcher.bind(0, *gemm_args(m=-1)[GEMM_POINTERS:])
    with pytest.raises(ValueError, match="2\\^31"):
        launcher.bind(0, *gemm_args(rows=1 << 31, m=1 << 31, n=1 << 20)[GEMM_POINTERS:])
    with pytest.raises(TypeError):  # one integer too few
        launcher.bind(0, *gemm_args()[GEMM_POINTERS:-1])
    assert (FAKE.fake_launches(), FAKE.fake_encodes()) == before


@pytest.mark.parametrize(
    "args", [{"rows": 0, "m": 0}, {"n": 0}, {"groups": 0}], ids=["rows", "n", "groups"]
)
def test_a_bound_empty_output_launches_nothing(kernel, args):
    launch = gemm_launcher(kernel).bind(0, *gemm_args(**args)[GEMM_POINTERS:])
    before = (FAKE.fake_launches(), FAKE.fake_encodes())
    launch(A, B, D, 0, 0, 0)
    assert (FAKE.fake_launches(), FAKE.fake_encodes()) == before


@pytest.mark.parametrize(
    "call, match",
    [
        ((A, B, D, 0, 0), "takes 6 arguments .* got 5"),
        ((A, B, D, 0, 0, 0, 0), "takes 6 arguments .* got 7"),
        ((A, B, -1, 0, 0, 0), "argument 2 must be an int in \\[0, 2\\*\\*64\\).* got -1"),
        ((A, B, D, 0, 0, 1 << 64), "argument 5 must be an int"),
        ((float(A), B, D, 0, 0, 0), "argument 0 must be an int"),
        ((A, B, D, None, 0, 0), "argument 3 must be an int.* got None"),
    ],
)
def test_a_bound_launch_refuses_bad_arguments(kernel, call, match):
    launch = gemm_launcher(kernel).bind(0, *gemm_args()[GEMM_POINTERS:])
    before = FAKE.fake_launches()
    with pytest.raises(TypeError, match=match):
        launch(*call)
    assert FAKE.fake_launches() == before
    launch(A, B, D, 0, 0, 0)
    assert FAKE.fake_launches() == before + 1


def test_a_bound_launch_raises_the_launch_errors(kernel):
    launch = gemm_launcher(kernel).bind(0, *gemm_args()[GEMM_POINTERS:])
    # A row stride of 7164 elements is 14328 bytes, off the 16-byte rule: the driver refuses.
    odd = gemm_launcher(kernel).bind(0, *gemm_args(lda=7164)[GEMM_POINTERS:])
    with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled failed.*strides_bytes=\{14328"):
        odd(A, B, D, 0, 0, 0)
    with pytest.raises(RuntimeError, match="cuKernelSetAttribute failed"):
        gemm_launcher(kernel, smem_bytes=300_000).bind(0, *gemm_args()[GEMM_POINTERS:])(
            A, B, D, 0, 0, 0
        )
    FAKE.fake_set_context(0)
    with pytest.raises(RuntimeError, match="no CUDA context is current"):
        launch(A, B, D, 0, 0, 0)
    FAKE.fake_set_context(1)
    before = FAKE.fake_launches()
    launch(A, B, D, 0, 0, 0)  # a failed call leaves the bound launch usable
    assert FAKE.fake_launches() == before + 1
    assert last_launch()["tma_a"]["ptr"] == (A,)


def test_a_bound_launch_keeps_its_launcher_alive():
    kernel = C.Kernel(ELF)
    launcher = gemm_launcher(kernel)
    refs = sys.getrefcount(launcher)
    launch = launcher.bind(0, *gemm_args()[GEMM_POINTERS:])
    assert sys.getrefcount(launcher) == refs + 1
    del launcher, kernel
    before = FAKE.fake_launches()
    launch(A, B, D, 0, 0, 0)
    assert FAKE.fake_launches() == before + 1


def test_a_bound_launch_refuses_what_the_python_checks_refuse(kernel):
    """False, having done nothing, for an operand base off a 16-byte boundary (a, b, d, c; the
    index vector is int32 and needs none) or a current context of another device: the Python
    hit path then takes its full checks, which raise the error."""
    launcher = gemm_launcher(kernel, store_cols=64)
    launch = launcher.bind(0, *gemm_args()[GEMM_POINTERS:])
    assert launch(A, B, D, CPTR, INFO, 0) is True
    before = (FAKE.fake_launches(), FAKE.fake_encodes())
    for position in range(4):
        for offset in (2, 4, 8):
            call = [A, B, D, CPTR, INFO, 0]
            call[position] += offset
            assert launch(*call) is False, (position, offset)
    FAKE.fake_set_context(2)  # a context of device 1
    assert launch(A, B, D, CPTR, INFO, 0) is False
    assert (FAKE.fake_launches(), FAKE.fake_encodes()) == before
    on_one = launcher.bind(1, *gemm_args()[GEMM_POINTERS:])
    assert on_one(A, B, D, CPTR, INFO, 0) is True
    FAKE.fake_set_context(1)
    assert on_one(A, B, D, CPTR, INFO, 0) is False
    assert FAKE.fake_launches() == before[0] + 1
    assert launch(A, B, D, 0, INFO + 4, 0) is True  # c absent, the index vector 4-byte aligned
    assert last_launch()["group_info"] == INFO + 4
    with pytest.raises(RuntimeError, match="cuDeviceGet failed"):
        launcher.bind(8, *gemm_args()[GEMM_POINTERS:])
    FAKE.fake_set_context(0)
    with pytest.raises(RuntimeError, match="no CUDA context is current"):
        launch(A, B, D, CPTR, INFO, 0)


# ---- the config's boxes reach the driver (python -> csrc) ----

SWIZZLE_BYTES = {v: k for k, v in SWIZZLE.items()}


def problem_values(desc, sm100: bool) -> dict[str, int]:
    """Every integer a launcher of `desc` may bind, by its csrc name, for contiguous operands
    (weights in the layout desc.weights names: checkpoint bytes, SM90-prepared or SM100)."""
    m, n, k, g = desc.m, desc.n, desc.k, desc.num_groups
    kp, np_ = -(-k // 128) * 128, -(-n // 128) * 128
    fp8, prepared = desc.ab_dtype == "fp8_fp4", desc.weights == "prepared"
    ldb = (kp // 2 if prepared else k // 2) if fp8 else k
    values = {
        "rows": m * g if desc.kind == "m_grouped_masked" else m, "m": m, "n": n, "k": k,
        "num_groups": g, "lda": k, "ldb": ldb, "ldb_group": n * ldb, "ldd": n,
        "ldc": n if desc.with_c else 0,
        "d_cols": n // 2 if desc.epilogue.startswith("swiglu") else n,
        "sfa_stride_group": 0, "sfa_stride_row": -(-k // 128), "sfa_stride_kb": 1,
        "sfa_group_rows": 0, "sfb_stride_group": n * k // 32, "sfb_stride_row": k // 32,
    }  # fmt: skip
    if desc.kind == "m_grouped_masked":
        values.update(sfa_stride_group=m * -(-k // 128), sfa_group_rows=m)
    if fp8 and sm100:
        values.update(sfb_stride_group=kp // 128 * np_, sfb_stride_row=0)
    elif prepared:
        values.update(sfb_stride_group=8 * (kp // 128) * n, sfb_stride_row=4 * n)
    if desc.kind == "k_grouped":  # desc.k: rows per group
        values.update(num_tokens=k * g, lda=m, ldb=n)
    return values


def box_cases() -> list[tuple[str, object]]:
    """(arch, desc) of every launcher family and map kind: dense, grouped, swapped and TMA-store
    picks, k-grouped, the fused layer's epilogues, FP8 x FP4 raw, prepared and windowed (the
    convert-ahead kernel), SM100."""
    from moegemm.heuristics import GemmDesc

    def fp8(kind, m, n, k, g, e, weights, epilogue="none", windowed=False):
        return GemmDesc(kind, m, n, k, g, ab_dtype="fp8_fp4", expected_m=e, weights=weights,
                        epilogue=epilogue, windowed=windowed)  # fmt: skip

    sm90 = [
        GemmDesc("bf16_gemm_nt", 4096, 4096, 7168),
        GemmDesc("m_grouped_offsets", 8 * 32, 4096, 7168, 32, expected_m=8),
        GemmDesc("m_grouped_masked", 512, 2048, 7168, 8, expected_m=400),
        GemmDesc("m_grouped_contiguous", 8192, 4096, 7168, 8, expected_m=1024),
        GemmDesc("k_grouped", 2048, 7168, 1024, 8, d_dtype="fp32"),
        GemmDesc("m_grouped_offsets", 4096, 1536, 2048, 128, expected_m=32, epilogue="swiglu"),
        fp8("m_grouped_offsets", 8 * 32, 4096, 7168, 32, 8, "raw"),
        fp8("m_grouped_contiguous", 8192, 4096, 7168, 8, 1024, "raw"),
        fp8("m_grouped_masked", 64, 4096, 7168, 32, 8, "prepared"),
        fp8("m_grouped_offsets", 32 * 1024, 4096, 7168, 32, 1024, "prepared"),
        fp8("m_grouped_offsets", 32 * 8, 5760, 2880, 32, 8, "prepared", "swiglu_oai"),
        fp8("m_grouped_offsets", 32 * 1024, 4096, 7168, 32, 1024, "prepared", windowed=True),
        fp8("m_grouped_contiguous", 8192, 2880, 2880, 8, 1024, "prepared", windowed=True),
        fp8("m_grouped_offsets", 32 * 2048, 5760, 2880, 32, 2048, "prepared", "swiglu_oai", True),
    ]
    sm100 = [
        GemmDesc("m_grouped_offsets", 8 * 32, 4096, 7168, 32, expected_m=8),
        GemmDesc("k_grouped", 2048, 7168, 1024, 8, d_dtype="fp32"),
        fp8("m_grouped_offsets", 32 * 1024, 4096, 7168, 32, 1024, "prepared"),
        fp8("m_grouped_masked", 64, 4096, 7168, 32, 8, "prepared", "row_scale"),
    ]
    return [("sm_90a", d) for d in sm90] + [("sm_100f", d) for d in sm100]


@pytest.mark.parametrize("arch_name, gemm", box_cases(), ids=lambda x: str(x)[:60])
def test_each_family_encodes_its_configs_boxes(kernel, arch_name, gemm):
    """Python -> csrc -> driver: the pick's launcher encodes its TMA maps with exactly the boxes
    and swizzles its config states (StorageConfig), in operand order A, B, the scale words, D;
    csrc derives none of its own."""
    from moegemm.families import lookup, select_config
    from moegemm.heuristics import arch_for

    arch = arch_for(arch_name, 132 if arch_name == "sm_90a" else 148)
    config = select_config(gemm, arch)
    launcher_type = getattr(C, lookup(arch, gemm).launcher_name(gemm, config))
    lay, storage = config.layout, config.storage
    launcher = launcher_type(
        kernel, lay.block_m, lay.block_n, lay.block_k, 132, config.launch.num_threads,
        config.pipeline.smem_bytes, lay.cluster_m, lay.cluster_n, **storage.launcher_kwargs(),
    )  # fmt: skip
    values = problem_values(gemm, sm100=arch_name != "sm_90a")
    num_pointers = launcher_type.__call__.__doc__.splitlines()[0].count("_ptr:")
    FAKE.fake_set_max_active_clusters(1000)
    FAKE.fake_clear_encode_log()
    launch = launcher.bind(0, *(values[name] for name in launcher_type.bind_args))
    assert launch(*own_pointers(num_pointers), 0)
    encoded = []
    for line in FAKE.fake_encode_log().decode().splitlines():
        _dtype, swizzle, rank, *dims = line.split()
        box = tuple(int(d.split("/")[2]) for d in dims)
        if int(rank) == 5:  # prepared MXFP4 codes: rows of 256 bytes, 16 a block, n blocks
            assert box[1:3] == (16, 1) and box[4] == 1, box
            kb = -(-values["k"] // 128)  # each block's k-blocks 4096 contiguous bytes apart
            sizes = tuple(int(d.split("/")[0]) for d in dims)
            strides = tuple(int(d.split("/")[1]) for d in dims[:3])
            assert sizes == (256, 16, kb, values["n"] // 64, values["num_groups"]), sizes
            assert strides == (256, 4096, 4096 * kb), strides
            box = (box[0], box[1] * box[3])
        encoded.append((box[:2], SWIZZLE_BYTES[int(swizzle)]))
    expected = [(storage.load_box_a, storage.swizzle_a), (storage.load_box_b, storage.swizzle_b)]
    if storage.load_box_sfb is not None:
        expected.append((storage.load_box_sfb, 0))
    if storage.store_box_d is not None:
        expected.append((storage.store_box_d, storage.swizzle_d))
    assert encoded == expected, (config.short_name(), launcher_type.__name__)
