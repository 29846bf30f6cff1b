"""The built-in Randman dataset: shapes, determinism, learnability, batching."""

import pytest
import torch

from snn_ipu.data import SpikeDataset, batches, make_randman, randman_times, split

SMALL = dict(num_classes=5, num_inputs=40, num_steps=30, num_samples_per_class=60)


@pytest.fixture(scope="module")
def small():
    return make_randman(**SMALL, seed=3)


def spike_time_features(spikes):
    """Mean spike time per input neuron, [N, in] (one spike per neuron here)."""
    T = spikes.shape[1]
    return (spikes * torch.arange(T, dtype=torch.float32)[None, :, None]).sum(1) / T


def test_shapes_and_values(small):
    spikes, labels = small
    assert spikes.shape == (300, 30, 40) and spikes.dtype == torch.float32
    assert labels.shape == (300,) and labels.dtype == torch.int64
    assert set(spikes.unique().tolist()) == {0.0, 1.0}
    # exactly one spike per input neuron and sample
    assert torch.equal(spikes.sum(1), torch.ones(300, 40))
    assert torch.equal(torch.bincount(labels), torch.full((5,), 60))
    # min-max scaling puts each neuron's earliest spike at 0 and latest at T-1 per class
    first = spike_time_features(spikes)[labels == 0] * 30
    assert first.min(0).values.max() == 0 and first.max(0).values.min() == 29


def test_same_seed_same_data_other_seed_other_data(small):
    again = make_randman(**SMALL, seed=3)
    assert torch.equal(small[0], again[0]) and torch.equal(small[1], again[1])
    other = make_randman(**SMALL, seed=4)
    assert not torch.equal(small[0], other[0])


def test_global_rng_untouched_and_irrelevant():
    torch.manual_seed(0)
    a = make_randman(**SMALL, seed=1)
    after = torch.rand(1)
    torch.manual_seed(99)
    b = make_randman(**SMALL, seed=1)
    assert torch.equal(a[0], b[0])
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), after)


def test_classes_are_distinguishable(small):
    spikes, labels = small
    train, test = split(spikes, labels, test_fraction=0.25)
    xtr, xte = spike_time_features(train.spikes), spike_time_features(test.spikes)
    # nearest centroid
    centroids = torch.stack([xtr[train.labels == k].mean(0) for k in range(5)])
    centroid_acc = (torch.cdist(xte, centroids).argmin(1) == test.labels).float().mean()
    # logistic regression on spike times
    torch.manual_seed(0)
    model = torch.nn.Linear(40, 5)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xtr), train.labels).backward()
        opt.step()
    logreg_acc = (model(xte).argmax(1) == test.labels).float().mean()
    chance = 1 / 5
    assert centroid_acc > chance + 0.3
    assert logreg_acc > 0.9


def test_labels_not_recoverable_from_spike_count(small):
    # the class is in the timing only: every sample has the same number of spikes
    spikes, _ = small
    assert spikes.sum((1, 2)).unique().numel() == 1


def test_shuffle_false_groups_by_class():
    _, labels = make_randman(**SMALL, seed=3, shuffle=False)
    assert torch.equal(labels, torch.arange(5).repeat_interleave(60))


def test_harder_settings_change_data():
    base = randman_times(num_classes=2, num_inputs=10, num_samples_per_class=20, seed=0)[0]
    rough = randman_times(num_classes=2, num_inputs=10, num_samples_per_class=20, seed=0,
                          alpha=1.0)[0]
    assert base.shape == (40, 1, 10) and not torch.allclose(base, rough)
    two_d = randman_times(num_classes=2, num_inputs=10, num_samples_per_class=20,
                          dim_manifold=2, num_spikes=3)[0]
    assert two_d.shape == (40, 3, 10)
    assert two_d.min() >= 0 and two_d.max() <= 1


def test_jitter_moves_spikes_but_keeps_one_each():
    clean, _ = make_randman(**SMALL, seed=3)
    noisy, _ = make_randman(**SMALL, seed=3, jitter=2.0)
    assert not torch.equal(clean, noisy)
    assert torch.equal(noisy.sum(1), torch.ones(300, 40))
    shift = (spike_time_features(noisy) - spike_time_features(clean)).abs() * 30
    assert 0.5 < shift.mean() < 3.0


def test_multiple_spikes_per_neuron():
    spikes, _ = make_randman(**SMALL, seed=3, num_spikes=3)
    per_neuron = spikes.sum(1)
    assert per_neuron.max() == 3 and per_neuron.min() >= 1  # coinciding spikes merge


def test_split_is_stratified_and_disjoint(small):
    spikes, labels = small
    train, test = split(spikes, labels, test_fraction=0.2)
    assert len(train) == 240 and len(test) == 60
    assert torch.equal(torch.bincount(test.labels), torch.full((5,), 12))
    assert isinstance(train, SpikeDataset) and train.num_steps == 30 and train.num_inputs == 40
    assert train.num_classes == 5
    x, y = train[0]
    assert x.shape == (30, 40) and y.dim() == 0
    # every sample lands in exactly one set: tag samples with their index
    tagged = torch.arange(300, dtype=torch.float32).reshape(300, 1, 1)
    tagged_train, tagged_test = split(tagged, labels, test_fraction=0.2)
    both = torch.cat([tagged_train.spikes, tagged_test.spikes]).flatten()
    assert torch.equal(both.sort().values, torch.arange(300, dtype=torch.float32))


def test_batches_time_major_and_cover_everything(small):
    spikes, labels = small
    seen = []
    for x, y in batches(spikes, labels, batch_size=64, shuffle=True,
                        generator=torch.Generator().manual_seed(0)):
        assert x.shape[0] == 30 and x.shape[2] == 40 and x.shape[1] == y.shape[0]
        seen.append(y)
    assert [len(y) for y in seen] == [64, 64, 64, 64, 44]
    assert torch.equal(torch.cat(seen).sort().values, labels.sort().values)
    x0, y0 = next(batches(spikes, labels, 4))
    assert torch.equal(x0, spikes[:4].transpose(0, 1)) and torch.equal(y0, labels[:4])
    assert len(list(batches(spikes, labels, 64, drop_last=True))) == 4


def test_batches_shuffle_is_seeded(small):
    spikes, labels = small

    def order(seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.cat([y for _, y in batches(spikes, labels, 50, True, gen)])

    assert torch.equal(order(1), order(1))
    assert not torch.equal(order(1), order(2))


def test_errors():
    with pytest.raises(ValueError, match="num_classes"):
        make_randman(num_classes=1)
    with pytest.raises(ValueError, match="num_steps"):
        make_randman(num_steps=0)
    with pytest.raises(ValueError, match="jitter"):
        make_randman(jitter=-1.0)
    with pytest.raises(ValueError, match="test_fraction"):
        split(torch.zeros(4, 2, 3), torch.zeros(4, dtype=torch.long), test_fraction=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        next(batches(torch.zeros(4, 2, 3), torch.zeros(4, dtype=torch.long), 0))
    with pytest.raises(ValueError, match="labels"):
        SpikeDataset(torch.zeros(4, 2, 3), torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("kwargs, message", [
    (dict(jitter=float("nan")), "jitter must be a finite number"),
    (dict(jitter=float("inf")), "jitter must be a finite number"),
    (dict(alpha=float("inf")), "alpha must be a finite number"),
    (dict(num_samples_per_class=1), "num_samples_per_class must be an integer >= 2"),
    (dict(num_inputs=2.5), "num_inputs must be an integer"),
    (dict(num_steps=8.5), "num_steps must be an integer"),
    (dict(num_steps=True), "num_steps must be an integer"),
])
def test_randman_arguments_that_would_corrupt_the_data_are_refused(kwargs, message):
    args = dict(num_classes=2, num_inputs=4, num_steps=8, num_samples_per_class=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        make_randman(**args)


@pytest.mark.parametrize("per_class, fraction, empty", [(2, 0.2, "test"), (3, 0.9, "training")])
def test_split_refuses_to_leave_a_set_empty(per_class, fraction, empty):
    """round(2 * 0.2) = 0 test samples per class (round(3 * 0.9) = 3 of 3): an empty set
    evaluated to a NaN accuracy and loss without an error."""
    spikes, labels = make_randman(num_classes=2, num_inputs=4, num_steps=8,
                                  num_samples_per_class=per_class)
    with pytest.raises(ValueError, match=f"leaves the {empty} set empty"):
        split(spikes, labels, test_fraction=fraction)


def test_split_needs_one_label_per_sample():
    spikes, labels = make_randman(num_classes=2, num_inputs=4, num_steps=8,
                                  num_samples_per_class=5)
    with pytest.raises(ValueError, match="one label per sample"):
        split(spikes, labels[:-1])
