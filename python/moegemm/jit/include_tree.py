"""Recursive digest of the library headers a generated source includes.

Only headers that resolve inside our own include dir(s) are hashed: CUTLASS headers are covered
by the CUTLASS version in the cache key; the CUDA toolkit's own headers by nothing, since a cached
kernel is kept whichever nvcc is installed (README, "The JIT cache")."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
_BLOCK_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT_RE = re.compile(r"//[^\n]*")

# (path, mtime_ns, size) -> (content sha256, [(kind, target)]); a header that changes on disk
# gets a new stat tuple, so stale entries are simply never hit again.
_FILE_MEMO: dict[tuple[str, int, int], tuple[str, list[tuple[str, str]]]] = {}


def library_include_dir() -> Path:
    """Our `include/` dir: `$MOEGEMM_INCLUDE_DIR`, else the repo's `include/` (editable
    install), else `moegemm/include` shipped inside the package."""
    override = os.environ.get("MOEGEMM_INCLUDE_DIR")
    if override:
        return Path(override).resolve()
    package_dir = Path(__file__).resolve().parents[1]  # .../moegemm
    candidates = (package_dir.parents[1] / "include", package_dir / "include")
    for candidate in candidates:
        if (candidate / "moegemm").is_dir():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"moegemm include dir not found (tried {tried}); set MOEGEMM_INCLUDE_DIR"
    )


def parse_includes(text: str) -> list[tuple[str, str]]:
    """`(kind, target)` for each `#include`, kind `<` or `"`; commented-out lines are skipped."""
    text = _BLOCK_COMMENT_RE.sub("", text)
    text = _LINE_COMMENT_RE.sub("", text)
    return [(m.group(1), m.group(2).strip()) for m in _INCLUDE_RE.finditer(text)]


def _scan_file(path: Path) -> tuple[str, list[tuple[str, str]]]:
    st = path.stat()
    memo_key = (str(path), st.st_mtime_ns, st.st_size)
    hit = _FILE_MEMO.get(memo_key)
    if hit is None:
        data = path.read_bytes()
        hit = (hashlib.sha256(data).hexdigest(), parse_includes(data.decode("utf-8", "replace")))
        _FILE_MEMO[memo_key] = hit
    return hit


def _owning_dir(path: Path, include_dirs: Sequence[Path]) -> Path | None:
    for d in include_dirs:
        if path.is_relative_to(d):
            return d
    return None


def _resolve(
    kind: str, target: str, current_dir: Path | None, include_dirs: Sequence[Path]
) -> Path | None:
    # Quoted includes look beside the including file first, as the preprocessor does.
    search = ([current_dir] if kind == '"' and current_dir is not None else []) + list(include_dirs)
    for base in search:
        candidate = base / target
        if candidate.is_file():
            resolved = candidate.resolve()
            return resolved if _owning_dir(resolved, include_dirs) is not None else None
    return None


def include_tree_files(source: str, include_dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every library header the source includes, directly or transitively (sorted)."""
    dirs = [Path(d).resolve() for d in include_dirs]
    seen: set[Path] = set()
    stack = [p for kind, t in parse_includes(source) if (p := _resolve(kind, t, None, dirs))]
    while stack:
        path = stack.pop()
        if path in seen:  # also what stops include cycles
            continue
        seen.add(path)
        _, children = _scan_file(path)
        for kind, target in children:
            child = _resolve(kind, target, path.parent, dirs)
            if child is not None and child not in seen:
                stack.append(child)
    return sorted(seen)


def include_tree_digest(source: str, include_dirs: Iterable[str | os.PathLike[str]]) -> str:
    """sha256 over (relative path, content hash) of every library header in the include tree."""
    dirs = [Path(d).resolve() for d in include_dirs]
    h = hashlib.sha256()
    entries = []
    for path in include_tree_files(source, dirs):
        owner = _owning_dir(path, dirs)
        rel = path.relative_to(owner).as_posix() if owner else path.as_posix()
        entries.append((rel, _scan_file(path)[0]))
    for rel, digest in sorted(entries):
        h.update(rel.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()
