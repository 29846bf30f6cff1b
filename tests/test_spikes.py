"""The spike-list format against hand-built expectations."""

import pytest
import torch
from conftest import binary

from snn_ipu import SparseSpikes, SpikeOverflowError


def test_from_dense_hand_example():
    x = torch.zeros(2, 1, 6)
    x[0, 0, [4, 1]] = 1
    x[1, 0, 5] = 1
    s = SparseSpikes.from_dense(x)
    assert s.capacity == 2
    assert s.ids.tolist() == [[[1, 4]], [[5, 0]]]
    assert s.counts.tolist() == [[[2, 2]], [[1, 1]]]
    assert s.values.tolist() == [[[1.0, 1.0]], [[1.0, 0.0]]]
    assert s.spike_counts().tolist() == [[0, 1, 0, 0, 1, 1]]


def test_eligible_entries_follow_spikes_and_carry_gradient():
    x = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], requires_grad=True)
    elig = torch.tensor([[[True, True, False, False]]])
    s = SparseSpikes.from_dense(x, eligible=elig)
    assert s.ids.tolist() == [[[1, 3, 0]]]
    assert s.counts.tolist() == [[[2, 3]]]
    (s.to_dense() * torch.tensor([10.0, 20.0, 30.0, 40.0])).sum().backward()
    assert x.grad.tolist() == [[[10.0, 20.0, 0.0, 40.0]]]


def test_roundtrip_random():
    x = binary((7, 3, 50), 0.1, 1)
    s = SparseSpikes.from_dense(x)
    assert torch.equal(s.to_dense(), x)
    assert torch.equal(s.spike_counts(), x.sum(0))
    assert torch.equal(s.num_spikes(), x.sum(-1).long())


def test_overflow_policies():
    x = torch.zeros(3, 2, 8)
    x[1, 1, [0, 2, 3, 7]] = 1
    with pytest.raises(SpikeOverflowError, match="timestep 1, sample 1: 4 spikes"):
        SparseSpikes.from_dense(x, max_spikes=3)
    with pytest.warns(RuntimeWarning, match="dropped 1 spikes"):
        s = SparseSpikes.from_dense(x, max_spikes=3, overflow="drop")
    assert s.ids[1, 1].tolist() == [0, 2, 3] and s.dropped == 1
    g = SparseSpikes.from_dense(x, max_spikes=3, overflow="grow")
    assert g.capacity == 4 and torch.equal(g.to_dense(), x)


@pytest.mark.parametrize("max_spikes", [float("nan"), float("inf"), 2.5, 0, True, "3"])
def test_from_dense_refuses_bad_capacities(max_spikes):
    with pytest.raises(ValueError, match="max_spikes must be a positive integer or None"):
        SparseSpikes.from_dense(torch.zeros(2, 1, 3), max_spikes=max_spikes)


def test_from_dense_takes_whole_capacities_of_any_int_type():
    import numpy as np

    x = torch.zeros(2, 1, 5)
    x[0, 0, :3] = 1
    for k in (4, np.int64(4), 4.0):
        assert SparseSpikes.from_dense(x, max_spikes=k).capacity == 4


def test_eligible_must_be_a_bool_tensor():
    import numpy as np

    x = torch.zeros(2, 1, 3)
    for mask, what in ((torch.full((2, 1, 3), float("nan")), "torch.float32"),
                       (np.ones((2, 1, 3), bool), "ndarray")):
        with pytest.raises(TypeError, match=f"must be a bool torch.Tensor mask, got {what}"):
            SparseSpikes.from_dense(x, eligible=mask)


@pytest.mark.parametrize("ids_shape, counts_shape, match", [
    ((1, 1, 2), (1, 2), r"counts must have shape \[T, B, 2\]"),
    ((1, 1, 2), (1, 1), r"counts must have shape \[T, B, 2\]"),
    ((1, 2), (1, 1, 2), r"ids must have shape \[T, B, K\]"),
])
def test_constructor_names_the_misshapen_tensor(ids_shape, counts_shape, match):
    """values is built from ids and counts, so their shapes are what is wrong, not values."""
    with pytest.raises(ValueError, match=match):
        SparseSpikes(torch.zeros(ids_shape, dtype=torch.int32),
                     torch.zeros(counts_shape, dtype=torch.int32), 4)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_hand_built_lists_need_not_be_ascending(backend):
    """The same spikes listed in reverse order: the same output spikes, and each entry's
    input gradient follows its id (the reference computes densely, so its sums match)."""
    from snn_ipu import LIFLayer

    x = binary((6, 3, 20), 0.3, 0)
    s = SparseSpikes.from_dense(x)
    reversed_ids = s.ids.clone()
    for t in range(6):
        for b in range(3):
            n = int(s.counts[t, b, 0])
            reversed_ids[t, b, :n] = reversed_ids[t, b, :n].flip(0)
    lists = [SparseSpikes(ids, s.counts.clone(), 20, s.values.detach().clone().requires_grad_())
             for ids in (s.ids, reversed_ids)]
    torch.manual_seed(1)
    layer = LIFLayer(20, 8, beta=0.9, backend=backend)
    outs, grads = [], []
    for lst in lists:
        out = layer(lst)
        out.spike_counts().sum().backward()
        outs.append(out.to_dense())
        dense_grad = torch.zeros(6, 3, 20).scatter_add_(-1, lst.ids.long(), lst.values.grad)
        grads.append(dense_grad)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)
