"""Re-ranks recorded heuristic-quality timings with the current cycle model (no GPU).

    python3 scripts/replay_quality.py benchmarks/results/2026-11-30_21c4499_heuristic_quality_all.json

For each recorded case: the model's pick now, and its recorded time as a fraction of the best
recorded time when the pick was among the timed configs ('untimed' otherwise: time it on the
GPU before trusting the change). Only cases whose pick changed are listed, plus the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import all_qcases, desc_for, sm90_arch

from moegemm.heuristics import select_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="heuristic_quality.py --json files")
    args = parser.parse_args(argv)

    times: dict[str, dict[str, float]] = {}
    old_pick: dict[str, str] = {}
    for path in args.logs:  # later files add configs to, and overwrite times of, earlier ones
        for rec in json.loads(path.read_text())["cases"]:
            times.setdefault(rec["id"], {}).update(rec.get("times_us", {}))
            old_pick[rec["id"]] = rec["pick"]

    arch = sm90_arch()
    qcases = {q.id: q for q in all_qcases()}
    old_fracs, new_fracs, untimed = [], [], []
    for case_id, measured in times.items():
        if case_id not in qcases or not measured:
            continue
        pick = select_config(desc_for(qcases[case_id]), arch).short_name()
        best = min(measured.values())
        old = best / measured[old_pick[case_id]] if old_pick[case_id] in measured else None
        new = best / measured[pick] if pick in measured else None
        if old is not None and new is not None:
            old_fracs.append(old)
            new_fracs.append(new)
        if pick in measured and pick == old_pick[case_id]:
            continue
        if new is None:
            untimed.append(case_id)
        old_text = f"{old:6.1%}" if old is not None else "     ?"
        new_text = f"{new:6.1%}" if new is not None else "untimed"
        print(f"{case_id:22s} {old_pick[case_id]:26s} {old_text} -> {pick:26s} {new_text}")

    def geomean(xs: list[float]) -> float:
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")

    print(
        f"# {len(new_fracs)} cases with both picks timed: geomean {geomean(old_fracs):.1%} -> "
        f"{geomean(new_fracs):.1%}, min {min(old_fracs, default=0):.1%} -> "
        f"{min(new_fracs, default=0):.1%}; {len(untimed)} new picks untimed"
    )
    if untimed:
        print("# untimed: " + " ".join(untimed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
