"""snn_ipu._finite.first_nonfinite against torch.isfinite, on every dtype and layout
a parameter can have, at every position a NaN or inf can take in a vector pass."""

import math

import pytest
import torch

from snn_ipu._finite import first_nonfinite


def _expected(tensors):
    for i, t in enumerate(tensors):
        if not bool(torch.isfinite(t).all()):
            return i
    return -1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_finds_the_first_tensor_with_a_nan_or_inf(dtype, bad):
    gen = torch.Generator().manual_seed(0)
    # lengths around the vector width, so the odd tail of a pass is covered too
    for n in (1, 7, 8, 9, 31, 33, 1000):
        for pos in sorted({0, n // 2, n - 1}):
            tensors = [torch.randn(n, generator=gen).to(dtype) for _ in range(3)]
            tensors[1][pos] = bad
            tensors[2][0] = bad
            assert first_nonfinite(tensors) == _expected(tensors) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_extremes_that_are_finite_are_not_reported(dtype):
    info = torch.finfo(dtype)
    t = torch.tensor([info.max, -info.max, info.tiny, -info.tiny, 0.0, -0.0], dtype=dtype)
    # a subnormal: its exponent bits all 0
    t = torch.cat([t, torch.tensor([info.tiny / 2 ** (info.bits // 2)], dtype=dtype)])
    assert first_nonfinite([t, t.flip(0)]) == _expected([t]) == -1


def test_non_contiguous_parameters_and_parameters_that_need_grad():
    w = torch.nn.Parameter(torch.randn(6, 5))
    strided = torch.randn(5, 6).t()  # a transposed view
    assert first_nonfinite([w, strided]) == -1
    with torch.no_grad():
        strided[5, 4] = math.nan  # the last element of its own (column-major) memory
    assert first_nonfinite([w, strided]) == _expected([w, strided]) == 1


def test_no_tensors():
    assert first_nonfinite([]) == -1
