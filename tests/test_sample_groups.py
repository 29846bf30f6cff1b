"""Sample groups: the host executor's split of a call's batch over its threads.

The planner picks the groups from the machine's threads; here they are forced (and
the tiles with them), so what is tested does not depend on the machine. Whatever
the grouping, the spikes and state are those of the reference backend, and so are
all gradients; the forward results are bit-identical across groupings.
"""

import copy

import conftest
import numpy as np
import pytest
import torch
from conftest import assert_rel_close, binary

from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer
from snn_ipu.backends import emulator
from snn_ipu.backends.work_split import WorkSplit

T, B, IN, N = 12, 5, 30, 16
SPLITS = [(1, 2), (1, 5), (2, 3)]  # (tiles, sample groups); B = 5


@pytest.fixture
def force_split(monkeypatch):
    def force(num_tiles, groups):
        starts = np.linspace(0, N, num_tiles + 1).astype(np.int32)
        monkeypatch.setattr(emulator, "_plan",
                            lambda cfg, spikes, weight: WorkSplit(starts, groups))

    return force


def tie_free(model, recurrent, window, learn_beta=True, **kw):
    """A reference layer and an input whose membranes keep clear of every decision line.
    A learned beta keeps the dense state history, whose backward differs from the one
    that reads the lists."""
    cls = SynapticLayer if model == "synaptic" else LIFLayer

    def make(seed):
        torch.manual_seed(seed)
        layer = cls(IN, N, recurrent=recurrent, grad_window=window, learn_beta=learn_beta,
                    learn_threshold=True, backend="reference", **kw)
        with torch.no_grad():
            layer.weight.mul_(4.0)
            if recurrent:
                layer.rec_weight.mul_(2.0)
        return layer

    return conftest.tie_free(make, (T, B, IN), window)


def run(layer, x):
    """Output spikes and the gradients of a fixed loss on every parameter and the input."""
    x = x.clone().requires_grad_()
    out = layer(x)
    dense = out.to_dense()
    weights = torch.linspace(0.5, 1.5, dense.numel()).reshape(dense.shape)
    (dense * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
    grads["input"] = x.grad.clone()
    return dense.detach(), grads


@pytest.mark.parametrize("tiles,groups", SPLITS)
@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("learn_beta", [True, False])
def test_groups_match_reference(force_split, tiles, groups, model, recurrent, learn_beta):
    ref, x = tie_free(model, recurrent, 0.3, learn_beta=learn_beta)
    expect, expect_grads = run(ref, x)
    assert expect.sum() > 0
    layer = copy.deepcopy(ref)
    layer.backend = "emulator"
    force_split(tiles, groups)
    got, grads = run(layer, x)
    assert layer.stats["sample_groups"] == groups
    assert torch.equal(got, expect)
    assert grads.keys() == expect_grads.keys()
    for name, g in grads.items():
        assert_rel_close(g, expect_grads[name].float(), 1e-4, name)


@pytest.mark.parametrize("tiles,groups", SPLITS)
def test_forward_is_bit_identical_across_groupings(force_split, tiles, groups):
    ref, x = tie_free("synaptic", True, 0.3)
    layer = copy.deepcopy(ref)
    layer.backend = "emulator"
    layer.record_membrane = True
    ref.record_membrane = True
    with torch.no_grad():
        expect = ref(x).to_dense()
    force_split(tiles, 1)
    with torch.no_grad():
        one = layer(x)
    membrane = layer.last_membrane
    force_split(tiles, groups)
    with torch.no_grad():
        grouped = layer(x)
    # Both are the reference's, and bit for bit the same.
    assert torch.equal(grouped.to_dense(), expect) and expect.sum() > 0
    torch.testing.assert_close(layer.last_membrane, ref.last_membrane.float(), atol=1e-5,
                               rtol=0)
    for a, b in [(one.ids, grouped.ids), (one.counts, grouped.counts),
                 (one.values, grouped.values), (membrane, layer.last_membrane)]:
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("ignore:.*spike list capacity")
@pytest.mark.parametrize("tiles,groups", SPLITS)
@pytest.mark.parametrize("recurrent", [False, True])
def test_carried_state_and_dropped_spikes_with_groups(force_split, tiles, groups, recurrent):
    """Two chunks with carry_state and a list capacity that drops spikes: the state at
    the boundary and the dropped spikes' resets belong to the right samples."""
    ref, x = tie_free("leaky", recurrent, 0.0, max_spikes=2, overflow="drop")
    layer = copy.deepcopy(ref)
    layer.backend = "emulator"
    force_split(tiles, groups)
    outs = {}
    for name, lay in (("reference", ref), ("emulator", layer)):
        lay.carry_state = True
        lay.reset_state()
        first = lay(x[:5]).to_dense()
        second, grads = run(lay, x[5:])
        outs[name] = (first, second, grads, lay.state)
    assert ref.stats["total_spikes_dropped"] > 0
    (f0, s0, g0, st0), (f1, s1, g1, st1) = outs["reference"], outs["emulator"]
    assert torch.equal(f0, f1) and torch.equal(s0, s1)
    torch.testing.assert_close(st1.membrane, st0.membrane.float(), atol=1e-5, rtol=0)
    assert torch.equal(st1.spikes, st0.spikes.float())
    for name, g in g1.items():
        assert_rel_close(g, g0[name].float(), 1e-4, name)


@pytest.mark.parametrize("tiles,groups", SPLITS)
def test_readout_with_groups_matches_reference(force_split, tiles, groups):
    torch.manual_seed(0)
    ref = ReadoutLayer(IN, N, learn_beta=True, backend="reference")
    layer = copy.deepcopy(ref)
    layer.backend = "emulator"
    force_split(tiles, groups)
    x = binary((T, B, IN), 0.25, 0)
    grads = {}
    for name, lay in (("reference", ref), ("emulator", layer)):
        xin = x.clone().requires_grad_()
        out = lay(xin)
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        grads[name] = ({n: p.grad.clone() for n, p in lay.named_parameters()}, xin.grad, out)
    (g0, x0, o0), (g1, x1, o1) = grads["reference"], grads["emulator"]
    torch.testing.assert_close(o1.detach(), o0.detach().float(), atol=1e-5, rtol=0)
    assert_rel_close(x1, x0.float(), 1e-4, "input")
    for name, g in g1.items():
        assert_rel_close(g, g0[name].float(), 1e-4, name)
