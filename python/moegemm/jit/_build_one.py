"""One warmup ninja edge: `python -m moegemm.jit._build_one SPEC.json STAMP`.

Goes through cache.build_or_load so a warmup build locks and publishes like any JIT miss."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .cache import build_or_load
from .compiler import CompileError
from .warmup import spec_from_json


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m moegemm.jit._build_one SPEC.json STAMP", file=sys.stderr)
        return 2
    spec = spec_from_json(json.loads(Path(argv[0]).read_text()))
    try:
        build_or_load(spec)
    except CompileError as exc:
        print(f"moegemm: failed to compile {spec.name}:\n{exc}", file=sys.stderr)
        return 1
    Path(argv[1]).touch()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
