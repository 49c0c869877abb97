"""benchmarks/fp4_pass_fraction.py: the pass count of the FP8 x FP4 transform's exactness rule on
hand-made scale bytes whose answer is known, against a plain-Python reading of the rule on random
bytes, and the tool's main end to end on tiny shapes. CPU only."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from fp4_pass_fraction import DISTS, main, passes, synthetic_sfb, zero_blocks

from moegemm.quant import quantize_mxfp4


def sfb_of(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.uint8)


def one_region(*blocks: int) -> torch.Tensor:
    """A single row of one k-block (up to 4 blocks): passes(..., 1) has one region."""
    return sfb_of([list(blocks)])


def naive_passes(sfb: torch.Tensor, block_n: int) -> list[list[int]]:
    """The rule read literally, one region at a time, in plain Python."""
    n, nb = sfb.shape
    out = []
    for t in range(0, n, block_n):
        line = []
        for kb in range(0, nb, 4):
            left = {
                int(sfb[r, j])
                for r in range(t, min(t + block_n, n))
                for j in range(kb, min(kb + 4, nb))
                if int(sfb[r, j]) != 0xFF
            }
            count = 0
            while True:
                count += 1
                if not left:
                    break
                base = max(left)
                left = {s for s in left if s < base - 14}
                if not left:
                    break
            line.append(count)
        out.append(line)
    return out


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ((120, 120, 120, 120), 1),  # all equal
        ((100, 86), 1),  # 14 apart: one window
        ((100, 85), 2),  # 15 apart: two
        ((100, 85, 70), 3),  # 100 covers 86..100, 85 covers 71..85, 70 left
        ((100, 86, 85), 2),  # 85 is the second base, however close to the first window
        ((0, 254), 2),  # the ends of the byte range
        ((0, 14, 1, 7), 1),
        ((254, 239, 224, 209), 4),  # 15 apart each
    ],
)
def test_known_single_region(blocks: tuple[int, ...], expected: int) -> None:
    got = passes(one_region(*blocks), 1)
    assert got.shape == (1, 1)
    assert got.dtype == torch.int64
    assert int(got) == expected


def test_nan_bytes_take_no_part() -> None:
    assert int(passes(one_region(100, 0xFF, 85), 1)) == 2
    assert int(passes(one_region(100, 0xFF, 86), 1)) == 1
    # Without the NaN byte excluded 0xFF would be the base and 100 a second window.
    assert int(passes(one_region(0xFF, 100, 100, 100), 1)) == 1
    # No finite scale at all: one pass (the kernel converts the NaN bytes in it).
    assert int(passes(one_region(0xFF, 0xFF), 1)) == 1


def test_ignore_mask_and_its_checks() -> None:
    sfb = one_region(120, 0, 120, 119)  # byte 0: an all-zero block from quantize_mxfp4
    assert int(passes(sfb, 1)) == 2
    ignore = torch.tensor([[False, True, False, False]])
    assert int(passes(sfb, 1, ignore=ignore)) == 1
    with pytest.raises(ValueError, match="ignore"):
        passes(sfb, 1, ignore=torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="ignore"):
        passes(sfb, 1, ignore=torch.zeros(1, 4, dtype=torch.uint8))


def test_regions_are_tiles_by_kblocks() -> None:
    # Two rows, 8 blocks = 2 k-blocks. The far-apart bytes sit in different regions unless the
    # tile holds both rows.
    sfb = sfb_of([[100] * 4 + [100] * 4, [100] * 4 + [50] * 4])
    assert passes(sfb, 1).tolist() == [[1, 1], [1, 1]]
    assert passes(sfb, 2).tolist() == [[1, 2]]
    # 50 in the first k-block of row 0 and 100 in the second: no region holds both.
    sfb = sfb_of([[50] * 4 + [100] * 4])
    assert passes(sfb, 1).tolist() == [[1, 1]]


def test_partial_last_kblock_and_partial_tile() -> None:
    # K/32 = 90: 23 k-blocks, the last of 2 blocks; N = 300 rows: tiles of 128, the last of 44.
    n, nb = 300, 90
    sfb = torch.full((n, nb), 120, dtype=torch.uint8)
    sfb[299, 89] = 100  # the last tile's last row, the last k-block's last block: 20 below
    sfb[0, 2] = 140  # tile 0, k-block 0
    sfb[200, 88] = 0xFF
    got = passes(sfb, 128)
    assert got.shape == (3, 23)
    expected = torch.ones(3, 23, dtype=torch.int64)
    expected[2, 22] = 2
    expected[0, 0] = 2
    assert torch.equal(got, expected)
    # The padding is absent, not a byte: a row of zeros past N would have made every region
    # of the last tile two passes, a zero block past K the last k-block's.
    assert int(passes(sfb[:, :89], 128)[2, 22]) == 1
    assert torch.equal(passes(sfb, 300), torch.tensor([[2] + [1] * 21 + [2]]))


@pytest.mark.parametrize(("n", "nb", "block_n"), [(37, 90, 16), (64, 7, 64), (50, 13, 160)])
def test_matches_plain_reading_on_random_bytes(n: int, nb: int, block_n: int) -> None:
    rnd = random.Random(n * 1000 + nb)
    rows = []
    for _ in range(n):
        centre = rnd.randint(20, 230)
        rows.append(
            [
                0xFF if rnd.random() < 0.05 else max(0, min(254, centre + rnd.randint(-25, 25)))
                for _ in range(nb)
            ]
        )
    sfb = sfb_of(rows)
    got = passes(sfb, block_n)
    assert got.tolist() == naive_passes(sfb, block_n)
    assert int(got.max()) >= 2  # the draw exercises more than one pass


def test_bad_arguments() -> None:
    sfb = one_region(1, 2)
    with pytest.raises(TypeError, match="sfb"):
        passes([[1, 2]], 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sfb"):
        passes(sfb.to(torch.int32), 1)
    with pytest.raises(TypeError, match="sfb"):
        passes(sfb[0], 1)
    with pytest.raises(ValueError, match="sfb"):
        passes(torch.zeros(0, 4, dtype=torch.uint8), 1)
    with pytest.raises(ValueError, match="block_n"):
        passes(sfb, 0)
    with pytest.raises(TypeError, match="block_n"):
        passes(sfb, 64.0)  # type: ignore[arg-type]


def test_zero_blocks_from_quantize() -> None:
    w = torch.randn(4, 128)
    w[1, 32:64] = 0
    w[2, 96:128] = -0.0
    b, sfb = quantize_mxfp4(w)
    z = zero_blocks(b)
    expected = torch.zeros(4, 4, dtype=torch.bool)
    expected[1, 1] = expected[2, 3] = True
    assert torch.equal(z, expected)
    # The all-zero blocks get scale byte 0: what makes zero rows cost a second pass.
    assert int(sfb[1, 1]) == 0 and int(sfb[2, 3]) == 0
    assert int(passes(sfb, 4)) == 2
    assert int(passes(sfb, 4, ignore=z)) == 1


def test_synthetic_scales_look_like_the_distribution() -> None:
    by_name = {d.name: d for d in DISTS}
    sfb, zero = synthetic_sfb(by_name["adv spread -20..4"], 8, 320, 0)
    assert sfb.shape == (8, 10) and not zero.any()
    assert int(sfb.min()) == 107 and int(sfb.max()) == 131
    sfb, zero = synthetic_sfb(by_name["t4 row1 zeros"], 600, 256, 0)
    assert sfb.shape == (600, 8)
    assert zero.all(dim=1).any()  # some all-zero rows (1% of 600)
    assert bool((sfb[zero] == 0).all())
    finite = sfb[~zero].float()
    # Weights ~2^-6: block amax ~2^-4.5, scale byte ~127 - 4.5 - 2.
    assert 112 < float(finite.mean()) < 128


def test_main_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pf.json"
    rc = main(["--shapes", "200x320,64x2880", "--block-n", "64,128", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "distribution" in text and "adv spread -20..4" in text
    doc = json.loads(out.read_text())
    assert doc["shapes"] == [[200, 320], [64, 2880]]
    rows = doc["rows"]
    # Per distribution: 2 shapes x 2 block_n plus the 2 sums.
    assert len(rows) == len(DISTS) * 6
    summed = {(r["distribution"], r["block_n"]): r for r in rows if r["shape"] == "all"}
    # 200x320: 4 (or 2) tiles x 3 k-blocks; 64x2880: 1 tile x 23 k-blocks.
    assert summed[("t4 row1", 64)]["regions"] == 4 * 3 + 23
    assert summed[("t4 row1", 128)]["regions"] == 2 * 3 + 23
    spread = summed[("adv spread -20..4", 64)]
    assert spread["frac_multi"] == 1.0 and spread["max_passes"] == 2
    zeros = summed[("t4 row1 zeros", 128)]
    assert zeros["frac_multi_zero_skipped"] <= zeros["frac_multi"]
    for r in rows:
        assert 1.0 <= r["mean_passes"] <= r["max_passes"]
        assert 0.0 <= r["frac_multi"] <= 1.0
    # --max-rows subsamples and says so.
    assert main(["--shapes", "200x320", "--block-n", "64", "--max-rows", "64"]) == 0
    assert "first 64 rows" in capsys.readouterr().out


def test_main_rejects_bad_shapes() -> None:
    with pytest.raises(SystemExit):
        main(["--shapes", "64x100"])
