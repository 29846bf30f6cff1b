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
