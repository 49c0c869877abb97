"""Compile-only builds of the expert-parallel kernels through the real JIT path (nvcc, no GPU):
the dispatch (BF16 and FP8 rows) and the combine for sm_90a. Checked in the cubin: one kernel,
no local memory, and the instruction forms the signalling protocol relies on, as ptxas emits
them (read off cuobjdump -sass; include/moegemm/ep/signals.cuh):
  st.release.sys      -> MEMBAR.ALL.SYS then STG.E.64.STRONG.SYS   (count flags)
  red.release.sys.add -> MEMBAR.ALL.SYS then REDG.E.ADD.64.STRONG.SYS (arrive counters)
  ld.acquire.sys      -> LDG.E.64.STRONG.SYS then CCTL.IVALL       (L1 invalidated after it)
  ld.relaxed.sys      -> LDG.E.STRONG.SYS                          (peer-written counts, srcs)
  %globaltimer        -> SR_GLOBALTIMERLO                          (the bounded waits)
and no multimem / multicast instruction anywhere (NVLink multicast stays off)."""

from __future__ import annotations

import re

import pytest

from moegemm.jit import cache
from moegemm.jit.codegen import ep_combine_spec, ep_dispatch_spec
from moegemm.jit.compiler import find_cuobjdump
from moegemm.jit.cubin import count_cubin_kernels

pytestmark = pytest.mark.nvcc


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")  # fails the build on local memory


def sass(spec) -> str:
    from test_compile_only import dump_sass

    path = cache.build_or_load(spec)
    assert count_cubin_kernels(path.read_bytes()) == 1
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found: cubin built, SASS not inspected")
    text = dump_sass(cuobjdump, path)
    assert "LDL" not in text and "STL" not in text, "local memory"
    assert not re.search(r"multimem|MULTIMEM|MCAST", text), "a multicast instruction"
    return text


def follows(text: str, first: str, then: str, within: int = 3) -> bool:
    """Whether some `first` instruction is followed by `then` within `within` instructions."""
    ops = [
        line.split(";")[0] for line in text.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)
    ]
    return any(first in op and any(then in o for o in ops[i + 1 : i + 1 + within])
               for i, op in enumerate(ops))  # fmt: skip


def assert_signals(text: str) -> None:
    assert "REDG.E.ADD.64.STRONG.SYS" in text, "red.release.sys.add: the arrive counters"
    assert follows(text, "MEMBAR.ALL.SYS", "REDG.E.ADD.64.STRONG.SYS"), "the release's fence"
    assert follows(text, "LDG.E.64.STRONG.SYS", "CCTL.IVALL"), "ld.acquire.sys"
    assert "SR_GLOBALTIMERLO" in text, "the bounded wait reads the global timer"
    assert "ATOMG.E.CAS" in text, "the status word's first-failure-wins CAS"


@pytest.mark.parametrize("fp8", [False, True])
def test_dispatch_kernel(fp8: bool) -> None:
    text = sass(ep_dispatch_spec(fp8=fp8))
    assert_signals(text)
    assert "STG.E.64.STRONG.SYS" in text, "st.release.sys: the count flags"
    assert follows(text, "MEMBAR.ALL.SYS", "STG.E.64.STRONG.SYS")
    assert "LDG.E.STRONG.SYS" in text, "ld.relaxed.sys of the peers' counts"
    assert "MATCH.ANY" in text and "ATOMS" in text, "the route kernel's placement"
    if fp8:
        assert "F2FP.SATFINITE.E4M3" in text, "rows quantized to E4M3 on the way"
    else:
        assert "LDG.E.128" in text and "ST.E.128" in text, "rows in 16-byte vectors"


def test_combine_kernel() -> None:
    text = sass(ep_combine_spec())
    assert_signals(text)
    assert "ST.E.128" in text, "rows pushed to the source rank in 16-byte vectors"
    assert "LDG.E.128.STRONG.GPU" in text, "peer-written rows read through L2 (__ldcg)"
    assert "STG.E.128" in text, "the combined BF16 rows"


def test_sm100_dispatch_quantizes_with_power_of_two_scales() -> None:
    """The SM100 FP8 x FP4 kernel reads the dispatched rows' scales as UE8M0 exponents: the
    sm_100f dispatch is the UE8M0 form (moe/fp8_rows.cuh's block_scale<true>), and compiles."""
    spec = ep_dispatch_spec("sm_100f", fp8=True)
    assert spec.name.endswith("_ue8m0") and ", true, true>(" in spec.source
    assert ", true, false>(" in ep_dispatch_spec("sm_90a", fp8=True).source
    assert "ue8m0" not in ep_dispatch_spec("sm_100f").name
    text = sass(spec)
    assert_signals(text)
    assert "F2FP.SATFINITE.E4M3" in text
