"""A step's input walked id by id (popops_ext/host/IdBuckets.hpp).

Where a step's input ids repeat across its samples, the host executor adds each id's
weight row to every sample that lists it at once (the forward's currents, on blocks
beyond the L2), each id's dL/dW row takes every such sample's dL/dI at once, and each
id's weight row is dotted with the dL/dI of every sample that lists it at once (dL/dx),
instead of walking sample by sample. Both walks add the same numbers in the same
order, so the results are the same bit for bit; and the reference's, within float
tolerance. SNN_IPU_ID_BUCKETS=always|never forces either walk on any host.
"""

import copy

import conftest
import numpy as np
import pytest
import torch
from conftest import assert_rel_close

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer
from snn_ipu.backends import emulator
from snn_ipu.backends.work_split import WorkSplit

T, B, IN, N = 16, 6, 40, 24
SPLITS = [(1, 1), (2, 1), (1, 3), (3, 2)]  # (tiles, sample groups)


@pytest.fixture
def force_split(monkeypatch):
    # the row kernels for dL/dx and dL/dW, however busy the input (not the GEMMs); dL/dx
    # by the input's entries (test_input_grad_walk.py has the walk of the output's)
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (2.0, 2.0))
    monkeypatch.setenv("SNN_IPU_INPUT_GRAD", "inputs")

    def force(num_tiles, groups):
        starts = np.linspace(0, N, num_tiles + 1).astype(np.int32)
        monkeypatch.setattr(emulator, "_plan",
                            lambda cfg, spikes, weight: WorkSplit(starts, groups))

    return force


def tie_free(model, recurrent, dtype=torch.float32):
    """A reference layer and a busy input (ids repeat across samples) whose membranes
    keep clear of every decision line."""
    def make(seed):
        torch.manual_seed(seed)
        if model == "readout":
            layer = ReadoutLayer(IN, N, backend="reference")
        else:
            cls = SynapticLayer if model == "synaptic" else LIFLayer
            layer = cls(IN, N, recurrent=recurrent, grad_window=0.3, learn_beta=True,
                        learn_threshold=True, backend="reference")
        with torch.no_grad():
            layer.weight.mul_(3.0)
            if dtype == torch.float16:  # the reference runs the rounded weights
                for w in (layer.weight, getattr(layer, "rec_weight", None)):
                    if w is not None:
                        w.copy_(w.half().float())
        return layer

    return conftest.tie_free(make, (T, B, IN), None if model == "readout" else 0.3)


def run(layer, x):
    """The output (dense) and the gradients of a fixed loss on every parameter and
    the input."""
    x = x.clone().requires_grad_()
    out = layer(x)
    dense = out if isinstance(out, torch.Tensor) else out.to_dense()
    weights = torch.linspace(0.5, 1.5, dense.numel()).reshape(dense.shape)
    (dense * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
    grads["input"] = x.grad.clone()
    return dense.detach(), grads


def emulated(ref, dtype):
    layer = copy.deepcopy(ref)
    layer.backend = "emulator"
    if dtype == torch.float16:
        for w in (layer.weight, getattr(layer, "rec_weight", None)):
            if w is not None:
                w.data = w.data.half()
    return layer


def walk(monkeypatch, mode, layer, x):
    monkeypatch.setenv("SNN_IPU_ID_BUCKETS", mode)
    layer.zero_grad(set_to_none=True)
    out, grads = run(layer, x)
    return out, grads, dict(layer.stats)


@pytest.mark.parametrize("tiles,groups", SPLITS)
@pytest.mark.parametrize("model,recurrent", [("leaky", False), ("leaky", True),
                                             ("synaptic", False), ("readout", False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_both_walks_give_the_same_bits(monkeypatch, force_split, tiles, groups, model,
                                       recurrent, dtype):
    ref, x = tie_free(model, recurrent, dtype)
    expect, expect_grads = run(ref, x)
    layer = emulated(ref, dtype)
    force_split(tiles, groups)
    by_id, grads_by_id, stats_by_id = walk(monkeypatch, "always", layer, x)
    by_row, grads_by_row, stats_by_row = walk(monkeypatch, "never", layer, x)

    # every (step, group) lists ids, and every one took the walk asked for
    if model != "readout":
        assert stats_by_id["sample_groups"] == groups
    assert stats_by_id["bucketed_steps"] == T * groups
    assert stats_by_id["weight_grad_bucketed_steps"] == T * groups
    assert stats_by_id["input_grad_bucketed_steps"] == T
    assert stats_by_row["bucketed_steps"] == stats_by_row["weight_grad_bucketed_steps"] == 0
    assert stats_by_row["input_grad_bucketed_steps"] == 0

    assert torch.equal(by_id, by_row)
    assert grads_by_id.keys() == grads_by_row.keys() == expect_grads.keys()
    for name in grads_by_id:
        assert torch.equal(grads_by_id[name], grads_by_row[name]), name

    if model == "readout":
        assert_rel_close(by_id, expect, 1e-5, "readout membrane")
    else:
        assert torch.equal(by_id, expect)
    rtol = 2e-3 if dtype == torch.float16 else 1e-4
    for name, g in grads_by_id.items():
        assert_rel_close(g.float(), expect_grads[name], rtol, name)


def test_a_step_with_a_descending_row_keeps_the_row_walk(monkeypatch):
    """The forward adds a sample's rows in its list's order; walked by ids, ascending.
    A step with a row listed out of order is walked row by row (the others by ids), and
    its sums are that row's list order, as the reference's."""
    ref, x = tie_free("leaky", False)
    spikes = SparseSpikes.from_dense(x)
    ids, counts = spikes.ids.clone(), spikes.counts
    t, b = 3, 2
    n = int(counts[t, b, 0])
    assert n >= 3
    ids[t, b, :n] = ids[t, b, :n].flip(0)
    unsorted = SparseSpikes(ids, counts, IN, spikes.values)

    layer = emulated(ref, torch.float32)
    monkeypatch.setenv("SNN_IPU_ID_BUCKETS", "always")
    out = layer(unsorted)
    assert layer.stats["bucketed_steps"] == T * layer.stats["sample_groups"] - 1
    monkeypatch.setenv("SNN_IPU_ID_BUCKETS", "never")
    assert torch.equal(layer(unsorted).to_dense(), out.to_dense())
    assert torch.equal(out.to_dense(), ref(x).to_dense())


def test_auto_walks_by_ids_where_they_repeat(monkeypatch):
    """dL/dW by default: by ids where a step's entries are at least twice its distinct
    ids (and the call's steps list as many entries as there are ids, on average), on
    tiles of rows of 64 floats or more whose block is beyond the L2; row by row
    otherwise."""
    l2 = conftest.host_l2_bytes()
    if l2 is None:
        pytest.skip("no getconf to read the L2's size with")
    monkeypatch.delenv("SNN_IPU_ID_BUCKETS", raising=False)
    monkeypatch.setattr(emulator, "_plan", lambda cfg, spikes, weight: WorkSplit(
        np.array([0, cfg.out_features], dtype=np.int32), 1))
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (2.0, 2.0))
    wide = l2 // (64 * 4) + 64  # a block of 64-float rows beyond the L2

    def bucketed(n_in, n_out, x):
        torch.manual_seed(0)
        layer = LIFLayer(n_in, n_out, grad_window=0.3, backend="emulator")
        layer(x).to_dense().sum().backward()
        return layer.stats["weight_grad_bucketed_steps"]

    busy = conftest.binary((T, 16, wide), 0.5, 0)  # ~8 samples per id and step
    assert bucketed(wide, 64, busy) == T
    assert bucketed(wide, 16, busy) == 0  # rows of 16 floats
    assert bucketed(IN, 64, busy[..., :IN]) == 0  # a block in the L2

    # as many entries a step as ids, but every id in one sample
    once = torch.zeros(T, 8, wide)
    for t in range(T):
        once[t, torch.arange(wide) % 8, torch.randperm(wide)] = 1.0
    assert torch.equal(once.sum(1), torch.ones(T, wide))
    assert bucketed(wide, 64, once) == 0


def test_an_unknown_setting_is_named(monkeypatch):
    layer = LIFLayer(IN, N, backend="emulator")
    monkeypatch.setenv("SNN_IPU_ID_BUCKETS", "sometimes")
    with pytest.raises(ValueError, match="SNN_IPU_ID_BUCKETS is 'sometimes'; expected auto, "
                                         "always or never"):
        layer(conftest.binary((T, B, IN), 0.3, 0))
