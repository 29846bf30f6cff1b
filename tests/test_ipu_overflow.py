"""Spike-list overflow on the IPU reaches layer.stats (snn_ipu.ipu_overflow).

The rows are reduced from what the op outputs (its listed counts and the counts it
needed) and checked against the CPU's own bookkeeping: the reference backend runs the
same layer under the same capacity and records its stats and warning itself; the
op's ``needed`` is computed here from that run's dense membrane, independently.
"""

import warnings

import pytest
import torch
from conftest import binary
from poptorch_standin import install

from snn_ipu import LIFLayer, ReadoutLayer, SpikeOverflowError, SynapticLayer, ipu_overflow
from snn_ipu.poptorch_training import WithLoss

T, B, N_IN, N = 6, 4, 20, 12
STATS = ("activity", "eligible_activity", "spikes", "capacity", "needed_capacity",
         "spikes_dropped", "eligible_dropped", "total_spikes_dropped", "total_eligible_dropped")


def make(cls, capacity, window, policy="drop", backend="reference", seed=0, n_in=N_IN,
         name="hidden"):
    torch.manual_seed(seed)
    layer = cls(n_in, N, max_spikes=capacity, overflow=policy, grad_window=window,
                backend=backend, name=name)
    with torch.no_grad():
        layer.weight.mul_(4.0).add_(0.25)
    return layer


def needed_counts(membrane, window, threshold=1.0):
    """What a list needs at every (t, b), from the dense membrane: spikes, and spikes
    plus the neurons above threshold - window (all of them without a window)."""
    spikes = (membrane > threshold).sum(-1)
    if window is None:
        entries = torch.full_like(spikes, membrane.shape[-1])
    else:
        entries = (membrane > torch.tensor(threshold) - torch.tensor(window)).sum(-1)
    return torch.stack([spikes, entries], -1).float()


def reference_call(cls, capacity, window, seed=0):
    layer = make(cls, capacity, window, seed=seed)
    layer.record_membrane = True
    x = binary((T, B, N_IN), 0.4, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = layer(x)
    return layer, out, needed_counts(layer.last_membrane, window), caught


def warning_detail(caught):
    (w,) = [w for w in caught if "exceeded" in str(w.message)]
    return str(w.message).split("; dropped")[0]


@pytest.mark.parametrize("cls", [LIFLayer, SynapticLayer])
@pytest.mark.parametrize("window", [0.4, None])
@pytest.mark.parametrize("capacity", [3, 7, N])
def test_rows_give_the_stats_the_cpu_records(cls, window, capacity):
    ref, out, needed, caught = reference_call(cls, capacity, window)
    row = ipu_overflow.overflow_row(out.counts, needed, out.capacity, 0)
    twin = make(cls, capacity, window, backend="ipu")
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        ipu_overflow.record(twin, row.reshape(1, -1))
    assert twin.stats["backend"] == "ipu"
    for key in STATS:
        assert twin.stats[key] == pytest.approx(ref.stats[key]), key
    if ref.stats["spikes_dropped"] + ref.stats["eligible_dropped"]:
        assert warning_detail(ours) == warning_detail(caught)
    else:
        assert not [w for w in caught + ours if "exceeded" in str(w.message)]


def test_the_rows_overflow_cases_are_exercised():
    ref, *_ = reference_call(LIFLayer, 3, 0.4)
    assert ref.stats["spikes_dropped"] > 0 and ref.stats["eligible_dropped"] > 0


def row_of(capacity=3, window=0.4):
    _, out, needed, _ = reference_call(LIFLayer, capacity, window)
    return ipu_overflow.overflow_row(out.counts, needed, out.capacity, 0).reshape(1, -1)


def test_policies_on_the_host():
    row = row_of()
    dropping = make(LIFLayer, 3, 0.4, backend="ipu")
    with pytest.warns(RuntimeWarning, match=r"hidden: spike list capacity max_spikes=3 exceeded"
                                            r".* on the IPU \(warned once per layer"):
        ipu_overflow.record(dropping, row)
    once = dropping.stats["total_spikes_dropped"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ipu_overflow.record(dropping, torch.cat([row, row]))  # two more calls, no warning
    assert dropping.stats["total_spikes_dropped"] == 3 * once

    strict = make(LIFLayer, 3, 0.4, policy="error", backend="ipu")
    with pytest.raises(SpikeOverflowError, match=r"max_spikes=3 exceeded.*on the IPU; the step"):
        ipu_overflow.record(strict, row)
    assert strict.stats["spikes_dropped"] > 0  # recorded before raising
    growing = make(LIFLayer, 3, 0.4, policy="grow", backend="ipu")
    with pytest.raises(SpikeOverflowError, match="cannot grow a compiled capacity"):
        ipu_overflow.record(growing, row)
    fits = make(LIFLayer, N, 0.4, policy="error", backend="ipu")
    ipu_overflow.record(fits, row_of(capacity=N))
    assert fits.stats["needed_capacity"] <= N


def test_record_refuses_what_is_not_its_counts():
    layer = make(LIFLayer, 3, 0.4, backend="ipu")
    with pytest.raises(TypeError, match="int32 counts"):
        ipu_overflow.record(layer, torch.zeros(1, len(ipu_overflow.ROW)))
    with pytest.raises(ValueError, match="not rows of 12"):
        ipu_overflow.record(layer, torch.zeros(5, dtype=torch.int32))
    bad = row_of().clone()
    bad[0, 0] = 3
    with pytest.raises(ValueError, match="names layer 3, but the model has 1"):
        ipu_overflow.record(layer, bad)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ipu_overflow.OverflowCounts([layer])


def test_a_layer_from_another_model_is_named(monkeypatch):
    poptorch = install(monkeypatch)
    poptorch._phase = "trace"
    inside = make(LIFLayer, 3, 0.4, backend="ipu", name="inside")
    outside = make(LIFLayer, 3, 0.4, backend="ipu", name="outside")
    x = binary((T, B, N_IN), 0.4, 0)
    with pytest.raises(ValueError, match="outside ran on the IPU inside OverflowCounts"):
        with ipu_overflow.OverflowCounts(inside):
            inside(x)
            outside(x)


def test_on_a_cpu_the_counts_are_empty_and_the_layers_keep_their_stats():
    net = torch.nn.Sequential(make(LIFLayer, 3, 0.4, backend="emulator"), ReadoutLayer(N, 2))
    x = binary((T, B, N_IN), 0.4, 0)
    with pytest.warns(RuntimeWarning, match="exceeded"):
        with ipu_overflow.OverflowCounts(net) as overflow:
            net(x)
    assert overflow.counts.shape == (0, len(ipu_overflow.ROW))
    before = dict(net[0].stats)
    ipu_overflow.record(net, overflow.counts)
    assert net[0].stats == before and before["backend"] == "emulator"


def test_through_a_compiled_model(monkeypatch):
    """An inference model with two device iterations: every micro-batch's rows come back
    (OutputMode.All) and reach the layers' stats, call after call, as the reference
    records the same micro-batches."""
    poptorch = install(monkeypatch)
    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.All)
    def pair(backend):
        return [make(LIFLayer, 3, 0.4, backend=backend, seed=1, name="first"),
                make(LIFLayer, 4, 0.4, backend=backend, seed=2, n_in=N, name="second")]

    net = torch.nn.Sequential(*pair("auto"), ReadoutLayer(N, 3, backend="auto"))
    model = WithLoss(net, loss_fn=None)
    x = torch.stack([binary((T, N_IN), 0.4, s) for s in range(2 * B)])  # [2B, T, in]
    inference = poptorch.inferenceModel(model, options=opts)
    predictions, counts = inference(x)
    assert predictions.shape == (2 * B,) and counts.shape == (2 * 2, len(ipu_overflow.ROW))
    with pytest.warns(RuntimeWarning, match="on the IPU"):
        ipu_overflow.record(net, counts)

    reference = pair("reference")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for half in x.chunk(2):
            reference[1](reference[0](half.transpose(0, 1)))
    for ours, ref in zip(net[:2], reference):
        assert ours.stats["spikes_dropped"] > 0
        for key in STATS:
            assert ours.stats[key] == pytest.approx(ref.stats[key]), (ours.name, key)


def test_rows_summed_by_output_mode_sum_are_refused(monkeypatch):
    """OutputMode.Sum (PopTorch's cheap way to monitor a metric) returns the sum of every
    micro-batch's outputs: two device iterations' rows came back as one row of twice the
    steps, samples and capacity (6 for max_spikes=3) and were recorded so, the activity
    half the calls' mean. Refused, naming OutputMode.All, and nothing is recorded."""
    poptorch = install(monkeypatch)
    net = torch.nn.Sequential(make(LIFLayer, 3, 0.4, backend="auto"),
                              ReadoutLayer(N, 3, backend="auto"))
    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.Sum)
    x = torch.stack([binary((T, N_IN), 0.4, s) for s in range(2 * B)])
    _, counts = poptorch.inferenceModel(WithLoss(net, loss_fn=None), options=opts)(x)
    assert counts.shape == (1, len(ipu_overflow.ROW))
    assert counts[0, 1:4].tolist() == [2 * T, 2 * B, 2 * 3]  # summed, by hand
    with pytest.raises(ValueError, match=r"row 0 is not the counts of one call of hidden "
                                         r"\(capacity 6, but the layer's max_spikes is 3\).*"
                                         r"OutputMode.All"):
        ipu_overflow.record(net, counts)
    assert "spikes" not in net[0].stats


def hand_row(needed, listed, capacity):
    """A row from an op's ``needed`` and listed ``counts`` given by hand ([T, B, 2])."""
    return ipu_overflow.overflow_row(torch.tensor(listed, dtype=torch.int32),
                                     torch.tensor(needed, dtype=torch.float32), capacity, 0)


def test_a_summed_overflow_is_not_recorded_as_none():
    """Two micro-batches' rows added up (OutputMode.Sum): the first overflowed at its
    first (t, b) (index 0) and the second did not (-1), so the sum said -1, "no step
    over capacity", and an overflow="error" layer without max_spikes recorded the 2
    dropped spikes without raising. Rows that break what one call's rows keep are
    refused."""
    over = hand_row([[[5, 5]], [[1, 1]]], [[[3, 3]], [[1, 1]]], 3)  # T=2, B=1
    fits = hand_row([[[1, 2]], [[0, 0]]], [[[1, 2]], [[0, 0]]], 3)
    assert over[ipu_overflow.ROW.index("first_overflow")] == 0
    assert fits[ipu_overflow.ROW.index("first_overflow")] == -1
    layer = make(LIFLayer, None, 0.4, policy="error", backend="ipu")
    with pytest.raises(SpikeOverflowError):
        ipu_overflow.record(layer, over.reshape(1, -1))  # one call's row: raises
    with pytest.raises(ValueError, match=r"entries dropped \(2 spikes, 0 eligible\) but no "
                                         r"step over capacity.*OutputMode.All"):
        ipu_overflow.record(layer, (over + fits).reshape(1, -1))
    with pytest.raises(ValueError, match=r"first step over capacity -2, of 8 steps"):
        ipu_overflow.record(layer, (fits + fits).reshape(1, -1))
    ipu_overflow.record(layer, torch.stack([fits, fits]))  # as OutputMode.All returns them
    assert layer.stats["spikes"] == 1 and layer.stats["total_spikes_dropped"] == 2
