"""prepare_moe_weights' refusals say the rule that was broken, what was expected and what was
given."""

from __future__ import annotations

import pytest
import torch

import moegemm

FORMS = "a bfloat16 tensor [E, 2I, H], or MXFP4 experts as a (blocks, scales) pair"


def test_hidden_size_not_a_multiple_of_32_is_named_as_such() -> None:
    blocks = torch.zeros(8, 256, 24, dtype=torch.uint8)  # H = 48
    scales = torch.zeros(8, 256, 1, dtype=torch.uint8)  # H/32 rounded down: matches
    with pytest.raises(ValueError) as info:
        moegemm.prepare_moe_weights((blocks, scales))
    message = str(info.value)
    assert "H = 48, which must be a multiple of 32" in message and "(8, 256, 24)" in message
    assert "scales must be" not in message


def test_wrong_scales_shape_names_both_shapes() -> None:
    blocks = torch.zeros(8, 256, 32, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=r"= \(8, 256, 2\) for blocks \(8, 256, 32\), got \(8, 256, 3\)"
    ):
        moegemm.prepare_moe_weights((blocks, torch.zeros(8, 256, 3, dtype=torch.uint8)))


@pytest.mark.parametrize(
    "w13, given",
    [
        ([1, 2, 3], "got a list of 3 (int, int, int)"),
        ((torch.zeros(1),), "got a tuple of 1 (Tensor)"),
        ("w13", "got a str"),
        (torch.zeros(2, 16, 8), "got a torch.float32 tensor of shape (2, 16, 8)"),
    ],
)
def test_neither_a_tensor_nor_a_pair_says_what_was_expected_and_given(
    w13: object, given: str
) -> None:
    with pytest.raises(TypeError) as info:
        moegemm.prepare_moe_weights(w13)
    message = str(info.value)
    assert message.startswith("w13 must be " + FORMS) and message.endswith(given)
