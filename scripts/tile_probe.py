"""Times tiles the heuristics do not enumerate (256 x 192: 192 FP32 accumulators per math
thread, above MAX_ACCUM_REGS) against the heuristic's pick, interleaved on the same inputs,
after checking each against the FP32 reference. GPU only; a probe, not a benchmark.

    python3 scripts/tile_probe.py [--cases REGEX]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import Problem, Timer, all_qcases, desc_for, sm90, sm90_arch
from twin_timing import check_and_time


def main(argv: list[str] | None = None) -> int:
    from bench_bf16 import precompile, spec_for

    from moegemm.heuristics import select_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=r"prefill/(0|1|5|8|12|15|17)/offs")
    args = parser.parse_args(argv)
    arch = sm90_arch()
    timer = Timer(queued=True, budget_ms=100, max_iters=60)
    probes = [sm90._make_config(256, 192, 4, arch), sm90._make_config(256, 192, 2, arch, 64)]
    work = []
    for q in all_qcases():
        if re.search(args.cases, q.label):
            desc = desc_for(q)
            work.append((q, desc, [select_config(desc, arch), *probes]))
    precompile([spec_for(desc, c) for _, desc, cfgs in work for c in cfgs])
    for q, _desc, cfgs in work:
        prob = Problem(q)
        med, bad = check_and_time(prob, timer, {c.short_name(): c for c in cfgs})
        if bad:
            print(f"{q.label[:60]:60s} FAILED {'; '.join(bad)}")
            continue
        pick, *others = (c.short_name() for c in cfgs)
        print(
            f"{q.label[:60]:60s} pick {pick} {med[pick]:8.1f} us  "
            + "  ".join(f"{o} {med[o]:8.1f} (x{med[pick] / med[o]:.3f})" for o in others),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
