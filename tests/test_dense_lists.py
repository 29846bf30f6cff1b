"""SparseSpikes.from_dense's lists (snn_ipu.lists.lists_by_nonzero: the native scan for
the CPU's dtypes, torch's nonzero for the others) against lists built row by row with
numpy, for every dtype, with and without an eligible mask, at every capacity policy."""

import math

import numpy as np
import pytest
import torch

from snn_ipu import SparseSpikes
from snn_ipu.lists import lists_by_nonzero


def reference_lists(x: np.ndarray, eligible, capacity, policy):
    """ids [T, B, K], counts [T, B, 2], spikes and eligible-only entries dropped."""
    T, B, N = x.shape
    spikes = [[np.flatnonzero(x[t, b]) for b in range(B)] for t in range(T)]
    only = [[np.flatnonzero(eligible[t, b] & (x[t, b] == 0)) if eligible is not None
             else np.zeros(0, np.int64) for b in range(B)] for t in range(T)]
    needed = max((len(spikes[t][b]) + len(only[t][b]) for t in range(T) for b in range(B)),
                 default=0)
    K = max(needed, 1) if capacity is None else capacity
    if policy == "grow":
        K = max(K, needed)
    ids = np.zeros((T, B, K), np.int32)
    counts = np.zeros((T, B, 2), np.int32)
    dropped = [0, 0]
    for t in range(T):
        for b in range(B):
            s, o = spikes[t][b], only[t][b]
            listed = np.concatenate([s, o])[:K]
            ids[t, b, :len(listed)] = listed
            counts[t, b] = (min(len(s), K), len(listed))
            dropped[0] += len(s) - counts[t, b, 0]
            dropped[1] += len(o) - (counts[t, b, 1] - counts[t, b, 0])
    return ids, counts, dropped


DTYPES = [torch.float32, torch.float64, torch.bool, torch.uint8, torch.float16,
          torch.bfloat16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_eligible", [False, True])
def test_lists_match_a_row_by_row_reference(dtype, with_eligible):
    gen = torch.Generator().manual_seed(1)
    for density, shape in ((0.01, (7, 5, 700)), (0.3, (3, 4, 33)), (0.0, (2, 3, 9)),
                           (1.0, (2, 2, 17))):
        x = torch.rand(shape, generator=gen) < density
        eligible = (torch.rand(shape, generator=gen) < 0.2) if with_eligible else None
        ref = reference_lists(x.numpy(), None if eligible is None else eligible.numpy(),
                              None, "error")
        ids, counts, ovf = lists_by_nonzero(x.to(dtype), None, "error", eligible)
        np.testing.assert_array_equal(ids.numpy(), ref[0])
        np.testing.assert_array_equal(counts.numpy(), ref[1])
        assert ovf.spikes_dropped == ovf.eligible_dropped == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])  # native, torch
@pytest.mark.parametrize("policy", ["drop", "grow"])
def test_a_capacity_keeps_the_first_entries_spikes_first(dtype, policy):
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(6, 4, 50, generator=gen) < 0.15
    eligible = torch.rand(6, 4, 50, generator=gen) < 0.3
    for capacity in (1, 4, 9):
        ids_r, counts_r, dropped = reference_lists(x.numpy(), eligible.numpy(), capacity,
                                                   policy)
        ids, counts, ovf = lists_by_nonzero(x.to(dtype), capacity, policy, eligible)
        np.testing.assert_array_equal(ids.numpy(), ids_r)
        np.testing.assert_array_equal(counts.numpy(), counts_r)
        assert (ovf.spikes_dropped, ovf.eligible_dropped) == tuple(dropped)


def test_transposed_input_and_a_gradient_through_the_values():
    gen = torch.Generator().manual_seed(3)
    x = (torch.rand(4, 6, 40, generator=gen) < 0.1).float()  # [B, T, N]
    x.requires_grad_(True)
    s = SparseSpikes.from_dense(x, time_first=False)
    ids_r, counts_r, _ = reference_lists(x.detach().transpose(0, 1).numpy(), None, None,
                                         "error")
    np.testing.assert_array_equal(s.ids.numpy(), ids_r)
    np.testing.assert_array_equal(s.counts.numpy(), counts_r)
    s.values.sum().backward()
    assert torch.equal(x.grad, x.detach())  # 1 at the spikes, the only listed entries


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.uint8,
                                   torch.int32, torch.int64])
def test_the_first_value_neither_0_nor_1_is_named(dtype):
    x = torch.zeros(3, 2, 20, dtype=dtype)
    x[0, 1, 3] = 1
    x[1, 0, 7] = 2
    x[2, 1, 0] = 3
    with pytest.raises(ValueError, match=r"binary \(0 or 1\), found 2(\.0)?:"):
        lists_by_nonzero(x, None, "error", None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_anywhere_is_named_before_other_values(dtype, bad):
    x = torch.zeros(3, 2, 20, dtype=dtype)
    x[0, 0, 1] = 0.5  # first in order, but a NaN or inf later is what is reported
    x[2, 1, 19] = bad
    with pytest.raises(ValueError, match="dense spikes contain NaN or inf"):
        lists_by_nonzero(x, None, "error", None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_are_1_at_the_spikes_in_the_inputs_float_dtype(dtype):
    """Without a gradient to carry, from_dense writes the values from the counts; they must
    be what x holds at the listed entries (1 at spikes, 0 at eligible-only and padding),
    in x's float dtype (float32 for bool and integers)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.rand(5, 3, 70, generator=gen) < 0.05
    eligible = torch.rand(5, 3, 70, generator=gen) < 0.1
    s = SparseSpikes.from_dense(x.to(dtype), eligible=eligible)
    want_dtype = dtype if dtype.is_floating_point else torch.float32
    assert s.values.dtype == want_dtype
    ids_r, counts_r, _ = reference_lists(x.numpy(), eligible.numpy(), None, "error")
    expected = np.take_along_axis(x.numpy(), ids_r.astype(np.int64), -1).astype(np.float32)
    expected[np.arange(ids_r.shape[-1]) >= counts_r[..., 1:2]] = 0.0
    np.testing.assert_array_equal(s.values.float().numpy(), expected)


def test_negative_zero_is_not_a_spike():
    x = torch.zeros(2, 2, 40)
    x[0, 0, 3] = x[1, 1, 38] = 1.0
    x[0, 0, 17] = x[1, 0, 0] = x[1, 1, 21] = -0.0
    for dtype in (torch.float32, torch.float64):
        s = SparseSpikes.from_dense(x.to(dtype))
        assert s.counts[..., 0].tolist() == [[1, 0], [0, 1]]
        assert s.ids[0, 0, 0] == 3 and s.ids[1, 1, 0] == 38


def test_values_pass_on_a_forward_mode_tangent():
    """A dual input's tangent reaches the values at the listed entries (a backend then
    differentiates or refuses it); the values written from the counts would drop it."""
    import torch.autograd.forward_ad as fwAD

    gen = torch.Generator().manual_seed(5)
    x = (torch.rand(4, 3, 30, generator=gen) < 0.2).float()
    tangent = torch.randn(4, 3, 30, generator=gen)
    with fwAD.dual_level():
        s = SparseSpikes.from_dense(fwAD.make_dual(x, tangent))
        got = fwAD.unpack_dual(s.values).tangent
    assert got is not None
    ids_r, counts_r, _ = reference_lists(x.numpy(), None, None, "error")
    expected = np.take_along_axis(tangent.numpy(), ids_r.astype(np.int64), -1)
    expected[np.arange(ids_r.shape[-1]) >= counts_r[..., 1:2]] = 0.0
    np.testing.assert_allclose(got.numpy(), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_spike_counts_pass_on_a_forward_mode_tangent(dtype):
    """The counts' tangent is the tangent summed over time at each neuron's spikes, as
    for the dense x.sum(0); the native count (float32, float64) had no jvp and raised,
    so every count loss failed under forward_ad where float16 worked."""
    import torch.autograd.forward_ad as fwAD

    gen = torch.Generator().manual_seed(6)
    x = (torch.rand(5, 3, 12, generator=gen) < 0.3).to(dtype)
    tangent = torch.randn(5, 3, 12, generator=gen).to(dtype)
    with fwAD.dual_level():
        counts = SparseSpikes.from_dense(fwAD.make_dual(x, tangent)).spike_counts()
        primal, got = fwAD.unpack_dual(counts)
    assert torch.equal(primal, x.sum(0))
    torch.testing.assert_close(got, (tangent * (x != 0)).sum(0))
