"""One warmup ninja edge: `python -m moegemm.jit._build_one SPEC.json STAMP`.

Goes through cache.build so a warmup build locks and publishes like any JIT miss. The stamp
holds the outcome (`compiled`, or `built_elsewhere` when another process published the kernel
while this one waited for its lock), which is what the warmup counts."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType

from .cache import KernelNotCachedError, build
from .compiler import CompileError
from .spec import KernelSpec


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # The warmup stops its ninja with SIGTERM (Ctrl-C): leaving through SystemExit runs the
    # cache's cleanup, so no half-built folder waits in tmp/ for the stale sweep.
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m moegemm.jit._build_one SPEC.json STAMP", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    spec = KernelSpec.from_json(json.loads(Path(argv[0]).read_text()))
    try:
        entry = build(spec)
    except CompileError as exc:
        print(f"moegemm: failed to compile {spec.name}:\n{exc}", file=sys.stderr)
        return 1
    except KernelNotCachedError as exc:
        print(f"moegemm: {exc}", file=sys.stderr)
        return 1
    # The warmup only runs edges for kernels it found missing: a hit here was published by
    # another process in between, with or without this one waiting on the lock.
    outcome = "compiled" if entry.outcome == "compiled" else "built_elsewhere"
    Path(argv[1]).write_text(outcome + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
