"""SpikeAugment: jitter and deletion on the lists, per-sample reproducible."""

import pytest
import torch

from snn_ipu import SparseSpikes
from snn_ipu.data.augment import SpikeAugment


def batch(seed, B=6, T=12, N=40, p=0.15):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(T, B, N, generator=g) < p).float()


def test_nothing_to_do_returns_the_list():
    x = SparseSpikes.from_dense(batch(0))
    assert SpikeAugment()(x, range(6), 0, 1) is x


def test_jitter_moves_spikes_by_at_most_j_steps():
    dense = batch(1)
    out = SpikeAugment(jitter=2)(SparseSpikes.from_dense(dense), list(range(6)), 3, 1)
    out.validate()
    moved = out.to_dense()
    T = dense.shape[0]
    for t, b, n in moved.nonzero().tolist():  # every spike has a source within 2 steps
        assert dense[max(0, t - 2):min(T, t + 3), b, n].sum() > 0
    for t, b, n in dense.nonzero().tolist():  # and every source a spike within 2 steps
        assert moved[max(0, t - 2):min(T, t + 3), b, n].sum() > 0
    assert not torch.equal(moved, dense)


def test_drop_deletes_about_p_of_the_spikes():
    dense = batch(2, B=40)
    out = SpikeAugment(drop=0.3)(SparseSpikes.from_dense(dense), list(range(40)), 0, 1)
    kept = out.to_dense()
    assert bool((kept <= dense).all())
    assert float(kept.sum() / dense.sum()) == pytest.approx(0.7, abs=0.05)


def test_a_sample_is_augmented_alike_in_any_batch():
    dense = batch(3)
    augment = SpikeAugment(jitter=1, drop=0.2)
    whole = augment(SparseSpikes.from_dense(dense), [10, 11, 12, 13, 14, 15], 5, 2).to_dense()
    part = augment(SparseSpikes.from_dense(dense[:, [4, 1]]), [14, 11], 5, 2).to_dense()
    assert torch.equal(part, whole[:, [4, 1]])
    other_epoch = augment(SparseSpikes.from_dense(dense), [10, 11, 12, 13, 14, 15], 5, 3)
    assert not torch.equal(other_epoch.to_dense(), whole)


def test_bad_settings():
    with pytest.raises(ValueError, match="jitter"):
        SpikeAugment(jitter=-1)
    with pytest.raises(ValueError, match="drop"):
        SpikeAugment(drop=1.0)
