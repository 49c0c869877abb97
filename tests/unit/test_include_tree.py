"""The include-tree digest follows exactly the library headers a source includes."""

from __future__ import annotations

import os
from pathlib import Path

from moegemm.jit.include_tree import (
    include_tree_digest,
    include_tree_files,
    library_include_dir,
    parse_includes,
)

SOURCE = "#include <moegemm/tiny/top.h>\n#include <cute/tensor.hpp>\n__global__ void k(int*){}\n"


def _edit(path: Path, text: str) -> None:
    path.write_text(text)
    # Bump mtime explicitly: two writes within one timestamp tick must still invalidate.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_tree_holds_transitive_library_headers_only(tiny_include: Path) -> None:
    files = include_tree_files(SOURCE, [tiny_include])
    names = sorted(p.relative_to(tiny_include).as_posix() for p in files)
    assert names == ["moegemm/tiny/leaf.h", "moegemm/tiny/mid.h", "moegemm/tiny/top.h"]


def test_edit_two_levels_down_changes_digest(tiny_include: Path) -> None:
    before = include_tree_digest(SOURCE, [tiny_include])
    assert include_tree_digest(SOURCE, [tiny_include]) == before
    leaf = tiny_include / "moegemm/tiny/leaf.h"
    _edit(leaf, leaf.read_text().replace("return 1;", "return 2;"))
    assert include_tree_digest(SOURCE, [tiny_include]) != before


def test_unrelated_header_does_not_change_digest(tiny_include: Path) -> None:
    before = include_tree_digest(SOURCE, [tiny_include])
    _edit(tiny_include / "moegemm/tiny/unrelated.h", "#pragma once\n// edited\n")
    assert include_tree_digest(SOURCE, [tiny_include]) == before


def test_cycle_terminates(tiny_include: Path) -> None:
    leaf = tiny_include / "moegemm/tiny/leaf.h"
    _edit(leaf, "#pragma once\n#include <moegemm/tiny/top.h>\n" + leaf.read_text())
    files = include_tree_files(SOURCE, [tiny_include])
    assert len(files) == 3
    assert include_tree_digest(SOURCE, [tiny_include])


def test_commented_includes_are_ignored() -> None:
    text = (
        "// #include <moegemm/a.h>\n/* #include <moegemm/b.h>\n*/\n"
        '  #  include "moegemm/c.h"\n#include <moegemm/d.h> // trailing\n'
    )
    assert parse_includes(text) == [('"', "moegemm/c.h"), ("<", "moegemm/d.h")]


def test_library_include_dir_prefers_env(tiny_include: Path) -> None:
    assert library_include_dir() == tiny_include.resolve()


def test_library_include_dir_finds_repo_include(monkeypatch) -> None:
    monkeypatch.delenv("MOEGEMM_INCLUDE_DIR", raising=False)
    assert (library_include_dir() / "moegemm").is_dir()
