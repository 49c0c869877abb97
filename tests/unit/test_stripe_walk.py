"""The grouped walk's stripe index math (include/moegemm/scheduler/stripe_walk.h), compiled for
the host and checked over every group shape up to 80 x 24 tiles against the walk built another
way: ceil(m / 8) stripes whose widths differ by at most one (wider first), n-blocks outer and
m-blocks inner in each; every tile named exactly once; a group of at most one stripe walks as
the whole-group walk does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).resolve().parents[2] / "include"

CHECK = r"""
#include <cstdio>
#include <vector>
#include <moegemm/scheduler/stripe_walk.h>

// The walk stripe_walk_tile must produce, built another way: ceil(m / 8) stripes, the first
// m % stripes of them one m-block wider, each walked n-block by n-block with m-blocks inside.
int main() {
  constexpr uint32_t kMax = 8;
  for (uint32_t m = 1; m <= 80; ++m) {
    for (uint32_t n = 1; n <= 24; ++n) {
      const uint32_t stripes = (m + kMax - 1) / kMax;
      std::vector<uint32_t> want_m, want_n;
      for (uint32_t s = 0, first = 0; s < stripes; ++s) {
        const uint32_t width = m / stripes + (s < m % stripes ? 1 : 0);
        if (width == 0 || width > kMax) { std::printf("bad width m%u\n", m); return 1; }
        for (uint32_t nb = 0; nb < n; ++nb)
          for (uint32_t mb = first; mb < first + width; ++mb) {
            want_m.push_back(mb);
            want_n.push_back(nb);
          }
        first += width;
      }
      std::vector<int> seen(m * n, 0);
      for (uint32_t t = 0; t < m * n; ++t) {
        uint32_t mb = 0, nb = 0;
        moegemm::stripe_walk_tile<kMax>(t, m, n, mb, nb);
        if (mb != want_m[t] || nb != want_n[t]) {
          std::printf("m%u n%u tile %u: (%u, %u), want (%u, %u)\n", m, n, t, mb, nb, want_m[t],
                      want_n[t]);
          return 1;
        }
        if (mb >= m || nb >= n || seen[mb * n + nb]++) {
          std::printf("m%u n%u tile %u: out of range or twice\n", m, n, t);
          return 1;
        }
        // One stripe is the whole-group walk (m-blocks fastest over all of the group's).
        if (m <= kMax && (mb != t % m || nb != t / m)) {
          std::printf("m%u n%u tile %u: not the whole-group walk\n", m, n, t);
          return 1;
        }
      }
    }
  }
  std::printf("ok\n");
  return 0;
}
"""


def host_compiler() -> str | None:
    return next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)


@pytest.mark.skipif(host_compiler() is None, reason="no host C++ compiler")
def test_stripe_walk_names_every_tile_once_in_balanced_stripes(tmp_path: Path) -> None:
    src, exe = tmp_path / "check.cpp", tmp_path / "check"
    src.write_text(CHECK)
    subprocess.run(
        [host_compiler(), "-std=c++17", "-O1", f"-I{INCLUDE}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
        text=True,
    )
    out = subprocess.run([str(exe)], check=False, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
