"""bench_transformers.py's CPU logic: the model cases (real sizes, checked on the meta device),
ratios, target verdicts, table rows, the JSON document and the DeepGEMM bundle handed to
transformers' loader."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import bench_transformers as bt

# (E, H, I, top_k, MoE layers, bias) of each model at its default layer count.
SIZES = {
    "qwen3-30b-a3b": (128, 2048, 768, 8, 2, False),
    "mixtral-8x7b": (8, 4096, 14336, 2, 2, False),
    "gpt-oss-20b": (32, 2880, 2880, 4, 2, True),
    "deepseek-v3": (256, 7168, 2048, 8, 1, False),
}


def test_cases_cover_every_model_weights_and_token_count() -> None:
    got = bt.cases(list(bt.MODELS), list(bt.TOKENS))
    assert len(got) == (len(bt.MODELS) + 1) * len(bt.TOKENS)  # GPT-OSS twice: BF16 and MXFP4
    assert ("gpt-oss-20b", "mxfp4", 64) in got and ("mixtral-8x7b", "mxfp4", 64) not in got
    assert got[:2] == [("qwen3-30b-a3b", "bf16", 1), ("qwen3-30b-a3b", "bf16", 8)]
    assert bt.TOKENS == (1, 8, 64, 512, 4096)
    with pytest.raises(ValueError, match="unknown models"):
        bt.cases(["llama"], [1])
    assert bt.parse_list("1, 8,,64", int) == [1, 8, 64]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_model_configs_have_real_expert_sizes(name: str) -> None:
    """The models as built on the GPU, here on the meta device: experts of the real sizes in
    the layout the adapter maps."""
    e, h, i, k, layers, bias = SIZES[name]
    spec = bt.MODELS[name]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            bt.make_config(spec), dtype=torch.bfloat16
        )
    experts = bt.experts_modules(model)
    assert len(experts) == layers
    m = experts[0]
    assert m.num_experts == e and model.config.num_experts_per_tok == k
    assert m.has_bias == bias and m.gate_up_proj.dtype == torch.bfloat16
    if m.is_transposed:  # GPT-OSS: [E, H, 2I] and [E, I, H]
        assert m.gate_up_proj.shape == (e, h, 2 * i) and m.down_proj.shape == (e, i, h)
    else:
        assert m.gate_up_proj.shape == (e, 2 * i, h) and m.down_proj.shape == (e, h, i)


def row(model="m", weights="bf16", t=1, **us) -> dict:
    r = {"model": model, "weights": weights, "tokens": t, "us": us,
         "calc_diff": {"moegemm": 2e-6, "grouped_mm": 0.0}}  # fmt: skip
    bt.add_ratios(r)
    return r


def test_ratios() -> None:
    r = row(moegemm=10.0, grouped_mm=20.0, deepgemm=12.0)
    assert r["x_grouped_mm"] == 2.0 and r["x_deepgemm"] == 1.2
    assert "x_deepgemm" not in row(moegemm=10.0, grouped_mm=20.0)
    assert "x_grouped_mm" not in row(grouped_mm=20.0)  # ours untimed: no ratio
    rows = [row(t=8, moegemm=10.0, grouped_mm=20.0),
            row(weights="mxfp4", t=8, moegemm=8.0, grouped_mm=20.0),
            row(weights="mxfp4", t=512, moegemm=8.0, grouped_mm=20.0)]  # fmt: skip
    bt.add_mxfp4_ratios(rows)
    assert rows[1]["x_bf16"] == 1.25 and "x_bf16" not in rows[0] and "x_bf16" not in rows[2]


def verdicts(rows: list[dict]) -> dict[str, dict]:
    bt.add_mxfp4_ratios(rows)
    return {v["target"].split()[0] + " " + v["target"].split()[-1]: v for v in bt.targets(rows)}


def test_targets_met_missed_and_not_judged() -> None:
    rows = [row(t=1, moegemm=10.0, grouped_mm=16.0, deepgemm=11.0),
            row(t=64, moegemm=10.0, grouped_mm=15.0),
            row(weights="mxfp4", t=1, moegemm=9.0, grouped_mm=16.0),
            row(weights="mxfp4", t=64, moegemm=9.5, grouped_mm=16.0),
            row(weights="mxfp4", t=512, moegemm=30.0, grouped_mm=60.0)]  # fmt: skip
    got = verdicts(rows)
    assert [v["status"] for v in got.values()] == ["met", "met", "met", "met"]
    assert got["experts T"]["judged"] == 5 and got["BF16 deepgemm"]["judged"] == 1
    assert got["MXFP4 64"]["judged"] == 2  # T <= 64 only, no BF16 twin at T512

    slow = [row(t=1, moegemm=10.0, grouped_mm=14.0, deepgemm=9.0),
            row(weights="mxfp4", t=1, moegemm=10.0, grouped_mm=14.0)]  # fmt: skip
    got = verdicts(slow)
    assert got["experts T"]["status"] == "missed"
    assert got["experts T"]["missed"] == ["m bf16 T1 1.40", "m mxfp4 T1 1.40"]
    assert got["BF16 deepgemm"]["status"] == "missed"
    assert got["MXFP4 64"]["status"] == "missed"  # equal time is not faster

    no_peer = verdicts([row(t=1, moegemm=10.0, grouped_mm=16.0)])
    assert no_peer["BF16 deepgemm"]["status"] == "n/a"  # deepgemm did not run: not judged
    assert no_peer["MXFP4 64"]["status"] == "n/a"


def test_errors_and_untimed_rows_are_misses() -> None:
    broken = {"model": "m", "weights": "bf16", "tokens": 8, "error": "moegemm calc_diff 1e-2"}
    untimed = row(t=64, moegemm=10.0)  # grouped_mm could not be timed
    got = verdicts([row(t=1, moegemm=10.0, grouped_mm=16.0), broken, untimed])
    assert got["correct: timing"]["status"] == "missed"
    assert got["correct: timing"]["missed"] == ["m bf16 T8: moegemm calc_diff 1e-2"]
    assert got["experts T"]["status"] == "missed"
    assert got["experts T"]["missed"] == ["m bf16 T64 untimed"]


def test_table_rows() -> None:
    r = row(model="qwen3-30b-a3b", t=512, moegemm=377.3, grouped_mm=650.0)
    r["timing"] = {"moegemm": "graph", "grouped_mm": "events"}
    line = bt.table_row(r)
    assert line.split()[:6] == ["qwen3-30b-a3b", "bf16", "512", "377.3", "650.0", "-"]
    assert "1.72" in line and "2.0e-06" in line and line.endswith("events: grouped_mm")
    assert len(bt.HEADER.split()) == 11  # ten columns and "notes"
    broken = {"model": "deepseek-v3", "weights": "bf16", "tokens": 1, "error": "build: OOM"}
    assert bt.table_row(broken).endswith("build: OOM") and bt.table_row(broken).count("-") >= 6


def test_model_summary_and_row() -> None:
    experts = [row(model="mixtral-8x7b", t=512, moegemm=1000.0, grouped_mm=1500.0)]
    m = {"model": "mixtral-8x7b", "weights": "bf16", "tokens": 512, "moe_layers": 2,
         "us": {"moegemm": 5000.0, "grouped_mm": 6000.0}, "logits_diff": 3e-6}  # fmt: skip
    bt.model_summary(m, experts)
    assert m["x_grouped_mm"] == 1.2 and m["experts_share"] == 0.4
    assert "x_deepgemm" not in m
    line = bt.model_table_row(m)
    assert line.split()[3:5] == ["5000.0", "6000.0"] and "0.40" in line
    lone = {"model": "q", "weights": "bf16", "tokens": 64, "moe_layers": 2, "us": {}}
    bt.model_summary(lone, experts)  # moegemm did not run: nothing to derive
    assert "experts_share" not in lone and "x_grouped_mm" not in lone


def test_json_document() -> None:
    info = {"gpu": "NVIDIA H200", "torch": "2.11", "commit": "abc1234", "date_utc": "2026-12-06"}
    rows = [row(moegemm=10.0, grouped_mm=16.0)]
    doc = bt.result_json(info, {"tokens": "1"}, {}, rows, [], bt.targets(rows), 1.5)
    assert list(doc)[:4] == ["gpu", "torch", "commit", "date_utc"]
    assert json.loads(json.dumps(doc))["rows"][0]["x_grouped_mm"] == 1.6


@dataclass(frozen=True)
class Bundle:  # the fields transformers' DeepGEMM bundle has
    grouped_bf16_matmul_nt: object
    grouped_bf16_matmul_nn: object
    per_token_cast_to_fp8: object
    fp8_fp4_mega_moe: object
    m_alignment: int


class OldDeepGemm:
    """A DeepGEMM build without use_psum_layout, the NN kernel or the Mega MoE symbols."""

    calls: ClassVar[list] = []

    class utils:  # the kernel's submodule, hence lower case
        @staticmethod
        def per_token_cast_to_fp8(x):
            return x

    @staticmethod
    def m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout):
        OldDeepGemm.calls.append((a, b, d, layout))

    @staticmethod
    def get_mk_alignment_for_contiguous_layout():
        return 64


def test_deepgemm_bundle_for_a_local_build() -> None:
    bundle = bt.deepgemm_bundle(OldDeepGemm, Bundle)
    assert bundle.m_alignment == 64
    assert bundle.per_token_cast_to_fp8 is OldDeepGemm.utils.per_token_cast_to_fp8
    bundle.grouped_bf16_matmul_nt(1, 2, 3, 4, use_psum_layout=False)  # transformers' call
    assert OldDeepGemm.calls == [(1, 2, 3, 4)]
    with pytest.raises(NotImplementedError, match="m_grouped_bf16_gemm_nn_contiguous"):
        bundle.grouped_bf16_matmul_nn(1, 2, 3, 4, use_psum_layout=False)
    with pytest.raises(TypeError):  # SM100's layout is not silently dropped
        bundle.grouped_bf16_matmul_nt(1, 2, 3, 4, use_psum_layout=True)

    class Empty:
        pass

    with pytest.raises(ImportError, match="m_grouped_bf16_gemm_nt_contiguous"):
        bt.deepgemm_bundle(Empty, Bundle)


def test_deepgemm_bundle_fits_transformers() -> None:
    """transformers' own bundle class takes what deepgemm_bundle gives (every field filled)."""
    from transformers.integrations import deepgemm as hf_dg

    bundle = bt.deepgemm_bundle(OldDeepGemm, hf_dg.DeepGEMM)
    assert bundle.m_alignment == 64
    with pytest.raises(NotImplementedError, match="fp8_fp4_mega_moe"):
        bundle.fp8_fp4_mega_moe()


def test_list_runs_without_a_gpu(capsys: pytest.CaptureFixture) -> None:
    assert bt.main(["--models", "mixtral-8x7b", "--tokens", "1,64", "--list"]) == 0
    assert capsys.readouterr().out.split("\n")[:2] == [
        "mixtral-8x7b bf16 1",
        "mixtral-8x7b bf16 64",
    ]
