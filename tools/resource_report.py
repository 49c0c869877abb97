"""Resource report: the SM90 kernels of this tree against a baseline tree, config by config.

Builds a representative set of configs of every kernel family (the heuristics' picks on the MoE
shapes of python/moegemm/data/moe_shapes.json plus forced ones: TMA-store widths, clusters,
walk stripes, swap-AB tile widths, k-grouped epilogues) twice: with this tree's codegen and
headers, and with the baseline's own codegen (run in a subprocess with the baseline's package
first on PYTHONPATH) and headers. Both use their tree's JIT compiler flags, so the cubins are
the ones production would load. Per config it reports registers, spills, stack, static and
dynamic shared memory and a SASS instruction-class histogram, and marks every difference.

    python tools/resource_report.py --baseline BASELINE_TREE --out report.txt [--jobs 2]

Needs nvcc and cuobjdump (`pip install nvidia-cuda-cuobjdump`), no GPU. Cubins are cached by
source, headers and flags under --cache, so a rerun rebuilds only what changed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# SASS opcode classes the report counts (an opcode is counted in the first class it starts with).
SASS_CLASSES = (
    "HGMMA",
    "LDS",
    "STSM",
    "STS",
    "LDG",
    "STG",
    "BAR",
    "SYNCS",
    "SHFL",
    "UTMALDG",
    "UTMASTG",
    "UTMAREDG",
    "MEMBAR",
    "BRA",
)
RESOURCE_FIELDS = ("REG", "STACK", "SHARED", "LOCAL")

_SASS_LINE_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_RES_RE = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")
_SPILL_RE = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel to build: a label, the GEMM kind, the config (as a plain dict, so it can be
    rebuilt by either tree's classes), the output dtype and whether C is added."""

    label: str
    kind: str
    config: dict
    d_dtype: str
    with_c: bool


# ---------------------------------------------------------------------------------------------
# Configs


def _descs() -> Iterable:
    """Problem descriptions over the MoE shapes file: every suite entry as each layout it can
    take, the dense GEMM of its expert shape and, for k-grouped, with and without C."""
    from moegemm.heuristics import GemmDesc

    data = json.loads((REPO / "python/moegemm/data/moe_shapes.json").read_text())
    for suite, entries in data["suites"].items():
        for e in entries:
            g, n, k = e["num_groups"], e["n"], e["k"]
            rows = (
                e["m_per_group"] if isinstance(e["m_per_group"], list) else [e["m_per_group"]] * g
            )
            total = sum(rows)
            if suite == "k_grouped":
                per = math.ceil(total / g)
                yield GemmDesc("k_grouped", n, k, per, g, d_dtype="fp32", with_c=True)
                yield GemmDesc("k_grouped", n, k, per, g, d_dtype="fp32", with_c=False)
                continue
            if suite == "masked":
                max_m = e["max_m"]
                yield GemmDesc(
                    "m_grouped_masked", max_m, n, k, g, expected_m=min(total // g, max_m)
                )
                continue
            padded = sum(math.ceil(r / 128) * 128 for r in rows)
            yield GemmDesc("m_grouped_offsets", total, n, k, g, expected_m=math.ceil(total / g))
            yield GemmDesc("m_grouped_contiguous", padded, n, k, g)
            yield GemmDesc("bf16_gemm_nt", max(total, 1), n, k)
    for m in (1, 64, 1000, 8192):
        yield GemmDesc("bf16_gemm_nt", m=m, n=4096, k=7168, d_dtype="fp32", with_c=True)


def _kernel_key(kind: str, config, d_dtype: str, with_c: bool) -> tuple:
    return (kind if kind != "bf16_gemm_nt" else "dense", config, d_dtype, with_c)


def picked_cases(limit_per_family: int) -> list[Case]:
    """Distinct heuristic picks, at most `limit_per_family` per (kind, swap_ab, out, C)."""
    from moegemm.families import select_config
    from moegemm.heuristics import SM90

    seen: set[tuple] = set()
    per_family: Counter = Counter()
    cases = []
    for desc in _descs():
        config = select_config(desc, SM90)
        key = _kernel_key(desc.kind, config, desc.d_dtype, desc.with_c)
        family = (desc.kind, config.layout.swap_ab, desc.d_dtype, desc.with_c)
        if key in seen or per_family[family] >= limit_per_family:
            continue
        seen.add(key)
        per_family[family] += 1
        cases.append(
            Case(
                f"pick:{desc.kind}:{config.short_name()}:{desc.d_dtype}{':c' if desc.with_c else ''}",
                desc.kind,
                dataclasses.asdict(config),
                desc.d_dtype,
                desc.with_c,
            )
        )
    return cases


def _smem_bytes(kind: str, bm: int, bn: int, bk: int, stages: int, w: int, cols: int) -> int:
    """Shared memory of the kernel's carve-up (the kernel asserts the same number)."""
    barriers = stages * 16
    if kind == "k_grouped":
        return stages * (bm + bn) // 64 * bk * 128 + (w * 2 * 64 * 32 * 4 if cols else 0) + barriers
    staging = bm * bn * 2 if cols else 0
    return stages * (bm + bn) * bk * 2 + staging + barriers


def forced_config(
    kind: str,
    block_m: int,
    block_n: int,
    stages: int,
    *,
    store_cols: int = 0,
    cluster: tuple[int, int] = (1, 1),
    swap_ab: bool = False,
    stripe_m: int = 0,
) -> dict:
    """A config the heuristics may not pick, as a dict of GemmConfig's fields."""
    block_k = 64
    if kind == "k_grouped":
        w = block_m // 64
    elif swap_ab:
        w = block_n // 64
    else:
        w = 1 if block_m == 64 else 2
    cm, cn = cluster
    return {
        "layout": {
            "block_m": block_m,
            "block_n": block_n,
            "block_k": block_k,
            "swap_ab": swap_ab,
            "cluster_m": cm,
            "cluster_n": cn,
            "stripe_m": stripe_m,
        },
        "storage": {
            "load_box_a": (64, block_m // cn),
            "load_box_b": (64, block_n // cm),
            "swizzle_a": 128,
            "swizzle_b": 128,
            "store_box_d": (store_cols, 64) if store_cols else None,
            "swizzle_d": store_cols * (4 if kind == "k_grouped" else 2) if store_cols else 0,
        },
        "pipeline": {
            "num_stages": stages,
            "smem_bytes": _smem_bytes(kind, block_m, block_n, block_k, stages, w, store_cols),
        },
        "launch": {"num_sms": 132, "num_threads": 128 * (w + 1), "num_math_warpgroups": w},
    }


def forced_cases() -> list[Case]:
    f = forced_config
    rows = [
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 256, 3, store_cols=64), "bf16", False),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 256, 3, store_cols=32), "bf16", False),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 128, 5, store_cols=16), "bf16", False),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 256, 128, 4), "bf16", False),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 64, 64, 8), "bf16", False),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 256, 4), "fp32", True),
        ("dense", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 224, 4), "bf16", False),
        ("c2x1", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 256, 4, cluster=(2, 1)), "bf16", False),
        ("c1x2", "bf16_gemm_nt", f("bf16_gemm_nt", 128, 256, 3, store_cols=64, cluster=(1, 2)),
         "bf16", False),
        ("contig", "m_grouped_contiguous", f("m_grouped_contiguous", 128, 256, 3, store_cols=64),
         "bf16", False),
        ("contig", "m_grouped_contiguous", f("m_grouped_contiguous", 128, 128, 6), "bf16", False),
        ("c1x2", "m_grouped_contiguous",
         f("m_grouped_contiguous", 128, 256, 4, cluster=(1, 2)), "bf16", False),
        ("offs", "m_grouped_offsets", f("m_grouped_offsets", 128, 240, 3, store_cols=16),
         "bf16", False),
        ("offs", "m_grouped_offsets", f("m_grouped_offsets", 64, 256, 5), "bf16", False),
        ("p8", "m_grouped_offsets", f("m_grouped_offsets", 128, 256, 3, store_cols=64, stripe_m=8),
         "bf16", False),
        ("c2x1", "m_grouped_offsets", f("m_grouped_offsets", 128, 256, 3, store_cols=64,
                                        cluster=(2, 1)), "bf16", False),
        ("c1x2", "m_grouped_offsets", f("m_grouped_offsets", 64, 256, 5, cluster=(1, 2)),
         "bf16", False),
        ("masked", "m_grouped_masked", f("m_grouped_masked", 256, 112, 4), "bf16", False),
        ("p8", "m_grouped_masked", f("m_grouped_masked", 128, 128, 5, stripe_m=8), "bf16", False),
        ("c2x1", "m_grouped_masked", f("m_grouped_masked", 64, 256, 5, cluster=(2, 1)),
         "bf16", False),
        ("c1x2", "m_grouped_masked", f("m_grouped_masked", 128, 256, 3, store_cols=32,
                                       cluster=(1, 2)), "bf16", False),
    ]  # fmt: skip
    for bm, bn in ((8, 128), (16, 64), (32, 128), (48, 64), (96, 64), (128, 128)):
        kind = "m_grouped_masked" if bm % 16 else "m_grouped_offsets"
        rows.append(("swap", kind, f(kind, bm, bn, 8 if bm <= 32 else 5, swap_ab=True), "bf16",
                     False))  # fmt: skip
    for bm, bn, cols, with_c in ((128, 256, 0, True), (128, 192, 0, False), (64, 128, 0, False),
                                 (64, 256, 32, True), (128, 128, 32, True)):  # fmt: skip
        stages = 4 if bm + bn > 320 else 5
        rows.append(("kgrouped", "k_grouped", f("k_grouped", bm, bn, stages, store_cols=cols),
                     "fp32", with_c))  # fmt: skip
    return [
        Case(f"force:{tag}:{kind}:{d}{':c' if c else ''}:{_short(cfg)}", kind, cfg, d, c)
        for tag, kind, cfg, d, c in rows
    ]


def _short(cfg: dict) -> str:
    lay, st = cfg["layout"], cfg["storage"]
    return (
        f"m{lay['block_m']}n{lay['block_n']}k{lay['block_k']}s{cfg['pipeline']['num_stages']}"
        f"c{lay['cluster_m']}x{lay['cluster_n']}"
        + ("t" if lay["swap_ab"] else "")
        + (f"p{lay['stripe_m']}" if lay["stripe_m"] else "")
        + (f"e{st['store_box_d'][0]}" if st["store_box_d"] else "")
    )


# ---------------------------------------------------------------------------------------------
# Sources and builds

# Run by either tree's Python: reads cases (JSON) on stdin, writes [{name, source, flags}].
GENERATE = r"""
import json, sys
from moegemm.heuristics.config import (GemmConfig, Layout, StorageConfig, PipelineConfig,
                                       LaunchConfig)
from moegemm.jit import codegen
from moegemm.jit.compiler import nvcc_flags

import dataclasses

def known(cls, fields):
    # A field this tree's dataclass lacks (added later, e.g. transform_stages) is left out: a
    # BF16 case carries only its default there.
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})

def config_of(d):
    st = dict(d["storage"])
    for key in ("load_box_a", "load_box_b", "store_box_d"):
        if st.get(key) is not None:
            st[key] = tuple(st[key])
    return GemmConfig(known(Layout, d["layout"]), known(StorageConfig, st),
                      known(PipelineConfig, d["pipeline"]), known(LaunchConfig, d["launch"]))

out = []
for case in json.load(sys.stdin):
    config = config_of(case["config"])
    if case["kind"] == "k_grouped":
        spec = codegen.sm90_bf16_k_grouped_spec(config, case["with_c"])
    else:
        spec = codegen.sm90_bf16_gemm_spec(config, case["d_dtype"], case["with_c"], case["kind"])
    out.append({"name": spec.name, "source": spec.source, "flags": nvcc_flags(spec.arch)})
json.dump(out, sys.stdout)
"""


def generate(tree: Path, cases: Sequence[Case]) -> list[dict]:
    """Each case's generated source and nvcc flags by `tree`'s own codegen and compiler."""
    env = dict(os.environ, PYTHONPATH=str(tree / "python"))
    env.pop("MOEGEMM_INCLUDE_DIR", None)  # each tree finds its own include directory
    proc = subprocess.run(
        [sys.executable, "-c", GENERATE],
        input=json.dumps([dataclasses.asdict(c) for c in cases]),
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"codegen of {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def _include_digest(flags: Sequence[str]) -> str:
    """Digest of every moegemm header under the -I directories that hold one."""
    h = hashlib.sha256()
    for flag in flags:
        if flag.startswith("-I") and (Path(flag[2:]) / "moegemm").is_dir():
            for path in sorted((Path(flag[2:]) / "moegemm").rglob("*")):
                if path.is_file():
                    h.update(str(path.relative_to(flag[2:])).encode() + path.read_bytes())
    return h.hexdigest()


def build(gen: dict, cache: Path, nvcc: str, cuobjdump: str) -> dict:
    """Compiles one generated source (or reuses its cached cubin) and measures it."""
    flags = [f for f in gen["flags"] if not f.startswith("-Xptxas=-v")] + ["-Xptxas=-v"]
    key = hashlib.sha256(
        (gen["source"] + "\0".join(flags) + _include_digest(flags)).encode()
    ).hexdigest()[:24]
    folder = cache / key
    cubin, log = folder / "kernel.cubin", folder / "ptxas.txt"
    if not cubin.exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kernel.cu").write_text(gen["source"])
        proc = subprocess.run(
            [nvcc, *flags, "kernel.cu", "-o", "kernel.cubin.tmp"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            return {"error": (proc.stdout + proc.stderr)[-2000:]}
        log.write_text(proc.stdout + proc.stderr)
        os.replace(folder / "kernel.cubin.tmp", cubin)
    return measure(cubin, log.read_text(), cuobjdump)


def measure(cubin: Path, ptxas_log: str, cuobjdump: str) -> dict:
    def run(*args: str) -> str:
        return subprocess.run([cuobjdump, *args, str(cubin)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    res, sass = run("-res-usage"), run("-sass")
    row: dict = {k: 0 for k in RESOURCE_FIELDS}
    for field, value in _RES_RE.findall(res):
        row[field] = int(value)
    row["SPILL"] = sum(int(a) + int(b) for a, b in _SPILL_RE.findall(ptxas_log))
    row.update(sass_histogram(sass))
    return row


def sass_histogram(sass: str) -> dict:
    """Instruction counts by class (SASS_CLASSES), TOTAL (NOPs left out) and SASS_SHA, a digest
    of the instruction stream without addresses: equal digests mean the same machine code."""
    opcodes = _SASS_LINE_RE.findall(sass)
    hist: Counter = Counter()
    for op in opcodes:
        for cls in SASS_CLASSES:
            if op.startswith(cls):
                hist[cls] += 1
                break
    row: dict = {cls: hist[cls] for cls in SASS_CLASSES}
    row["TOTAL"] = sum(1 for op in opcodes if op != "NOP")
    body = [
        re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln).strip()
        for ln in sass.splitlines()
        if re.search(r"/\*[0-9a-f]{4}\*/", ln)
    ]
    row["SASS_SHA"] = hashlib.sha256("\n".join(body).encode()).hexdigest()[:10]
    return row


# ---------------------------------------------------------------------------------------------
# Report

COLUMNS = ("REG", "SPILL", "STACK", "SHARED", "DYN") + SASS_CLASSES + ("TOTAL",)


def format_report(cases: Sequence[Case], new: Sequence[dict], base: Sequence[dict]) -> str:
    lines = [
        (
            "Resource report: new tree vs baseline (b), per config. REG registers, SPILL spill "
            "bytes, STACK stack frame, SHARED static smem, DYN dynamic smem (config), then SASS "
            "instruction counts by class (a value differing from the baseline's is followed by "
            "(bN)); '=' same machine code (SASS digest equal), '~' otherwise."
        ),
        "",
    ]
    same = regs_worse = spill_worse = errors = 0
    for case, n, b in zip(cases, new, base, strict=True):
        lines.append(f"{case.label}")
        if "error" in n or "error" in b:
            errors += 1
            lines.append(f"  ERROR new: {n.get('error', '-')[:600]}")
            lines.append(f"  ERROR base: {b.get('error', '-')[:600]}")
            continue
        n["DYN"] = b["DYN"] = case.config["pipeline"]["smem_bytes"]
        identical = n["SASS_SHA"] == b["SASS_SHA"]
        same += identical
        regs_worse += n["REG"] > b["REG"]
        spill_worse += n["SPILL"] > b["SPILL"] or n["STACK"] > b["STACK"]
        cells = []
        for col in COLUMNS:
            cells.append(f"{col}={n[col]}" if n[col] == b[col] else f"{col}={n[col]}(b{b[col]})")
        lines.append(("  = " if identical else "  ~ ") + " ".join(cells))
    lines += [
        "",
        (
            f"{len(cases)} configs: {errors} failed to build, {same} identical machine code, "
            f"{regs_worse} with more registers, {spill_worse} with more spills or stack."
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline tree")
    parser.add_argument("--out", type=Path, required=True, help="where the table goes")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/moegemm_resource_cache"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--picks-per-family", type=int, default=2)
    parser.add_argument("--only", default="", help="keep configs whose label contains this")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if not (args.baseline / "include" / "moegemm").is_dir():
        parser.error(f"--baseline {args.baseline}: no include/moegemm in it")

    sys.path.insert(0, str(REPO / "python"))
    from moegemm.jit.compiler import find_cuobjdump, find_nvcc

    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        parser.error("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    cases = [
        c for c in picked_cases(args.picks_per_family) + forced_cases() if args.only in c.label
    ]
    new_gen, base_gen = generate(REPO, cases), generate(args.baseline, cases)
    nvcc = str(find_nvcc())
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        new = list(pool.map(lambda g: build(g, args.cache, nvcc, str(cuobjdump)), new_gen))
        base = list(pool.map(lambda g: build(g, args.cache, nvcc, str(cuobjdump)), base_gen))
    report = format_report(cases, new, base)
    args.out.write_text(report)
    print(report.splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
