"""FP8 x FP4 exactness on the GPU: weight scales the format allows but one E4M3 window does not
hold (E2M1 * 2^s is exact in E4M3 only for s in [-8, 6]), against a float64 reference on the
dequantized operands. Every block of every row holds all 16 E2M1 codes (-0 included).

Cases: scale bytes spread over 2^-20 .. 2^4 inside one row (random per 32-block); one block
2^10 above (and one 2^10 below) its neighbours; the smallest bytes (0 = 2^-127, an FP32
subnormal, and 1 .. 3) and the largest (251 .. 254, where 6 * 2^127 overflows FP32); and
128-K blocks mixing bytes ~110 binades apart. A scale byte 0xFF (NaN) yields NaN in its own
output column only.

Each case runs twice:
- isolated blocks: token row i has nonzero activations in one 32-block of K only, so D[i, n]
  is that block's contribution alone and every block, small scales included, is checked
  element-wise (assert_within_bound) instead of drowning in a row's largest blocks;
- full K: dense activations over all of K, calc_diff < 1e-4 plus the same element-wise bound.
Both through the dense function and the grouped ones with 8 rows per group (the decode
path), with raw and prepared weights.

What is asserted is achievable (checked by assert_representable): every activation a * sfa
and every D value is a normal FP32/BF16 number, and the scale a kernel applies at each
per-128-K promotion, sfa * 2^(byte - 127) for the bytes of that 128-K block, stays within
2^-130 .. 2^100 (sfa is picked per case to make it so). A kernel that forms 2^(byte - 127)
alone must therefore not flush 2^-127 to zero, nor multiply by 2^127 before the activation
scale.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from fp8_fp4_reference import (
    TOL,
    assert_within_bound,
    dequant_a,
    dequant_b64,
    nan_bf16,
    record,
    ref_fp32,
    weights_arg,
    write_summary,
)

from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

N, K = 256, 2880  # gpt-oss K: 90 blocks of 32, the last 128-K block partial (64 columns)
NB = K // 32
ROWS_PER_BLOCK = 4  # isolated run: M = NB * 4 = 360 token rows
GROUP_ROWS = 8  # grouped runs: 8 rows per group (what the decode path serves)
FORMS = ["raw", "prepared"]


def api():
    import moegemm

    return moegemm


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    write_summary(request.config, "fp8_fp4 exactness")


# ---- weights ------------------------------------------------------------------------------


def all_codes(g: torch.Generator) -> torch.Tensor:
    """Packed b [N, K/2] whose every 32-block is a random permutation of codes 0..15 twice."""
    perm = torch.rand(N, NB, 32, device="cuda", generator=g).argsort(dim=-1)
    codes = (perm % 16).to(torch.uint8).flatten(-2)
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def randint(lo: int, hi: int, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randint(lo, hi + 1, shape, device="cuda", generator=g)


def scale_bytes(case: str, g: torch.Generator) -> tuple[torch.Tensor, list[int]]:
    """(sfb uint8 [N, NB], class byte of each block): the class byte sets the activation scale
    of the isolated run's tokens on that block, so their D stays in range."""
    rows = torch.arange(N, device="cuda")
    if case == "spread":  # 2^-20 .. 2^4, random per block; both ends in every row
        sfb = randint(127 - 20, 127 + 4, (N, NB), g)
        ends = randint(0, NB - 1, (N, 2), g)
        sfb[rows, ends[:, 0]] = 127 - 20
        sfb[rows, ends[:, 1]] = 127 + 4
        return sfb.to(torch.uint8), [127] * NB
    if case == "outlier":  # one block 2^10 above its row, another 2^10 below
        base = randint(115, 125, (N, 1), g)
        sfb = base.expand(N, NB).clone()
        j0 = randint(0, NB - 1, (N,), g)
        sfb[rows, j0] = base[:, 0] + 10
        sfb[rows, (j0 + NB // 2) % NB] = base[:, 0] - 10
        return sfb.to(torch.uint8), [120] * NB
    if case == "smallest":  # bytes 0 (2^-127) .. 3, with 0 and 1 in every row
        sfb = randint(0, 3, (N, NB), g)
        ends = randint(0, NB - 1, (N, 2), g)
        sfb[rows, ends[:, 0]] = 0
        sfb[rows, (ends[:, 0] + 1 + ends[:, 1] % (NB - 1)) % NB] = 1
        return sfb.to(torch.uint8), [0] * NB
    if case == "largest":  # bytes 251 .. 254 (6 * 2^127 is past FP32), 254 in every row
        sfb = randint(251, 254, (N, NB), g)
        sfb[rows, randint(0, NB - 1, (N,), g)] = 254
        return sfb.to(torch.uint8), [251] * NB
    if case in ("mixed_low", "mixed_high"):  # classes ~50 binades apart, cycling per block
        bases = (0, 55, 107) if case == "mixed_low" else (147, 200, 251)
        cls = [bases[j % 3] for j in range(NB)]
        sfb = torch.tensor(cls, device="cuda").expand(N, NB) + randint(0, 3, (N, NB), g)
        return sfb.to(torch.uint8), cls
    raise ValueError(case)


CASES = ["spread", "outlier", "smallest", "largest", "mixed_low", "mixed_high"]


def sfa_exponent(byte: int) -> int:
    """Activation scale exponent for blocks near `byte`: combined scale ~2^-10 there, and the
    scale itself a normal FP32 that a * sfa (|a| <= 8) cannot overflow."""
    return max(-120, min(117, 117 - byte))


# ---- activations --------------------------------------------------------------------------


def fp8_values(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Nonzero E4M3 values of both signs, magnitudes 2^-8 .. 8 (E4M3 subnormals included)."""
    mag = torch.exp2(torch.rand(shape, device="cuda", generator=g) * 11 - 8)
    sign = torch.randint(0, 2, shape, device="cuda", generator=g) * 2 - 1
    return (mag * sign).to(torch.float8_e4m3fn)


def isolated_activations(
    classes: list[int], g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """a [NB * 4, K]: rows 4j .. 4j + 3 nonzero only in block j; sfa matched to its class."""
    m = NB * ROWS_PER_BLOCK
    vals = fp8_values((m, 32), g)
    a = torch.zeros(m, K, device="cuda", dtype=torch.uint8)
    sfa = torch.ones(m, -(-K // 128), device="cuda")
    for j in range(NB):
        r = slice(j * ROWS_PER_BLOCK, (j + 1) * ROWS_PER_BLOCK)
        a[r, j * 32 : (j + 1) * 32] = vals[r].view(torch.uint8)
        u = torch.rand(ROWS_PER_BLOCK, device="cuda", generator=g) * 0.5 + 0.5  # not 2^e only
        sfa[r, j // 4] = u * 2.0 ** sfa_exponent(classes[j])
    return a.view(torch.float8_e4m3fn), sfa


def full_activations(sfb: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    m = 64
    a = fp8_values((m, K), g)
    finite = sfb[sfb != 0xFF]
    exp = max(-120, min(117, 120 - int(finite.max())))
    sfa = (torch.rand(m, -(-K // 128), device="cuda", generator=g) * 0.5 + 0.5) * 2.0**exp
    return a, sfa


# ---- running every path -------------------------------------------------------------------


def run_paths(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, form: str):
    """D [M, N] from the dense function, offs and masked with 8 rows per group (the weights
    repeated per group), as {path: D}."""
    mg = api()
    m = a.shape[0]
    out = {}
    d = nan_bf16(m, N)
    mg.fp8_fp4_gemm_nt((a, sfa), weights_arg(b, sfb, form), d)
    out["dense"] = d
    groups = -(-m // GROUP_ROWS)
    bg = b.expand(groups, *b.shape).contiguous()
    sfbg = sfb.expand(groups, *sfb.shape).contiguous()
    wg = weights_arg(bg, sfbg, form)
    ends = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * GROUP_ROWS
    ends[-1] = m
    d = nan_bf16(m, N)
    mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), wg, d, offs=ends)
    out["offs8"] = d
    pad = groups * GROUP_ROWS
    ma = torch.zeros(pad, K, device="cuda", dtype=torch.uint8)
    ma[:m] = a.view(torch.uint8)
    msfa = torch.ones(pad, sfa.shape[1], device="cuda")
    msfa[:m] = sfa
    masked_m = torch.full((groups,), GROUP_ROWS, device="cuda", dtype=torch.int32)
    masked_m[-1] = m - (groups - 1) * GROUP_ROWS
    md = nan_bf16(groups, GROUP_ROWS, N)
    ma3 = ma.view(torch.float8_e4m3fn).view(groups, GROUP_ROWS, K)
    mg.m_grouped_fp8_fp4_gemm_nt_masked(
        (ma3, msfa.view(groups, GROUP_ROWS, -1)), wg, md, masked_m, GROUP_ROWS
    )
    out["masked8"] = md.view(pad, N)[:m]
    return out


def reference64(a, sfa, b, sfb) -> tuple[torch.Tensor, torch.Tensor]:
    """(D, S = |A| @ |B|^T) in float64 on the exactly dequantized operands."""
    a64, b64 = dequant_a(a, sfa, torch.float64), dequant_b64(b, sfb)
    return a64 @ b64.t(), a64.abs() @ b64.abs().t()


def assert_representable(a, sfa, sfb, ref64: torch.Tensor, abs64: torch.Tensor) -> None:
    """The inputs are ones where exactness is achievable: for every token and 128-K block where
    the token's activations are nonzero, the promotion scale sfa * 2^(byte - 127) over that
    block's weight scale bytes lies in 2^-130 .. 2^101 (finite, <= 2^127, everywhere else);
    D's magnitudes (S = sum |a w|) lie inside BF16's normal range, so BF16 rounding of D is
    the only loss an exact kernel has."""
    nkb = sfa.shape[1]

    def per_kblock(fill: int) -> torch.Tensor:  # [N, nkb, 4]: the tail padded with `fill`
        finite = sfb.to(torch.int32).masked_fill(sfb == 0xFF, fill)
        return torch.nn.functional.pad(finite, (0, nkb * 4 - NB), value=fill).view(N, nkb, 4)

    hi = per_kblock(0).amax(dim=(0, 2)).double() - 127  # [nkb]
    lo = per_kblock(254).amin(dim=(0, 2)).double() - 127
    log_sfa = sfa.double().log2()
    pad_a = torch.nn.functional.pad(a.view(torch.uint8), (0, nkb * 128 - K))
    live = (pad_a.view(a.shape[0], nkb, 128) & 0x7F).amax(dim=-1) != 0  # [M, nkb]
    assert ((log_sfa + hi) <= 127).all()
    assert ((log_sfa + hi)[live] <= 101).all() and ((log_sfa + lo)[live] >= -130).all()
    assert (abs64 > 2.0**-110).all() and (abs64 < 2.0**120).all()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CASES)
def test_scales_outside_one_window(case: str, form: str) -> None:
    g = gen(CASES.index(case) + 1)
    b = all_codes(g)
    sfb, classes = scale_bytes(case, g)
    for run, (a, sfa) in (
        ("isolated", isolated_activations(classes, g)),
        ("full", full_activations(sfb, g)),
    ):
        ref64, abs64 = reference64(a, sfa, b, sfb)
        assert_representable(a, sfa, sfb, ref64, abs64)
        for path, d in run_paths(a, sfa, b, sfb, form).items():
            what = f"{case} {run} {path} {form}"
            assert_within_bound(d, ref64, abs64, what)
            diff = record(f"exact {case}", calc_diff(d, ref64))
            assert diff < TOL, f"{what}: calc_diff {diff:.3e}"


def test_fp32_reference_agrees_where_it_can() -> None:
    """The float64 reference is the FP32 one wherever FP32 holds the operands (bytes 1..252)."""
    g = gen(99)
    b = all_codes(g)
    sfb, _ = scale_bytes("spread", g)
    a, sfa = full_activations(sfb, g)
    ref64, _ = reference64(a, sfa, b, sfb)
    assert calc_diff(ref_fp32(a, sfa, b, sfb), ref64) < 1e-10


# ---- NaN scale bytes ----------------------------------------------------------------------


NAN_BLOCKS = ((77, 45), (200, NB - 1))  # (weight row, 32-block): mid-K and the partial tail


def nan_weights(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    b = all_codes(g)
    sfb, _ = scale_bytes("outlier", g)
    for n, j in NAN_BLOCKS:
        sfb[n, j] = 0xFF
    return b, sfb


def assert_nan_columns_only(d: torch.Tensor, ref: torch.Tensor, cols: list[int], what: str) -> None:
    """Columns `cols` NaN for every token, nothing else NaN, the rest within calc_diff."""
    others = [c for c in range(d.shape[1]) if c not in cols]
    assert d[:, cols].isnan().all(), f"{what}: a NaN scale must give a NaN output column"
    assert not d[:, others].isnan().any(), f"{what}: NaN spread beyond its column"
    diff = record("nan scale (finite columns)", calc_diff(d[:, others], ref[:, others]))
    assert diff < TOL, f"{what}: calc_diff {diff:.3e}"


def test_nan_scale_byte_gives_nan_column_only() -> None:
    mg = api()
    g = gen(123)
    b, sfb = nan_weights(g)
    a, sfa = full_activations(sfb, g)
    cols = [n for n, _ in NAN_BLOCKS]
    ref = ref_fp32(a, sfa, b, sfb)  # NaN in `cols` too: compared on the others
    others = [c for c in range(N) if c not in cols]
    assert ref[:, cols].isnan().all() and not ref[:, others].isnan().any()
    d = nan_bf16(a.shape[0], N)
    mg.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()  # no crash, no sticky error
    assert_nan_columns_only(d, ref, cols, "dense")

    # Grouped: only the group whose weights hold the NaN; the others stay finite.
    clean_b, clean_sfb = all_codes(g), scale_bytes("outlier", g)[0]
    bg, sfbg = torch.stack([clean_b, b, clean_b]), torch.stack([clean_sfb, sfb, clean_sfb])
    sizes = [20, 30, 14]
    ends = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    d = nan_bf16(64, N)
    mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (bg, sfbg), d, offs=ends)
    ref0 = ref_fp32(a[:20], sfa[:20], clean_b, clean_sfb)
    ref2 = ref_fp32(a[50:], sfa[50:], clean_b, clean_sfb)
    assert not d[:20].isnan().any() and not d[50:].isnan().any()
    assert calc_diff(d[:20], ref0) < TOL and calc_diff(d[50:], ref2) < TOL
    assert_nan_columns_only(d[20:50], ref[20:50], cols, "offs")

    md = nan_bf16(3, 64, N)
    masked_m = torch.tensor([64, 9, 0], device="cuda", dtype=torch.int32)
    ma = a.view(torch.uint8).expand(3, *a.shape).contiguous().view(torch.float8_e4m3fn)
    msfa = sfa.expand(3, *sfa.shape).contiguous()
    mg.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa), (bg, sfbg), md, masked_m, 32)
    assert not md[0].isnan().any() and md[2].isnan().all() and md[1, 9:].isnan().all()
    assert_nan_columns_only(md[1, :9], ref[:9], cols, "masked")

    # The device is still usable, and a clean call right after is right.
    d = nan_bf16(a.shape[0], N)
    mg.fp8_fp4_gemm_nt((a, sfa), (clean_b, clean_sfb), d)
    assert calc_diff(d, ref_fp32(a, sfa, clean_b, clean_sfb)) < TOL


def test_prepare_refuses_nan_scale() -> None:
    """prepare_mxfp4_weights runs at load time and may look at the data: 0xFF is refused."""
    b, sfb = nan_weights(gen(124))
    with pytest.raises(ValueError, match="sfb"):
        api().prepare_mxfp4_weights(b, sfb)
