"""The list surface and the layers' attributes: a list, a carried state or a setting a
user got wrong gives the same clear error on every backend, never another answer on
each, and never becomes a valid wrong list. Each case once went wrong (issue 30)."""

import re

import numpy as np
import pytest
import torch
from conftest import binary

from snn_ipu import LayerState, LIFLayer, ReadoutLayer, SparseSpikes, SpikeDropout, losses
from snn_ipu.backends import emulator
from snn_ipu.data.augment import SpikeAugment
from snn_ipu.losses import ce_count_loss, ce_membrane_loss
from snn_ipu.overflow import SpikeOverflowError

T, B, IN, OUT = 12, 3, 30, 20


def layer_on(backend, seed=0, **kw):
    torch.manual_seed(seed)
    layer = LIFLayer(IN, OUT, backend=backend, **kw)
    with torch.no_grad():
        layer.weight.mul_(4.0)
    return layer


def spikes(seed=1, p=0.3):
    return SparseSpikes.from_dense(binary((T, B, IN), p, seed))


# -- replaced values: one rule on every backend ----------------------------------------

@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_replaced_values_are_checked_again_on_every_backend(backend):
    """A mask written into ``values`` (dropout) was ignored by the emulator and used by
    the reference (813 vs 12 output spikes): the list was marked checked at
    construction. Replacing values clears that, and every backend refuses the list."""
    x = spikes()
    assert x.values_checked
    x.values = x.values * (torch.rand(x.values.shape) > 0.5)
    assert not x.values_checked
    with pytest.raises(ValueError, match=r"\(a spike\): spikes must have value 1.*SpikeDropout"):
        layer_on(backend)(x)
    ids = x.ids.clone()
    x.ids = ids  # any replacement, the same list again: checked again, and passes
    x.values = SparseSpikes(x.ids, x.counts, IN).values
    layer_on(backend)(x)
    assert x.values_checked


# -- validate=False lists: every backend refuses them alike ----------------------------

def broken(kind):
    x = spikes()
    ids, counts = x.ids.clone(), x.counts.clone()
    t, b = 2, 1
    c0 = int(counts[t, b, 0])
    assert c0 >= 2
    if kind == "count above K":
        counts[t, b] = torch.tensor([c0, x.capacity + 3])
    elif kind == "negative count":
        counts[t, b, 0] = -1
    elif kind == "c0 > c1":
        counts[t, b] = torch.tensor([c0, c0 - 1])
    elif kind == "duplicate id":
        ids[t, b, 1] = ids[t, b, 0]
    return SparseSpikes(ids, counts, IN, validate=False)


@pytest.mark.parametrize("kind, match", [
    ("count above K", "exceed the capacity"),
    ("negative count", "0 <= counts"),
    ("c0 > c1", "0 <= counts"),
    ("duplicate id", "duplicate neuron ids at t=2, b=1"),
])
@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_invalid_unchecked_lists_are_refused_by_every_backend(kind, match, backend):
    """The reference took counts above K, negative counts and c0 > c1 (the emulator
    refused them); a duplicate id passed both and counted twice."""
    layer = layer_on(backend)
    with pytest.raises(ValueError, match=re.escape(f"{layer.name}: input list: ") + f".*{match}"):
        layer(broken(kind))


@pytest.mark.parametrize("edit", ["x.counts.data[2, 1, 1] = x.capacity + 3",
                                  "x.counts.data[2, 1, 0] = -1"])
def test_counts_edited_in_place_after_the_check_are_refused_by_the_reference_too(edit):
    """An in-place edit after the check is not seen by the flag, but every call scans the
    counts and ids: the emulator natively, the reference in torch, with one answer."""
    for backend in ("emulator", "reference"):
        x = spikes()
        layer_on(backend)(x)
        exec(edit)
        with pytest.raises(ValueError, match="counts"):
            layer_on(backend)(x)


def test_2d_ids_of_an_unchecked_list_are_named():
    x = spikes()
    bad = SparseSpikes(x.ids[0], x.counts[0], IN, x.values[0], validate=False)
    with pytest.raises(ValueError,
                       match=r"input list: SparseSpikes.ids must have shape \[T, B, K\]"):
        layer_on("reference")(bad)


def test_augment_refuses_an_out_of_range_id_instead_of_moving_it_into_another_sample():
    """Augment keys its entries by (t, b, neuron): id IN + 3 of sample 0 became neuron
    3 of sample 1, a valid list that passed every check."""
    x = spikes()
    ids = x.ids.clone()
    ids[0, 0, 0] = IN + 3
    bad = SparseSpikes(ids, x.counts, IN, validate=False)
    with pytest.raises(ValueError, match="out of range"):
        SpikeAugment(jitter=1)(bad, list(range(B)), seed=0, epoch=0)
    out = SpikeAugment(jitter=1)(x, list(range(B)), seed=0, epoch=0)
    assert out.values_checked and int(out.counts[..., 0].sum()) <= int(x.counts[..., 0].sum())


# -- spike_counts keeps its own copy of the lists ---------------------------------------

def test_spike_counts_gradient_is_the_forward_lists_after_an_in_range_edit():
    """ce_count_loss saved the user's ids for backward: an in-range edit between the
    loss and backward changed dL/dW (by 100%). Held against the same step unedited."""
    y = torch.tensor([0, 3, 7])

    def grad(edit):
        layer = layer_on("emulator")
        out = layer(spikes())
        loss = ce_count_loss(out, y)
        if edit:
            out.ids.data.fill_(5)  # in range: every entry neuron 5
        loss.backward()
        return layer.weight.grad

    expected = grad(False)
    assert float(expected.abs().sum()) > 0
    assert torch.equal(grad(True), expected)


# -- carried state and attributes --------------------------------------------------------

@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("field, value, match", [
    ("spikes", -1.0, "spikes must be 0 or 1, found -1"),
    ("membrane", float("nan"), "membrane contains NaN"),
])
def test_carried_state_values_are_checked_on_every_backend(backend, field, value, match):
    """Spikes of -1 gave each backend another answer; a NaN membrane silently stopped
    the layer."""
    layer = layer_on(backend)
    layer.carry_state = True
    layer(spikes())
    getattr(layer.state, field)[0, 0] = value
    with pytest.raises(ValueError, match=re.escape(f"{layer.name}: the carried state's ") + match):
        layer(spikes(2))


def test_bad_attribute_values_are_refused_where_they_are_set():
    layer = layer_on("emulator")
    with pytest.raises(TypeError, match="carry_state must be True or False, got 'no'"):
        layer.carry_state = "no"
    with pytest.raises(TypeError, match="record_membrane must be True or False"):
        layer.record_membrane = 1
    with pytest.raises(TypeError, match="state's membrane must be a float tensor, got None"):
        layer.state = (None, None, torch.zeros(B, OUT))
    with pytest.raises(TypeError, match="state must be None or a LayerState"):
        layer.state = torch.zeros(B, OUT)
    layer.state = LayerState(torch.zeros(B, OUT), None, torch.zeros(B, OUT))
    layer.carry_state = True
    layer(spikes())  # a well-formed state runs


@pytest.mark.parametrize("name, ours", [("spike_grad", "surrogate="),
                                        ("reset_mechanism", "reset="),
                                        ("init_hidden", "carry_state")])
def test_snntorch_keywords_name_ours(name, ours):
    with pytest.raises(TypeError, match=f"LIFLayer\\(\\) got {name}=, snnTorch's name; "
                                        f"snn_ipu's is .*{ours}"):
        LIFLayer(4, 3, **{name: True})
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        ReadoutLayer(4, 3, colour=1)


# -- autocast ---------------------------------------------------------------------------

def test_bfloat16_autocast_runs_dense_inputs_in_float32(monkeypatch):
    """The emulator's GEMM paths (forced here; a dense input on a wide layer takes them),
    whose bfloat16 results under autocast numpy refused: TypeError: unsupported
    ScalarType BFloat16."""
    monkeypatch.setattr(emulator, "forward_dense_fraction", lambda n_out: 0.0)
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (0.0, 0.0))
    x = binary((T, B, IN), 0.8, 3).requires_grad_()
    expected_layer = layer_on("emulator")
    expected = expected_layer(x)
    expected.values.sum().backward()
    layer = layer_on("emulator")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
        assert layer.stats["path"] == "dense"
        out.values.sum().backward()
        assert layer.stats["input_grad_path"] == layer.stats["weight_grad_path"] == "dense"
    assert torch.equal(out.to_dense(), expected.to_dense())
    assert torch.equal(layer.weight.grad, expected_layer.weight.grad)


@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("backward_inside", [False, True])
@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_every_backend_ignores_autocast_alike(backend, backward_inside, recurrent):
    """The emulator computes in float32 whatever autocast says; the reference, the
    ground truth it is tested against, must too, or under bfloat16 the two differ (dL/db
    0.14 at a scale of 4.35) and a bfloat16 current can move a spike. The forward pass
    under autocast, the backward outside it (as PyTorch recommends) or inside it, where
    autograd's own matmul gradients ran in bfloat16 on the reference (dL/dW 0.02% off)."""
    x = binary((T, B, IN), 0.4, 3)
    probe = torch.randn(T, B, OUT, generator=torch.Generator().manual_seed(4))
    grads = []
    for autocast in (False, True):
        layer = layer_on(backend, recurrent=recurrent)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = layer(x)
            loss = (out.to_dense() * probe).sum()
            if backward_inside:
                loss.backward()
        if not backward_inside:
            loss.backward()
        grads.append((out.to_dense().detach(), layer.weight.grad, layer.bias.grad)
                     + ((layer.rec_weight.grad,) if recurrent else ()))
    for plain, cast in zip(*grads):
        assert torch.equal(cast, plain)


# -- the planner's capacity is not the user's ---------------------------------------------

def test_overflow_of_the_planners_capacity_says_so():
    layer = layer_on("ipu_graph", grad_window=0.0)
    assert layer.max_spikes is None
    x = SparseSpikes.from_dense(binary((4, 2, IN), 0.9, 4))
    with torch.no_grad(), pytest.raises(SpikeOverflowError) as info:
        for _ in range(3):
            with torch.no_grad():
                layer.weight.mul_(4.0)
            layer(x)
    message = str(info.value)
    assert "the planner's estimated capacity" in message and "max_spikes is None" in message
    assert "Set the layer's max_spikes (at least" in message


# -- what snnTorch code reaches for ------------------------------------------------------

def test_tensor_conveniences_and_pointers_to_to_dense():
    x = spikes()
    dense = x.to_dense()
    assert x.shape == dense.shape and x.size(1) == B and x.dim() == 3
    assert torch.equal(x.sum(0), dense.sum(0)) and torch.equal(x.sum(1), dense.sum(1))
    assert float(x.sum()) == float(dense.sum())
    with pytest.raises(AttributeError, match=r"no \.mean: .*to_dense\(\)"):
        x.mean()
    with pytest.raises(TypeError, match=r"to_dense\(\)\[\.\.\.\]"):
        x[0]


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_spike_dropout_drops_spikes_with_dropouts_gradient(backend):
    torch.manual_seed(5)
    dense = binary((T, B, IN), 0.4, 5).requires_grad_()
    x = SparseSpikes.from_dense(dense, eligible=binary((T, B, IN), 0.2, 6).bool())
    drop = SpikeDropout(0.5)
    out = drop(x)
    kept, before = out.to_dense().detach(), x.to_dense().detach()
    assert torch.all(kept <= before)  # only spikes, and only the input's
    assert 0.35 < float(kept.sum() / before.sum()) < 0.65
    # eligible-only entries are units too: dropped with the same probability
    eligible_in = int((x.counts[..., 1] - x.counts[..., 0]).sum())
    eligible_out = int((out.counts[..., 1] - out.counts[..., 0]).sum())
    assert eligible_in > 100 and 0.35 < eligible_out / eligible_in < 0.65
    out.to_dense().sum().backward()
    # dL/d(value): 1 at a kept unit, 0 at a dropped one, as nn.Dropout's (unscaled) mask
    # on the dense spikes: at spikes and at eligible-only entries alike
    assert torch.equal(dense.grad * before, kept)
    listed_in = SparseSpikes._made(x.ids, x.counts, IN, torch.ones_like(x.values)).to_dense()
    listed_out = SparseSpikes._made(out.ids, out.counts, IN,
                                    torch.ones_like(out.values)).to_dense()
    assert torch.equal(dense.grad * listed_in, listed_out)
    layer = layer_on(backend)
    layer(out)  # a list every backend takes
    drop.eval()
    assert drop(x) is x


def test_spike_dropout_p_is_checked_when_set():
    """p was checked in the constructor alone: drop.p = 1.5 (a schedule gone wrong)
    dropped every spike, drop.p = -0.2 none, without a word."""
    drop = SpikeDropout(0.5)
    for bad in (1.5, 1.0, -0.2, float("nan")):
        with pytest.raises(ValueError, match=r"SpikeDropout: p must lie in \[0, 1\)"):
            drop.p = bad
    with pytest.raises(TypeError, match="p must be a number"):
        drop.p = "0.1"
    assert drop.p == 0.5
    drop.p = np.float32(0.25)
    assert drop.p == 0.25 and type(drop.p) is float and "p=0.25" in repr(drop)
    x = binary((T, B, IN), 0.4, 7)
    torch.manual_seed(0)
    kept = drop(x)
    torch.manual_seed(0)
    assert torch.equal(kept, x * (torch.rand(x.shape) >= 0.25))  # nn.Dropout's mask, unscaled


def test_membrane_losses_point_to_readout_layer():
    layer = layer_on("emulator")
    layer.record_membrane = True
    out = layer(spikes())
    y = torch.tensor([0, 1, 2])
    with pytest.raises(TypeError, match="ReadoutLayer"):
        ce_membrane_loss(out, y)
    with pytest.raises(ValueError, match="last_membrane .* ReadoutLayer"):
        ce_membrane_loss(layer.last_membrane, y)
    with pytest.raises(ValueError, match="ReadoutLayer"):
        losses.mse_membrane_loss(layer.last_membrane, y)
    with torch.no_grad():  # monitoring
        ce_membrane_loss(layer.last_membrane, y)
