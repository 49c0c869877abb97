"""calc_diff (moegemm.testing), the correctness measure of every GPU test and benchmark: 0 for
equal tensors, small for close ones, and inf (never NaN) for NaN-poisoned or non-finite
outputs, so `max(worst, calc_diff(..))` over groups cannot drop a failing group."""

from __future__ import annotations

import math

import torch

from moegemm.testing import calc_diff


def test_calc_diff_values() -> None:
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    assert calc_diff(x, x) == 0.0
    assert 0 < calc_diff(x, x * (1 + 1e-3)) < 1e-5
    assert calc_diff(torch.zeros(3), torch.zeros(3)) == 0.0
    assert calc_diff(torch.zeros(3), torch.ones(3)) == 1.0
    poisoned = x.clone()
    poisoned[5, 7] = float("nan")
    assert calc_diff(poisoned, x) == math.inf
    assert calc_diff(x, torch.full_like(x, float("inf"))) == math.inf
    # A NaN group cannot hide behind a good one.
    assert max(calc_diff(x, x), calc_diff(poisoned, x)) == math.inf
