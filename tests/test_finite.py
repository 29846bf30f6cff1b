"""snn_ipu._finite's checks against torch's own comparisons: first_nonfinite against
torch.isfinite, first_out_of_range's ranges against their definitions, on every dtype
and layout a parameter can have, at every position a value can take in a vector pass."""

import math
import warnings

import pytest
import torch

from snn_ipu._finite import FINITE, POSITIVE, UNIT, first_nonfinite, first_out_of_range


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


# Each range's definition, in torch's float comparisons (NaN compares false).
_IN_RANGE = {
    FINITE: lambda t: torch.isfinite(t),
    UNIT: lambda t: (t >= 0) & (t <= 1),
    POSITIVE: lambda t: (t > 0) & torch.isfinite(t),
}


def _edge_values(dtype):
    info = torch.finfo(dtype)
    sub = info.tiny / 2 ** (info.bits // 2)  # a subnormal
    return [0.0, -0.0, sub, -sub, info.tiny, 0.5, 1.0, 1.0 + info.eps, 1.0 - info.eps / 2,
            -info.eps, -1.0, 2.0, info.max, -info.max, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("value_range", [FINITE, UNIT, POSITIVE])
def test_each_range_matches_its_definition_at_every_edge_value(dtype, value_range):
    for value in _edge_values(dtype):
        for n in (1, 9, 33):
            for pos in sorted({0, n // 2, n - 1}):
                t = torch.full((n,), 0.25, dtype=dtype)  # inside every range
                t[pos] = value
                expected = 0 if not bool(_IN_RANGE[value_range](t).all()) else -1
                got = first_out_of_range([t], [value_range])
                assert got == expected, (value, n, pos)


def test_ranges_apply_per_tensor_and_the_first_fault_is_reported():
    decay = torch.tensor([0.0, 1.0])
    threshold = torch.tensor([1e-30, 3.0])
    weight = torch.randn(4, 3) * 1e30
    ok = [weight, decay, threshold]
    assert first_out_of_range(ok, [FINITE, UNIT, POSITIVE]) == -1
    # the same values fault under another range
    assert first_out_of_range(ok, [FINITE, POSITIVE, UNIT]) == 1
    assert first_out_of_range([threshold, decay], [UNIT, UNIT]) == 0
    with pytest.raises(ValueError, match="one range per tensor"):
        first_out_of_range(ok, [FINITE])


def test_the_native_pass_refuses_an_unknown_range_code():
    import numpy as np

    from snn_ipu._native import _C

    with pytest.raises(ValueError, match="unknown range code 3"):
        _C.first_out_of_range([np.zeros(2, np.float32)], [3])
    with pytest.raises(ValueError, match="one range per array"):
        _C.first_out_of_range([np.zeros(2, np.float32)], [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("value_range", [FINITE, UNIT, POSITIVE])
def test_large_tensors_checked_by_several_threads_find_a_fault_anywhere(dtype, value_range):
    """Arrays of 1 MB and more are split between the executor's threads: a fault in any
    thread's share is found, at either end of a share, with one, two and three threads."""
    from snn_ipu.backends.emulator_threads import get_num_threads, set_num_threads

    n = (1 << 20) // torch.finfo(dtype).bits * 8 + 5  # just over 1 MB, an odd length
    before = get_num_threads()
    try:
        for threads in (1, 2, 3):
            with warnings.catch_warnings():  # more threads than this machine's cores
                warnings.simplefilter("ignore", RuntimeWarning)
                set_num_threads(threads)
            for pos in sorted({0, n // 3 - 1, n // 3, n // 2 - 1, n // 2, n - 1}):
                for value in (math.nan, -1.0, math.inf):
                    t = torch.full((n,), 0.25, dtype=dtype)
                    t[pos] = value
                    expected = 1 if not bool(_IN_RANGE[value_range](t).all()) else -1
                    got = first_out_of_range([torch.ones(3, dtype=dtype), t],
                                             [value_range, value_range])
                    assert got == expected, (threads, pos, value)
    finally:
        set_num_threads(before)
