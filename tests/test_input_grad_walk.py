"""dL/dx walked by the output list's entries (popops_ext/host/LayerBackward.cpp,
prefersOutputEntries).

dL/dx[t, b, i] = sum_n W[n, i] dL/dI[t, b, n] at the input list's entries. The host
executor computes it either as one dot product over the outputs per input entry, or,
where a leaky layer's dL/dI obeys dL/dI[t] = E[t] + beta dL/dI[t + 1] (E: the surrogate
terms at the output list's entries), as Y[t] = beta Y[t + 1] + sum of E's entries times
their weight rows, gathered at the input's entries (a synaptic layer's dL/dI adds a
second carry, Z[t] = Y[t] + alpha Z[t + 1]). Both must give the reference's
gradients; the second must not depend on the threads, tiles or sample groups.
SNN_IPU_INPUT_GRAD=inputs|outputs forces a walk where it applies.
"""

import copy

import conftest
import numpy as np
import pytest
import torch
from conftest import assert_rel_close, tie_free_net

from snn_ipu import LIFLayer, SynapticLayer
from snn_ipu.backends import emulator
from snn_ipu.backends.work_split import WorkSplit

T, B, IN, HID, OUT = 12, 4, 40, 44, 37
SIZES = (T, B, IN, HID, OUT)


@pytest.fixture
def sparse_paths(monkeypatch):
    """The row kernels for dL/dx and dL/dW however busy the input (not the GEMMs), and
    ``split(tiles, groups, n_in=None)``: every layer's neurons (or only those of the
    layers of ``n_in`` inputs) cut into that many tiles and its samples into that many
    groups."""
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (2.0, 2.0))

    def split(tiles, groups, n_in=None):
        def plan(cfg, spikes, weight):
            if n_in is not None and cfg.in_features != n_in:  # one tile, one group
                return WorkSplit(np.array([0, cfg.out_features], dtype=np.int32), 1)
            starts = np.linspace(0, cfg.out_features, tiles + 1).astype(np.int32)
            return WorkSplit(starts, groups)

        monkeypatch.setattr(emulator, "_plan", plan)

    return split


def grads_of(net, x, readout):
    """The output (dense) and the gradients of a fixed loss on every parameter and the
    input."""
    net.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    out = net(x).to_dense()
    (out * readout).sum().backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters()}
    grads["input"] = x.grad.clone()
    return out.detach(), grads


def emulated(ref, half_second=False):
    net = copy.deepcopy(ref)
    for layer in net:
        layer.backend = "emulator"
    if half_second:
        net[1].weight.data = net[1].weight.data.half()
    return net


def walked(monkeypatch, mode, net, x, readout, threads=None):
    monkeypatch.setenv("SNN_IPU_INPUT_GRAD", mode)
    old = emulator.get_num_threads()
    try:
        if threads is not None:
            emulator.set_num_threads(threads)
        out, grads = grads_of(net, x, readout)
    finally:
        emulator.set_num_threads(old)
    return out, grads, dict(net[1].stats)


CASES = {
    "subtract": dict(reset="subtract"),
    "no reset": dict(reset="none"),
    "recurrent": dict(reset="subtract", second=dict(recurrent=True)),
    "learned beta and threshold": dict(
        reset="subtract", second=dict(learn_beta=True, learn_threshold=True)),
    "a threshold per neuron": dict(
        reset="subtract", second=dict(threshold=torch.linspace(0.8, 1.2, OUT))),
    "fast sigmoid": dict(reset="subtract", surrogate="fast_sigmoid"),
    "triangle": dict(reset="subtract", surrogate="triangle"),
    "half weights": dict(reset="subtract", half=True),
    "synaptic": dict(model="synaptic", reset="subtract"),
    "synaptic, no reset, recurrent": dict(model="synaptic", reset="none",
                                          second=dict(recurrent=True, learn_alpha=True)),
}


def net_of(case):
    c = CASES[case]
    net, x, readout = tie_free_net(SIZES, c.get("model", "leaky"), c["reset"], False, 0.3,
                                   c.get("surrogate"), second=c.get("second"))
    if c.get("half"):  # the reference runs the rounded weights
        with torch.no_grad():
            net[1].weight.copy_(net[1].weight.half().float())
    return net, x, readout


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("tiles,groups", [(1, 1), (3, 2)])
def test_both_walks_give_the_reference_gradients(monkeypatch, sparse_paths, case, tiles,
                                                 groups):
    ref, x, readout = net_of(case)
    expect, expect_grads = grads_of(ref, x, readout)
    half = CASES[case].get("half", False)
    net = emulated(ref, half)
    sparse_paths(tiles, groups)
    rtol = 2e-3 if half else 1e-4
    for mode in ("outputs", "inputs"):
        out, grads, stats = walked(monkeypatch, mode, net, x, readout)
        assert stats["input_grad_path"] == "sparse"
        assert stats["input_grad_walk"] == mode
        assert torch.equal(out, expect), mode
        assert grads.keys() == expect_grads.keys()
        for name, g in grads.items():
            assert_rel_close(g.float(), expect_grads[name], rtol, f"{mode}: {name}")


@pytest.mark.filterwarnings("ignore:set_num_threads=")
@pytest.mark.parametrize("case", ["subtract", "a threshold per neuron", "half weights",
                                  "synaptic"])
def test_the_output_walk_does_not_depend_on_threads_tiles_or_groups(monkeypatch,
                                                                      sparse_paths, case):
    """Each sample's sums are made on one thread, its output entries taken in list order
    whatever the tiles: the same bits on any split (a recurrent layer's dL/dS sums its
    tiles' partials, so its E terms do depend on the tiles)."""
    ref, x, readout = net_of(case)
    half = CASES[case].get("half", False)
    sparse_paths(1, 1)
    first = walked(monkeypatch, "outputs", emulated(ref, half), x, readout, threads=1)
    assert first[2]["input_grad_walk"] == "outputs"
    for tiles, groups, threads in [(1, 1, 2), (3, 1, 3), (2, 2, 2), (4, 3, 1)]:
        sparse_paths(tiles, groups, n_in=HID)  # the second layer's split only
        # (a fresh copy: a layer keeps its plan while its shapes stay the same)
        out, grads, stats = walked(monkeypatch, "outputs", emulated(ref, half), x, readout,
                                   threads)
        assert stats["input_grad_walk"] == "outputs"
        assert stats["tiles"] == tiles
        assert torch.equal(out, first[0])
        # the second layer's own gradients add its groups' sums in group order; its
        # dL/dx, and so everything before it, must be the same bits
        for name in ("0.weight", "0.bias", "input"):
            assert torch.equal(grads[name], first[1][name]), (tiles, groups, threads, name)


@pytest.mark.filterwarnings("ignore:set_num_threads=")
def test_one_sample_is_cut_into_parts_of_its_inputs(monkeypatch, sparse_paths):
    """A call of fewer samples than twice the threads cuts the inputs into parts of
    whole vectors (the tail in the last one): the same bits as one part, and the
    reference's gradients. The inputs, 331, are not a whole number of vectors; one,
    two and three threads cut them into 2, 4 and 4 parts."""
    sizes = (20, 1, 30, 331, 29)
    ref, x, readout = tie_free_net(sizes, "leaky", "subtract", False, 0.3, None)
    expect, expect_grads = grads_of(ref, x, readout)
    net = emulated(ref)
    sparse_paths(1, 1)
    one = walked(monkeypatch, "outputs", net, x, readout, threads=1)
    for threads in (2, 3, 4):
        out, grads, stats = walked(monkeypatch, "outputs", net, x, readout, threads)
        assert stats["input_grad_walk"] == "outputs"
        for name in grads:
            assert torch.equal(grads[name], one[1][name]), (threads, name)
    assert torch.equal(one[0], expect)
    for name, g in one[1].items():
        assert_rel_close(g, expect_grads[name], 1e-4, name)


@pytest.mark.parametrize("second,model,reset", [
    (dict(beta=torch.linspace(0.7, 0.95, OUT)), "leaky", "subtract"),  # a beta per neuron
    (dict(alpha=torch.linspace(0.5, 0.9, OUT)), "synaptic", "subtract"),  # an alpha per neuron
    ({}, "leaky", "zero"),  # the reset gates the carry
    ({}, "synaptic", "zero"),
])
def test_the_output_walk_is_not_taken_where_the_carry_is_not_one_decay(
        monkeypatch, sparse_paths, second, model, reset):
    ref, x, readout = tie_free_net(SIZES, model, reset, False, 0.3, None, second=second)
    expect, expect_grads = grads_of(ref, x, readout)
    net = emulated(ref)
    sparse_paths(1, 1)
    out, grads, stats = walked(monkeypatch, "outputs", net, x, readout)
    assert stats["input_grad_walk"] == "inputs"
    assert torch.equal(out, expect)
    for name, g in grads.items():
        assert_rel_close(g, expect_grads[name], 1e-4, name)


def test_auto_takes_the_walk_of_fewer_row_elements(monkeypatch, sparse_paths):
    """By default the output entries are walked where they times the inputs (plus a row
    per (step, sample) for the scaling and the gather) are below 0.7 of the input
    entries times the outputs (the input walk shares its row reads between the samples
    that list an id)."""
    monkeypatch.delenv("SNN_IPU_INPUT_GRAD", raising=False)
    sparse_paths(1, 1)
    n_in = n_out = 64

    def walk_of(window, activity):
        torch.manual_seed(0)
        first = LIFLayer(50, n_in, grad_window=0.3, backend="emulator")
        second = LIFLayer(n_in, n_out, grad_window=window, backend="emulator")
        with torch.no_grad():
            first.weight.mul_(4.0)
        h = first(conftest.binary((T, B, 50), activity, 0))
        out = second(h)
        out.to_dense().sum().backward()
        in_entries, out_entries = int(h.counts[..., 1].sum()), int(out.counts[..., 1].sum())
        return second.stats["input_grad_walk"], in_entries, out_entries

    ratios = {}
    for window, activity in [(0.02, 0.3), (0.3, 0.3), (0.45, 0.3), (0.6, 0.1), (None, 0.3)]:
        walk, in_entries, out_entries = walk_of(window, activity)
        ratio = (out_entries + T * B) * n_in / (in_entries * n_out)
        assert walk == ("outputs" if ratio < 0.7 else "inputs"), (window, ratio)
        ratios[walk] = ratios.get(walk, []) + [ratio]
    # both walks taken, and one case between 0.7 and 1 (fewer elements, still inputs)
    assert ratios.keys() == {"inputs", "outputs"}
    assert any(0.7 < r < 1.0 for r in ratios["inputs"])


def test_an_unknown_setting_is_named(monkeypatch, sparse_paths):
    sparse_paths(1, 1)
    layer = SynapticLayer(IN, HID, grad_window=0.3, backend="emulator")  # (either walk)
    monkeypatch.setenv("SNN_IPU_INPUT_GRAD", "both")
    x = conftest.binary((T, B, IN), 0.05, 0).requires_grad_()
    with pytest.raises(ValueError, match="SNN_IPU_INPUT_GRAD is 'both'; expected auto, "
                                         "inputs or outputs"):
        layer(x).to_dense().sum().backward()
