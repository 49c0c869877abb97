"""Argument checks: bad input raises a clear TypeError/ValueError before anything launches.

Device placement is checked last, so these run with CPU tensors (no GPU needed); a CPU operand
that passes every other rule must then be refused for not being on the GPU."""

from __future__ import annotations

import pytest
import torch

import moegemm

BF16, FP32 = torch.bfloat16, torch.float32


def operands(m: int = 64, n: int = 128, k: int = 256, d_dtype: torch.dtype = BF16):
    a = torch.randn(m, k).to(BF16)
    b = torch.randn(n, k).to(BF16)
    d = torch.empty(m, n, dtype=d_dtype)
    return a, b, d


def test_valid_cpu_operands_are_refused_for_their_device() -> None:
    a, b, d = operands()
    with pytest.raises(ValueError, match="a must be on a CUDA device, got cpu"):
        moegemm.bf16_gemm_nt(a, b, d)


@pytest.mark.parametrize(
    "which,bad,exc,pattern",
    [
        (
            "a",
            torch.randn(64, 256),
            TypeError,
            "a must have dtype torch.bfloat16, got torch.float32",
        ),
        ("b", torch.randn(128, 256).half(), TypeError, "b must have dtype torch.bfloat16"),
        ("d", torch.empty(64, 128, dtype=torch.float16), TypeError, "d must have dtype"),
        ("a", [[1.0]], TypeError, "a must be a torch.Tensor, got list"),
        ("a", torch.randn(1, 64, 256).to(BF16), ValueError, "a must be 2-D, got shape"),
        ("b", torch.randn(128, 248).to(BF16), ValueError, r"b must have shape \(128, 256\)"),
        ("d", torch.empty(64, 120, dtype=BF16), ValueError, r"d must have shape \(64, 128\)"),
    ],
)
def test_dtype_rank_and_shape(which: str, bad, exc: type, pattern: str) -> None:
    args = dict(zip("abd", operands()))
    args[which] = bad
    with pytest.raises(exc, match=pattern):
        moegemm.bf16_gemm_nt(args["a"], args["b"], args["d"])


def test_c_must_be_fp32_of_the_output_shape() -> None:
    a, b, d = operands(d_dtype=FP32)
    with pytest.raises(TypeError, match="c must have dtype torch.float32, got torch.bfloat16"):
        moegemm.bf16_gemm_nt(a, b, d, torch.empty(64, 128, dtype=BF16))
    with pytest.raises(ValueError, match=r"c must have shape \(64, 128\)"):
        moegemm.bf16_gemm_nt(a, b, d, torch.empty(64, 64, dtype=FP32))


def test_n_and_k_must_be_multiples_of_8() -> None:
    a, b, d = operands(n=100)
    with pytest.raises(ValueError, match="N .* multiple of 8, got 100"):
        moegemm.bf16_gemm_nt(a, b, d)
    a, b, d = operands(k=2884)
    with pytest.raises(ValueError, match="K .* multiple of 8, got 2884"):
        moegemm.bf16_gemm_nt(a, b, d)


def test_strides_and_alignment() -> None:
    _, b, d = operands()
    with pytest.raises(ValueError, match=r"a must be row-major \(stride\(1\) == 1\)"):
        moegemm.bf16_gemm_nt(torch.randn(256, 64).to(BF16).t(), b, d)
    padded = torch.randn(64, 260).to(BF16)[:, :256]  # row stride 260: not 16-byte aligned
    with pytest.raises(ValueError, match="a row stride must be a multiple of 16 bytes"):
        moegemm.bf16_gemm_nt(padded, b, d)
    shifted = torch.randn(64, 272).to(BF16)[:, 4:260]  # rows aligned, base 8 bytes off
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        moegemm.bf16_gemm_nt(shifted, b, d)
    wide_d = torch.empty(64, 136, dtype=BF16)[:, :128]  # a padded output is fine until device
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        moegemm.bf16_gemm_nt(operands()[0], b, wide_d)


def test_runtime_knobs_validate() -> None:
    with pytest.raises(ValueError, match="num_sms must be a positive int"):
        moegemm.set_num_sms(0)
    moegemm.set_num_sms(None)


def test_grouped_argument_checks_on_cpu_tensors() -> None:
    a, b = torch.randn(256, 64).to(BF16), torch.randn(4, 128, 64).to(BF16)
    d = torch.empty(256, 128, dtype=BF16)
    offs = torch.tensor([64, 128, 192, 256], dtype=torch.int32)
    with pytest.raises(ValueError, match="exactly one of m_indices"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d)
    with pytest.raises(ValueError, match="b must be 3-D"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b[0], d, offs=offs)
    with pytest.raises(TypeError, match="offs must have dtype torch.int32, got torch.int64"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs.long())
    with pytest.raises(ValueError, match="K .* must be positive"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a[:, :0], b[:, :, :0], d, offs=offs)
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, torch.zeros(256, dtype=torch.int32))
    ma, md = torch.randn(4, 32, 64).to(BF16), torch.empty(4, 32, 128, dtype=BF16)
    with pytest.raises(TypeError, match="expected_m must be a positive int"):
        moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, offs, expected_m=2.5)
    with pytest.raises(ValueError, match="expected_m must be a positive int"):
        moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, offs, expected_m=-5)
    with pytest.raises(ValueError, match="a batches must be contiguous rows"):
        moegemm.m_grouped_bf16_gemm_nt_masked(
            torch.randn(4, 40, 64).to(BF16)[:, :32], b, md, offs, expected_m=8
        )
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, offs, expected_m=8)
    ka, kb = torch.randn(100, 64).to(BF16), torch.randn(100, 32).to(BF16)
    kd = torch.empty(4, 64, 32)
    with pytest.raises(TypeError, match="d must have dtype torch.float32"):
        moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd.to(BF16), offs)
    with pytest.raises(ValueError, match=r"c must have shape \(4, 64, 32\)"):
        moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd, offs, torch.empty(4, 64, 16))
    with pytest.raises(ValueError, match="must be on a CUDA device"):
        moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd, offs)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_non_strided_operands_are_refused_by_name() -> None:
    a, b, d = operands()
    nested = torch.nested.nested_tensor([torch.zeros(8, 256), torch.zeros(8, 256)]).to(BF16)
    with pytest.raises(TypeError, match="a must be a dense \\(strided\\) tensor, got a nested"):
        moegemm.bf16_gemm_nt(nested, b, d)
    with pytest.raises(TypeError, match="b must be a dense \\(strided\\) tensor, got a torch"):
        moegemm.bf16_gemm_nt(a, b.to_sparse(), d)


def test_cpu_index_vectors_are_named_as_passed() -> None:
    """Today's operands on the CPU: the first CPU operand is named (a), and an index vector
    that alone is wrong is named as the caller passed it, never by an internal name."""
    a, b = torch.randn(256, 64).to(BF16), torch.randn(4, 128, 64).to(BF16)
    d = torch.empty(256, 128, dtype=BF16)
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="^offs must have shape \\(4,\\)"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=torch.zeros(5, dtype=torch.int32))
    with pytest.raises(ValueError, match="^m_indices must have shape \\(256,\\)"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, torch.zeros(4, dtype=torch.int32))


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("8", TypeError),
     ("a", TypeError)],
)  # fmt: skip
def test_set_num_sms_refuses_what_is_not_a_positive_int(bad: object, error: type) -> None:
    """A value of the wrong type is a TypeError (bool too), a non-positive int a ValueError."""
    with pytest.raises(error, match="^num_sms must be a positive int or None, got "):
        moegemm.set_num_sms(bad)  # type: ignore[arg-type]
    moegemm.set_num_sms(None)


@pytest.mark.parametrize("bad", ["no", 0, 1, None])
def test_set_pdl_takes_only_a_bool(bad: object) -> None:
    """bool('no') is True: anything but a bool is refused before the switch is touched."""
    with pytest.raises(TypeError, match="^enabled must be a bool, got "):
        moegemm.set_pdl(bad)  # type: ignore[arg-type]
