"""The warmup with --weights mxfp4 (the FP8 x FP4 family): it builds every kernel
select_config can pick for the presets that ship MXFP4 experts (and a BF16 preset declared FP4),
for every token count 1..16384, every layout of the family and both weight forms, and nothing of
BF16; and the GPU check's FP8 x FP4 plumbing (routing, padded m_indices, masked buffers, both
weight forms, the dequantized reference) run on the CPU against stand-in kernels, which a wrong
kernel fails; and the CLI's --weights (defaults per preset, one-line errors, a real build).

Which calls are proved (routed rows = tokens x top_k, G groups, ab_dtype "fp8_fp4", BF16 out,
GemmDesc.weights "raw" and "prepared"), written out again here rather than taken from
warmup.specs: offs (m = rows, expected_m = ceil(rows / G)); m_indices (every M = 128 j up to
round_up(max_tokens x top_k + 127 G, 128)); masked (max_m = tokens and max_tokens, expected_m =
min(ceil(rows / G), max_m)); dense (one-group shapes, M = tokens). The picks come from
warmup.specs.Picker (one select_config per selection_key), a sample of them also selected
afresh; tests/unit/test_fp8_fp4_heuristics.py proves the key complete. ~30 CPU seconds.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
from pathlib import Path

import pytest
import torch
from test_warmup_cli import HOOK, HOOK_LOG_ENV, _checked, assert_one_line_error, counts, run_cli

from moegemm.heuristics import SM90, GemmDesc, sm90_fp8_fp4
from moegemm.heuristics.sm90_fp8_fp4_convert_ahead import is_convert_ahead
from moegemm.warmup import cli, presets
from moegemm.warmup.specs import Picker, kernel_spec, warmup_specs

MAX_TOKENS = 16384
LAYOUTS = {"bf16_gemm_nt", "m_grouped_offsets", "m_grouped_masked", "m_grouped_contiguous"}
FRESH_SAMPLE_RATE = 0.003  # share of the descs also selected without the memo


FORMS = ("raw", "prepared", "windowed")  # windowed: prepared weights without exact-path blocks


def api_descs(shape: dict, top_k: int, max_tokens: int, form: str):
    """The descs api/fp8_fp4.py builds for the calls of the module doc (`form` one of FORMS)."""
    n, k, g = shape["n"], shape["k"], shape.get("num_groups", 1)
    weights = "raw" if form == "raw" else "prepared"
    common = {"ab_dtype": "fp8_fp4", "weights": weights, "windowed": form == "windowed"}
    if g == 1:
        for tokens in range(1, max_tokens + 1):
            yield GemmDesc("bf16_gemm_nt", tokens, n, k, **common)
        return
    for tokens in range(1, max_tokens + 1):
        rows = tokens * top_k
        per_group = math.ceil(rows / g)
        yield GemmDesc("m_grouped_offsets", rows, n, k, g, expected_m=per_group, **common)
        for max_m in dict.fromkeys((tokens, max_tokens)):
            yield GemmDesc(
                "m_grouped_masked", max_m, n, k, g, expected_m=min(per_group, max_m), **common
            )
    top = -(-(max_tokens * top_k + g * 127) // 128) * 128
    for m in range(128, top + 1, 128):
        yield GemmDesc("m_grouped_contiguous", m, n, k, g, **common)


# gpt-oss ships MXFP4 experts (its presets default to mxfp4); deepseek-v4-flash, a BF16 preset
# by default whose experts a user declares FP4 (--weights mxfp4), also has one-group
# shared-expert shapes, so the dense layout is covered too.
DECLARED = "deepseek_v4_flash"


@pytest.mark.parametrize("model", ["gpt_oss_20b", "gpt_oss_120b", DECLARED])
def test_every_fp8_fp4_pick_was_built(model: str) -> None:
    top_k, shapes = presets.model_top_k(model), presets.model_shapes(model)
    picker = Picker(SM90)
    built = warmup_specs(
        shapes, range(1, MAX_TOKENS + 1), top_k, "sm_90a", 132, weights="mxfp4", picker=picker
    )
    assert len(built) == len(set(built))
    assert all(s.name.startswith("sm90_fp8fp4_") for s in built), "no BF16 kernel with mxfp4"
    built_set = set(built)
    rng = random.Random(model)
    specs: dict[tuple, object] = {}
    seen: set[tuple] = set()  # (kind, form) pairs that occurred
    used = set()
    convert_ahead_picks = 0
    for shape in shapes:
        for form in FORMS:
            missing = {}
            for desc in api_descs(shape, top_k, MAX_TOKENS, form):
                config = picker(desc)
                if rng.random() < FRESH_SAMPLE_RATE:
                    fresh = sm90_fp8_fp4.select(desc, SM90)
                    assert config == fresh, f"{model}: memo {config} != select {fresh} for {desc}"
                ident = (desc.kind, form, config)
                spec = specs.get(ident)
                if spec is None:
                    spec = specs[ident] = kernel_spec(desc, config)
                seen.add((desc.kind, form))
                convert_ahead_picks += form == "windowed" and is_convert_ahead(config)
                used.add(spec)
                if spec not in built_set:
                    missing.setdefault(spec.name, desc)
            assert not missing, f"{model}: {len(missing)} kernels not warmed, e.g. {missing}"
    kinds = LAYOUTS if model == DECLARED else LAYOUTS - {"bf16_gemm_nt"}
    assert seen == {(kind, form) for kind in kinds for form in FORMS}
    assert convert_ahead_picks > 0, "windowed weights take the convert-ahead kernel at prefill"
    assert used == built_set, "the warmup builds only kernels some call picks"
    names = {s.name for s in built}
    for form in ("raw", "prepared"):  # both forms are separate kernels, each built
        assert any(name.endswith(f"_{form}") for name in names), form


def test_mxfp4_replaces_bf16_and_has_no_k_grouped() -> None:
    shapes = presets.model_shapes("qwen3-30b-a3b")
    bf16 = warmup_specs(shapes, [1, 64, 4096], 8, "sm_90a", 132)
    fp4 = warmup_specs(shapes, [1, 64, 4096], 8, "sm_90a", 132, weights="mxfp4")
    assert all(s.name.startswith("sm90_bf16_") for s in bf16)
    families = {re.sub(r"_m\d+n\d+.*", "", s.name) for s in fp4}
    assert families == {"sm90_fp8fp4_offs", "sm90_fp8fp4_masked", "sm90_fp8fp4_contig"}, families
    assert not set(bf16) & set(fp4)
    sm100 = warmup_specs(shapes, [1, 64], 8, "sm_100a", 148, weights="mxfp4")
    assert sm100 and all(s.name.startswith("sm100_fp8_fp4_") for s in sm100)


def test_warmup_builds_the_spec_an_fp8_fp4_call_loads() -> None:
    """The warmup's kernel_spec and the API's plans.kernel_spec agree for this family."""
    from moegemm.families import select_config
    from moegemm.launch.plans import kernel_spec as api_kernel_spec

    for form in ("raw", "prepared"):
        for desc in (
            GemmDesc("bf16_gemm_nt", 100, 5760, 2880, ab_dtype="fp8_fp4", weights=form),
            GemmDesc("m_grouped_contiguous", 4096, 5760, 2880, 32, ab_dtype="fp8_fp4",
                     weights=form),
            GemmDesc("m_grouped_offsets", 96, 2880, 2880, 32, ab_dtype="fp8_fp4", expected_m=3,
                     weights=form),
            GemmDesc("m_grouped_masked", 256, 2880, 2880, 128, ab_dtype="fp8_fp4", expected_m=8,
                     weights=form),
        ):  # fmt: skip
            config = select_config(desc, SM90)
            assert kernel_spec(desc, config) == api_kernel_spec(desc, config), desc


def test_bad_weights_and_k() -> None:
    shape = [{"n": 256, "k": 2880, "num_groups": 4}]
    with pytest.raises(ValueError, match="weights must be one of bf16, mxfp4, got 'fp4'"):
        warmup_specs(shape, [1], 2, "sm_90a", 132, weights="fp4")
    with pytest.raises(TypeError, match="weights must be a string"):
        warmup_specs(shape, [1], 2, "sm_90a", 132, weights=None)  # type: ignore[arg-type]
    bad_k = [{"n": 256, "k": 40, "num_groups": 4}]
    with pytest.raises(ValueError, match="k must be a multiple of 32 for MXFP4 weights"):
        warmup_specs(bad_k, [1], 2, "sm_90a", 132, weights="mxfp4")
    assert warmup_specs(bad_k, [1], 2, "sm_90a", 132)  # BF16 takes K % 8


def test_preset_weights() -> None:
    assert presets.model_weights("openai/gpt-oss-20b") == "mxfp4"
    assert presets.model_weights("gpt-oss-120b") == "mxfp4"
    assert presets.model_weights("deepseek-v3") == "bf16"
    assert presets.model_weights(DECLARED) == "bf16"  # the coverage test declares it FP4
    assert presets.MXFP4_MODELS <= set(presets.known_models())
    with pytest.raises(ValueError, match="unknown model"):
        presets.model_weights("no-such-model")


# ---- the GPU check's FP8 x FP4 path, on the CPU with stand-in kernels ----


def _weights_fp32(b, wrong_prepared: bool) -> torch.Tensor:
    """What a kernel reads of the second operand, as float32 [.., N, K]."""
    from moegemm.api.fp8_fp4 import unpack_weights
    from moegemm.api.mxfp4_weights import Mxfp4Weights, unprepare_mxfp4_weights
    from moegemm.quant import dequantize_mxfp4

    b_, sfb, prepared = unpack_weights(b)
    if prepared:
        codes, sfb = unprepare_mxfp4_weights(Mxfp4Weights(b_, sfb, k=b.k))
        # A kernel that ignores the layout reads the thread-ordered codes as checkpoint ones.
        b_ = b_[..., : codes.shape[-1]] if wrong_prepared else codes
    return dequantize_mxfp4(b_, sfb)


def _a_fp32(a) -> torch.Tensor:
    a_, sfa = a
    k = a_.shape[-1]
    return a_.float() * sfa.repeat_interleave(128, dim=-1)[..., :k]


class FakeKernels:
    """The three functions computed in torch as the kernels define them; `wrong_prepared` reads
    prepared weights as raw ones (a kernel that ignores the layout)."""

    def __init__(self, wrong_prepared: bool = False) -> None:
        self.wrong, self.calls = wrong_prepared, []

    def dense(self, a, b, d, *, config=None):
        self.calls.append(("dense", type(b).__name__))
        d.copy_(_a_fp32(a) @ _weights_fp32(b, self.wrong).t())
        return d

    def contiguous(self, a, b, d, m_indices=None, *, offs=None, config=None):
        self.calls.append(("offs" if offs is not None else "m_indices", type(b).__name__))
        w, x = _weights_fp32(b, self.wrong), _a_fp32(a)
        if offs is not None:
            starts = [0, *offs.tolist()[:-1]]
            for g, (s, e) in enumerate(zip(starts, offs.tolist())):
                d[s:e] = (x[s:e] @ w[g].t()).bfloat16()
        else:
            for r, g in enumerate(m_indices.tolist()):
                if g >= 0:
                    d[r] = (x[r] @ w[g].t()).bfloat16()
        return d

    def masked(self, a, b, d, masked_m, expected_m, *, config=None):
        self.calls.append(("masked", type(b).__name__))
        w, x = _weights_fp32(b, self.wrong), _a_fp32(a)
        for g, rows in enumerate(masked_m.tolist()):
            d[g, :rows] = (x[g, :rows] @ w[g].t()).bfloat16()
        return d


def _run_on_cpu(monkeypatch: pytest.MonkeyPatch, kernels: FakeKernels, shape: dict, tokens):
    import moegemm
    from moegemm.warmup import check, check_common

    monkeypatch.setattr(check_common, "DEVICE", "cpu")
    monkeypatch.setattr(moegemm, "fp8_fp4_gemm_nt", kernels.dense, raising=False)
    monkeypatch.setattr(moegemm, "m_grouped_fp8_fp4_gemm_nt_contiguous", kernels.contiguous,
                        raising=False)  # fmt: skip
    monkeypatch.setattr(moegemm, "m_grouped_fp8_fp4_gemm_nt_masked", kernels.masked,
                        raising=False)  # fmt: skip
    from moegemm.warmup import check_fp8_fp4

    for module in (check, check_common, check_fp8_fp4):
        monkeypatch.setattr(module, "bench_us", lambda fn: 1.0)
    out = io.StringIO()
    rep = check._fp8_fp4_report(out)
    gen = torch.Generator().manual_seed(0)
    n, k, g = shape["n"], shape["k"], shape.get("num_groups", 1)
    checked = [(shape, n, k, g)]
    check._check_fp8_fp4(checked, tokens, 4, gen, rep)
    return check._summary(rep), out.getvalue()


@pytest.mark.parametrize(
    "shape", [{"op": "linear2", "n": 64, "k": 160, "num_groups": 6}, {"n": 128, "k": 96},
              {"n": 48, "k": 96}]
)  # fmt: skip
def test_check_plumbing_on_cpu(monkeypatch: pytest.MonkeyPatch, shape: dict) -> None:
    """Every layout, both forms (N = 48, no whole 64-row block: the checkpoint form only), at
    decode and past one 128-row segment, and K with a partial last 128-K block: a correct
    kernel passes; one that misreads prepared weights fails only the prepared rows."""
    tokens = [1, 3, 40]
    kernels = FakeKernels()
    ok, text = _run_on_cpu(monkeypatch, kernels, shape, tokens)
    assert ok, text
    layouts = ["dense"] if shape.get("num_groups", 1) == 1 else ["offs", "m_indices", "masked"]
    forms = ("raw", "prep") if shape["n"] % 64 == 0 else ("raw",)
    for layout in layouts:
        for form in ("raw", "prep"):
            count = len(tokens) if form in forms else 0
            assert text.count(f"\n{layout}/{form} ") == count, (layout, form, text)
    names = {"tuple", "Mxfp4Weights"} if "prep" in forms else {"tuple"}
    assert {form for _, form in kernels.calls} == names
    assert "FAILED" not in text and "all passed" in text
    if "prep" not in forms:
        return

    ok, text = _run_on_cpu(monkeypatch, FakeKernels(wrong_prepared=True), shape, tokens)
    assert not ok
    failed = [line for line in text.splitlines() if line.endswith("  FAILED")]
    assert len(failed) == len(layouts) * len(tokens), text
    assert all("/prep " in line for line in failed), text


# ---- the CLI: --weights reaches the enumeration and the check ----


@pytest.fixture
def cli_env(
    jit_cache_dir: Path,
    tiny_include: Path,
    subprocess_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    """As test_warmup_cli's: the enumeration replaced by its fake (which logs its arguments)."""
    monkeypatch.setenv(cli.SPECS_FN_ENV, HOOK)
    subprocess_env[cli.SPECS_FN_ENV] = HOOK
    subprocess_env["MOEGEMM_LIGHT_IMPORT"] = "1"
    return subprocess_env


@pytest.mark.parametrize(
    ("argv", "weights"),
    [
        (["--model", "gpt-oss-20b"], "mxfp4"),  # the preset's checkpoint ships MXFP4 experts
        (["--model", "openai/gpt-oss-120b"], "mxfp4"),
        (["--model", "gpt-oss-120b", "--weights", "bf16"], "bf16"),
        (["--model", "deepseek-v3"], "bf16"),
        (["--model", "deepseek-v3", "--weights", "mxfp4"], "mxfp4"),  # declared FP4
        (["--suite", "decode"], "bf16"),  # a suite spans models: bf16 unless told
        (["--suite", "decode", "--weights", "mxfp4"], "mxfp4"),
    ],
)
def test_weights_reach_the_enumeration(
    cli_env: dict[str, str], tmp_path: Path, argv: list[str], weights: str
) -> None:
    """--weights (default: the preset's own) reaches every enumeration call, and the header
    names the family."""
    log = tmp_path / "hook.jsonl"
    env = dict(cli_env, **{HOOK_LOG_ENV: str(log)})
    proc = run_cli(env, "--warmup", *argv, "--tokens", "1,8", "--dry-run", "--num-sms", "132")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records and {r["weights"] for r in records} == {weights}
    header = proc.stdout.splitlines()[0]
    family = "MXFP4 weights (FP8 x FP4 kernels" if weights == "mxfp4" else "BF16 weights,"
    assert family in header, header


def test_mxfp4_shapes_need_k_a_multiple_of_32(
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The real enumeration refuses a K that MXFP4 cannot have: one line, exit 2; the same
    shape in BF16 is fine."""
    monkeypatch.delenv(cli.SPECS_FN_ENV)
    path = tmp_path / "k40.json"
    path.write_text(json.dumps([{"n": 256, "k": 40, "num_groups": 4, "top_k": 2}]))
    argv = ["--warmup", "--shapes", str(path), "--tokens", "1", "--dry-run", "--num-sms", "132"]
    rc = cli.main([*argv, "--weights", "mxfp4"])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, "k must be a multiple of 32 for MXFP4 weights")
    assert cli.main(argv) == 0, capsys.readouterr()


def test_help_says_mxfp4_replaces_bf16(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--weights {bf16,mxfp4}" in text
    assert "instead of the BF16 ones" in text and "gpt-oss-20b/120b" in text


@pytest.mark.nvcc
def test_real_mxfp4_warmup_builds_fp8_fp4_kernels(
    jit_cache_dir: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """--weights mxfp4 with the real enumeration: one dense shape at one token count builds its
    FP8 x FP4 kernel for both weight forms, and no BF16 kernel."""
    path = tmp_path / "one_shape.json"
    path.write_text(json.dumps([{"n": 256, "k": 160}]))
    args = ("--warmup", "--shapes", str(path), "--tokens", "1", "--num-sms", "132")
    proc = run_cli(subprocess_env, *args, "--weights", "mxfp4", "--no-check", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert counts(proc)["compiled"] == 2 and counts(proc)["failed"] == 0
    names = sorted(p.name.split(".")[0] for p in (jit_cache_dir / "kernels").iterdir())
    assert sorted(n.rsplit("_", 1)[1] for n in names) == ["prepared", "raw"], names
    assert all(n.startswith("sm90_fp8fp4_dense_") for n in names), names


def test_check_gets_the_weights(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, calls = _checked(
        monkeypatch, ["--model", "gpt-oss-20b", "--tokens", "4"], cli.GpuProbe(132)
    )
    assert rc == 0 and calls == [(2, 4, 4, [4], "mxfp4")]
    assert "check: the warmed FP8 x FP4 kernels against FP32 on the dequantized operands" in (
        capsys.readouterr().out
    )
