"""snn_ipu.data.SpikeLists (a dataset's samples as fixed-capacity lists for a compiled
model) and poptorch_training.Padded, against dense spikes counted by hand."""

import pytest
import torch

from snn_ipu import SparseSpikes
from snn_ipu.data import SpikeLists, collate_dense, make_randman, split
from snn_ipu.poptorch_training import Padded


def sets():
    spikes, labels = make_randman(num_classes=3, num_inputs=30, num_steps=12,
                                  num_samples_per_class=8, seed=4)
    return split(spikes, labels, test_fraction=0.25)


def test_items_are_the_samples_lists_at_the_datas_capacity():
    train, test = sets()
    lists = SpikeLists(train, collate_dense, datasets=(test,))
    busiest = int(max((d.spikes != 0).sum(-1).max() for d in (train, test)))
    assert lists.capacity == busiest < 30
    batch = torch.utils.data.default_collate([lists[i] for i in range(5)])
    ids, counts, labels = batch
    assert ids.shape == (5, 12, busiest) and ids.dtype == counts.dtype == torch.int32
    rebuilt = SparseSpikes(ids.transpose(0, 1), counts.transpose(0, 1), 30)  # validates
    assert torch.equal(rebuilt.to_dense(), train.spikes[:5].transpose(0, 1))
    assert torch.equal(labels, train.labels[:5])


def test_a_sample_over_the_capacity_is_named():
    train, _ = sets()
    lists = SpikeLists(train, collate_dense, capacity=1)
    with pytest.raises(ValueError, match="sample 0 has .* spikes in a step, more than the "
                                         "capacity K=1"):
        lists[0]
    with pytest.raises(ValueError, match="positive int"):
        SpikeLists(train, collate_dense, capacity=0)


def test_padded_appends_empty_samples_labelled_minus_one():
    _, test = sets()
    lists = SpikeLists(test, collate_dense)
    padded = Padded(lists, 4)
    assert len(test) % 4 and len(padded) % 4 == 0 and len(padded) - len(test) < 4
    ids, counts, label = padded[len(padded) - 1]
    assert int(label) == -1 and not counts.any() and ids.shape == lists[0][0].shape
    assert torch.equal(padded[0][0], lists[0][0])
