"""SparseSpikes.from_events against a dense binning written here and tonic's ToFrame;
batches of different lengths, merged events, the grid's edges, and the errors."""

import numpy as np
import pytest
import torch

from snn_ipu import LIFLayer, SparseSpikes

TONIC = np.dtype([("t", np.int64), ("x", np.int64), ("y", np.int64), ("p", np.int64)])


def random_events(rng, n, sensor, t_max):
    w, h, p = sensor
    ev = np.zeros(n, dtype=TONIC)
    ev["t"] = np.sort(rng.integers(0, t_max, n))
    ev["x"], ev["y"], ev["p"] = rng.integers(0, w, n), rng.integers(0, h, n), \
        rng.integers(0, p, n)
    return ev


def dense_reference(samples, sensor, dt, num_steps):
    """[T, B, P*H*W] 0/1 by direct indexing (the frames tonic would give, flattened)."""
    w, h, p = sensor
    out = np.zeros((num_steps, len(samples), p, h, w))
    for b, ev in enumerate(samples):
        steps = ev["t"] // dt
        out[steps, b, ev["p"], ev["y"], ev["x"]] = 1
    return torch.from_numpy(out.reshape(num_steps, len(samples), -1)).float()


def test_tonic_events_of_different_lengths_match_a_dense_binning():
    rng = np.random.default_rng(0)
    sensor = (5, 4, 2)
    samples = [random_events(rng, n, sensor, 1000) for n in (0, 3, 250, 40)]
    spikes = SparseSpikes.from_events(samples, sensor_size=sensor, dt=100, num_steps=10)
    assert spikes.dense_shape == (10, 4, 40) and spikes.values_checked
    spikes.validate()
    expected = dense_reference(samples, sensor, 100, 10)
    assert torch.equal(spikes.to_dense(), expected)
    # 250 events on 40 pixels in 10 bins: many coincide, and spike once
    assert float(expected.sum()) < 290
    # ids in ascending order per (t, b), as from_dense lists them
    again = SparseSpikes.from_dense(expected)
    assert torch.equal(spikes.ids, again.ids) and torch.equal(spikes.counts, again.counts)


def test_against_tonics_own_to_frame():
    tonic = pytest.importorskip("tonic")
    rng = np.random.default_rng(1)
    sensor = (6, 3, 2)
    ev = random_events(rng, 400, sensor, 5_000)
    ev["t"][0], ev["t"][-1] = 0, 4_999
    frames = tonic.transforms.ToFrame(sensor_size=sensor, time_window=500,
                                      include_incomplete=True)(ev)  # [T, P, H, W]
    spikes = SparseSpikes.from_events(ev, sensor_size=sensor, dt=500, num_steps=10)
    assert frames.shape[0] == 10
    expected = torch.from_numpy((frames > 0).reshape(10, 1, -1).astype(np.float32))
    assert torch.equal(spikes.to_dense(), expected)


def test_shd_pairs_with_a_duration_and_the_bin_edges():
    times = np.array([0.0, 0.05, 0.0999, 0.1, 0.3, 0.95, 0.999])
    units = np.array([3, 1, 1, 1, 2, 0, 4])
    spikes = SparseSpikes.from_events([(times, units), (np.zeros(0), np.zeros(0, int))], 5,
                                      num_steps=10, duration=1.0)
    dense = spikes.to_dense()
    hits = sorted(tuple(i) for i in dense.nonzero().tolist())
    # 0.3 sits on the edge 3 * 0.1 = 0.30000000000000004: in bin 2, as tonic draws edges
    assert hits == [(0, 0, 1), (0, 0, 3), (1, 0, 1), (2, 0, 2), (9, 0, 0), (9, 0, 4)]
    assert spikes.batch_size == 2 and int(spikes.counts[:, 1].sum()) == 0


@pytest.mark.parametrize("duration, num_steps", [(2.9, 9), (0.7, 3), (1e6, 7)])
def test_an_event_just_before_the_duration_is_in_the_last_bin(duration, num_steps):
    """The grid covers [0, duration) also where num_steps * (duration / num_steps) rounds
    one ulp below the duration."""
    t = np.nextafter(duration, 0.0)
    spikes = SparseSpikes.from_events([(np.array([t]), np.array([0]))], 1,
                                      num_steps=num_steps, duration=duration)
    assert spikes.to_dense()[:, 0, 0].nonzero().flatten().tolist() == [num_steps - 1]


@pytest.mark.parametrize("grid", [dict(dt=0.1), dict(num_steps=3)])
def test_an_event_at_the_duration_is_outside_however_the_grid_is_given(grid):
    """[0, 0.3) in steps of 0.1: 3 * 0.1 rounds past 0.3, and an event at t=0.3 was
    binned with dt=0.1 but left out with num_steps=3 (the same grid)."""
    ev = [(np.array([0.05, 0.3]), np.array([0, 1]))]
    spikes = SparseSpikes.from_events(ev, 2, duration=0.3, outside="drop", **grid)
    assert spikes.num_steps == 3
    assert spikes.to_dense()[:, 0].tolist() == [[1, 0], [0, 0], [0, 0]]
    with pytest.raises(ValueError, match="1 events outside the time grid"):
        SparseSpikes.from_events(ev, 2, duration=0.3, **grid)


def test_dt_alone_covers_the_latest_event_and_t_start_shifts_the_grid():
    ev = (np.array([10.0, 15.0, 39.0]), np.array([0, 1, 0]))
    spikes = SparseSpikes.from_events(ev, 2, dt=10.0, t_start=10.0)
    assert spikes.num_steps == 3
    assert spikes.to_dense()[:, 0].tolist() == [[1, 1], [0, 0], [1, 0]]
    exact = SparseSpikes.from_events((np.array([0.0, 30.0]), np.array([0, 1])), 2, dt=10.0)
    assert exact.num_steps == 4  # an event at 30 opens bin 3


def test_events_outside_the_grid_are_an_error_or_counted():
    ev = (np.array([-1.0, 0.5, 2.5]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match=r"2 events outside the time grid \[0.0, 2.0\)"):
        SparseSpikes.from_events(ev, 2, num_steps=4, duration=2.0)
    spikes = SparseSpikes.from_events(ev, 2, num_steps=4, duration=2.0, outside="drop")
    assert spikes.events_outside == 2 and int(spikes.counts[..., 0].sum()) == 1


def test_capacity_and_overflow_policy():
    ev = (np.array([0.0, 0.0, 0.0]), np.array([0, 1, 2]))
    with pytest.raises(Exception, match="max_spikes=2 exceeded at timestep 0"):
        SparseSpikes.from_events(ev, 3, dt=1.0, max_spikes=2)
    with pytest.warns(RuntimeWarning, match="dropped 1 spikes"):
        spikes = SparseSpikes.from_events(ev, 3, dt=1.0, max_spikes=2, overflow="drop")
    assert spikes.ids[0, 0].tolist() == [0, 1] and spikes.dropped == 1


def test_a_layer_takes_the_binned_events():
    rng = np.random.default_rng(2)
    samples = [(np.sort(rng.uniform(0, 1, n)), rng.integers(0, 30, n)) for n in (50, 80)]
    spikes = SparseSpikes.from_events(samples, 30, num_steps=20, duration=1.0)
    layer = LIFLayer(30, 8, backend="reference")
    torch.manual_seed(0)
    out_sparse = layer(spikes)
    out_dense = layer(spikes.to_dense())
    assert torch.equal(out_sparse.to_dense(), out_dense.to_dense())


def test_single_polarity_sensor_takes_tonics_constant_p():
    # tonic's SHD events carry p = 1 on a (700, 1, 1) sensor
    ev = np.zeros(2, dtype=[("t", float), ("x", int), ("p", int)])
    ev["t"], ev["x"], ev["p"] = [0.0, 5.0], [3, 699], 1
    spikes = SparseSpikes.from_events(ev, sensor_size=(700, 1, 1), dt=10.0)
    assert spikes.ids[0, 0, :2].tolist() == [3, 699]
    ev["p"][0] = 0
    with pytest.raises(ValueError, match="one polarity"):
        SparseSpikes.from_events(ev, sensor_size=(700, 1, 1), dt=10.0)


@pytest.mark.parametrize("kwargs, events, match", [
    ({"dt": 1.0}, (np.array([0.0]), np.array([5])), r"outside the sensor's \[0, 4\)"),
    ({"dt": 1.0}, (np.array([0.0]), np.array([-1])), "outside"),
    ({"dt": 1.0}, (np.array([np.nan]), np.array([0])), "NaN or inf"),
    ({"dt": 1.0}, (np.array([0.0, 1.0]), np.array([0])), "one length"),
    ({}, (np.array([0.0]), np.array([0])), "give the time grid"),
    ({"duration": 1.0}, (np.array([0.0]), np.array([0])), "duration needs num_steps"),
    ({"dt": 0.1, "duration": 1.0, "num_steps": 5}, (np.array([0.0]), np.array([0])),
     "disagrees"),
    ({"dt": -1.0}, (np.array([0.0]), np.array([0])), "dt must be"),
    ({"dt": 1.0}, (np.array([0.0]), np.array([0.5])), "whole numbers"),
    ({"dt": 1.0}, [], "empty"),
    ({"dt": 1.0}, "spikes", "must be a structured event array"),
    # one sample as a pair of Python lists was read as a batch of two "samples" (0.1 as
    # times, 0.5 as units): named as such, not as arrays of shape ()
    ({"dt": 1.0}, ([0.1, 0.5], [1, 2]), "pair of Python lists reads as a batch"),
    ({"dt": 1.0}, ([0.1, 0.5, 0.7], [1, 2, 3]), "pair of Python lists reads as a batch"),
])
def test_bad_events_and_grids_are_named(kwargs, events, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SparseSpikes.from_events(events, 4, **kwargs)


def test_structured_events_need_the_sensor():
    ev = np.zeros(1, dtype=TONIC)
    with pytest.raises(ValueError, match="sensor_size"):
        SparseSpikes.from_events(ev, 4, dt=1.0)
    with pytest.raises(ValueError, match="disagrees with sensor_size"):
        SparseSpikes.from_events(ev, 5, sensor_size=(2, 1, 2), dt=1.0)
    ev["y"] = 3
    with pytest.raises(ValueError, match=r"y = 3 outside the sensor's \[0, 2\)"):
        SparseSpikes.from_events(ev, sensor_size=(2, 2, 2), dt=1.0)


def test_from_dense_takes_batch_first_input():
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(7, 3, 5, generator=g) < 0.4).float()
    a = SparseSpikes.from_dense(x)
    b = SparseSpikes.from_dense(x.transpose(0, 1), time_first=False)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.counts, b.counts)
    xb = x.transpose(0, 1).clone().requires_grad_()
    SparseSpikes.from_dense(xb, time_first=False).to_dense().sum().backward()
    assert torch.equal(xb.grad, x.transpose(0, 1))
    with pytest.raises(ValueError, match=r"\[B, T, N\] \(time_first=False\)"):
        SparseSpikes.from_dense(torch.zeros(3, 4), time_first=False)
