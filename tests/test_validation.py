"""Every input a user can get wrong raises a clear exception naming the problem."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import binary

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer, surrogate


def spikes_3x2x5():
    return SparseSpikes.from_dense(binary((3, 2, 5), 0.5, 0))


def test_non_binary_dense_spikes(backend):
    layer = LIFLayer(5, 4, backend=backend)
    with pytest.raises(ValueError, match="binary"):
        layer(torch.full((3, 2, 5), 0.5))
    with pytest.raises(ValueError, match=r"found 2.0: .*event counts become spikes with \(x > 0\)"):
        layer(torch.full((3, 2, 5), 2.0))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_inf_in_inputs(backend, bad):
    x = binary((3, 2, 5), 0.5, 0)
    x[1, 0, 2] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        LIFLayer(5, 4, backend=backend)(x)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("param", ["weight", "bias"])
def test_nan_in_weights(backend, param, bad):
    layer = LIFLayer(5, 4, backend=backend)
    with torch.no_grad():
        getattr(layer, param).view(-1)[0] = bad
    with pytest.raises(ValueError, match=f"{param} contains NaN or inf"):
        layer(binary((3, 2, 5), 0.5, 0))


@pytest.mark.parametrize("edit", ["values masked", "counts moved"])
def test_a_checked_list_edited_in_place_is_checked_again(backend, edit):
    """A layer marks the list it checked; an in-place edit afterwards (a torch op, which
    moves the tensor's version counter) must make the next layer check it again, and
    refuse it as it refuses the same tensors in a list never checked, not read its
    spikes as 1s (the emulator) or scale by the values (the reference)."""
    x = binary((4, 3, 6), 0.5, 1)
    xs = SparseSpikes.from_dense(x, eligible=torch.ones_like(x, dtype=torch.bool))
    layer = LIFLayer(6, 4, backend=backend)
    layer(xs)
    assert xs.values_checked
    if edit == "values masked":
        xs.values.mul_((torch.arange(xs.values.numel()) % 2).reshape(xs.values.shape))
    else:  # the first eligible-only entry of each row becomes a "spike" of value 0
        xs.counts[..., 0] += (xs.counts[..., 0] < xs.counts[..., 1]).int()
    assert not xs.values_checked
    with pytest.raises(ValueError, match="spikes must have value 1"):
        layer(xs)
    with pytest.raises(ValueError, match="values must be 1 at spike entries"):
        SparseSpikes(xs.ids, xs.counts, 6, xs.values)


def test_a_checked_list_stays_checked_through_pickling():
    """A DataLoader worker's lists reach the main process pickled (and a deep copy goes
    the same way): the tensors come back under new version counters, and the check's
    mark with them, so a layer does not check every batch again; an unchecked list stays
    unchecked."""
    import copy
    import pickle

    x = SparseSpikes.from_dense(binary((4, 3, 6), 0.5, 1))
    unchecked = SparseSpikes(x.ids, x.counts, 6, x.values, validate=False)
    for copied in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert copied.values_checked and torch.equal(copied.ids, x.ids)
        copied.values.mul_(0)
        assert not copied.values_checked
    assert not pickle.loads(pickle.dumps(unchecked)).values_checked


def test_a_list_made_in_inference_mode_stays_checked(backend):
    """Tensors made under torch.inference_mode have no version counter: such a list is
    checked once, as before, and runs."""
    layer = LIFLayer(6, 4, backend=backend)
    with torch.inference_mode():
        xs = SparseSpikes.from_dense(binary((4, 3, 6), 0.5, 1))
        assert xs.values_checked
        out = layer(xs)
    assert xs.values_checked and out.values_checked


def test_huge_finite_weights_are_not_reported_as_inf(backend):
    # Their sum overflows to inf; the finiteness check must not mistake that for inf.
    layer = LIFLayer(5, 4, backend=backend)
    with torch.no_grad():
        layer.weight.fill_(3e38)
    layer(binary((3, 2, 5), 0.5, 0))


def test_wrong_rank_and_features(backend):
    layer = LIFLayer(5, 4, backend=backend)
    with pytest.raises(ValueError, match=r"\[T, B, 5\]"):
        layer(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="in_features=5"):
        layer(torch.zeros(3, 2, 6))
    with pytest.raises(ValueError, match="in_features=5"):
        layer(SparseSpikes.from_dense(torch.zeros(3, 2, 7)))
    with pytest.raises(TypeError, match="SparseSpikes or a torch.Tensor"):
        layer([[0, 1]])


@pytest.mark.parametrize("name, shape, message", [
    ("weight", (4, 6), r"weight has shape \[4, 6\], this layer needs \[4, 5\]"),
    ("weight", (5, 4), r"needs \[4, 5\] = \[out_features, in_features\] \(transposed"),
    ("bias", (3,), r"bias has shape \[3\], this layer needs \[4\]"),
    ("rec_weight", (4, 5), r"rec_weight has shape \[4, 5\], this layer needs \[4, 4\]"),
    ("beta", (5,), r"beta has shape \[5\], this layer needs \[4\] \(out_features\) or a scalar"),
    ("alpha", (2,), r"alpha has shape \[2\]"),
])
def test_parameters_replaced_with_another_shape_are_refused(backend, name, shape, message):
    """``param.data = ...`` (porting weights) bypasses nn.Module: a wider weight was
    silently cut to in_features by the emulator."""
    layer = SynapticLayer(5, 4, recurrent=True, learn_beta=True, learn_alpha=True,
                          beta=torch.full((4,), 0.9), backend=backend)
    getattr(layer, name).data = torch.rand(shape)
    with pytest.raises(ValueError, match=message):
        layer(binary((3, 2, 5), 0.5, 0))
    readout = ReadoutLayer(5, 3, backend=backend)
    readout.weight.data = torch.rand(3, 7)
    with pytest.raises(ValueError, match=r"weight has shape \[3, 7\]"):
        readout(binary((3, 2, 5), 0.5, 0))


def test_negative_and_out_of_range_ids():
    s = spikes_3x2x5()
    ids = s.ids.clone()
    ids[0, 0, 0] = -1
    with pytest.raises(ValueError, match="out of range"):
        SparseSpikes(ids, s.counts.clone(), 5)
    ids[0, 0, 0] = 5
    with pytest.raises(ValueError, match=r"id 5 not in \[0, 5\)"):
        SparseSpikes(ids, s.counts.clone(), 5)


def test_out_of_range_padding_ids_are_named():
    """Padding past counts[..., 1] must hold valid ids too (to_dense and the dense
    paths index with every id): -1 padding is refused at construction, by name."""
    s = SparseSpikes.from_dense(binary((3, 2, 5), 0.3, 1), max_spikes=5)
    t, b = (int(i) for i in (s.counts[..., 1] < 5).nonzero()[0])
    k = int(s.counts[t, b, 1])
    ids = s.ids.clone()
    ids[t, b, k:] = -1
    with pytest.raises(ValueError, match=rf"at \[t={t}, b={b}, k={k}\]: id -1 not in "
                                         r"\[0, 5\) \(padding past counts"):
        SparseSpikes(ids, s.counts.clone(), 5)


def test_counts_above_capacity_and_inconsistent():
    s = spikes_3x2x5()
    counts = s.counts.clone()
    counts[1, 1] = s.capacity + 1
    with pytest.raises(ValueError, match="exceed the capacity"):
        SparseSpikes(s.ids, counts, 5)
    counts = s.counts.clone()
    counts[0, 0, 0] = counts[0, 0, 1] + 1
    with pytest.raises(ValueError, match="counts"):
        SparseSpikes(s.ids, counts, 5)


def test_duplicate_ids_and_bad_dtypes():
    ids = torch.tensor([[[1, 1]]], dtype=torch.int32)
    counts = torch.tensor([[[2, 2]]], dtype=torch.int32)
    with pytest.raises(ValueError, match="duplicate"):
        SparseSpikes(ids, counts, 4)
    with pytest.raises(TypeError, match="int32"):
        SparseSpikes(ids.long(), counts, 4)
    with pytest.raises(ValueError, match=r"\[T, B, 2\]"):
        SparseSpikes(ids, counts[..., :1], 4)


def test_unknown_names():
    with pytest.raises(ValueError, match="unknown surrogate 'arctanh'"):
        LIFLayer(5, 4, surrogate="arctanh")
    with pytest.raises(TypeError, match="Python callbacks"):
        LIFLayer(5, 4, surrogate=lambda x: x)
    with pytest.raises(ValueError, match="unknown reset mechanism 'soft'"):
        LIFLayer(5, 4, reset="soft")
    with pytest.raises(ValueError, match="unknown backend"):
        LIFLayer(5, 4, backend="gpu")
    with pytest.raises(ValueError, match="unknown overflow policy"):
        LIFLayer(5, 4, overflow="clip")
    with pytest.raises(ValueError, match="unknown plan_target 'ipu3'"):
        ReadoutLayer(5, 4, plan_target="ipu3")


@pytest.mark.parametrize("beta", [-0.1, 1.5, math.nan, [0.5, 2.0, 0.5, 0.5]])
def test_beta_outside_unit_interval(beta):
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\]"):
        LIFLayer(5, 4, beta=torch.tensor(beta) if isinstance(beta, list) else beta)
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\]"):
        ReadoutLayer(5, 4, beta=torch.tensor(beta) if isinstance(beta, list) else beta)


def test_other_parameters():
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]"):
        SynapticLayer(5, 4, alpha=1.2)
    with pytest.raises(ValueError, match="threshold must be finite and > 0"):
        LIFLayer(5, 4, threshold=0.0)
    with pytest.raises(ValueError, match="beta must be a scalar or have shape"):
        LIFLayer(5, 4, beta=torch.full((3,), 0.5))
    with pytest.raises(ValueError, match="grad_window"):
        LIFLayer(5, 4, grad_window=-0.1)
    with pytest.raises(ValueError, match="max_spikes"):
        LIFLayer(5, 4, max_spikes=0)
    with pytest.raises(ValueError, match="in_features"):
        LIFLayer(0, 4)
    with pytest.raises(ValueError, match="surrogate parameter alpha"):
        surrogate.ATan(alpha=-1.0)


def test_bool_and_fractional_sizes():
    s = spikes_3x2x5()
    with pytest.raises(TypeError, match="num_neurons must be an int, got 5.7"):
        SparseSpikes(s.ids, s.counts, 5.7)
    with pytest.raises(TypeError, match="num_neurons must be an int, got True"):
        SparseSpikes(s.ids, s.counts, True)
    with pytest.raises(ValueError, match="grad_window must be None or a number"):
        LIFLayer(5, 4, grad_window=True)
    with pytest.raises(ValueError, match="max_spikes must be a positive integer"):
        SparseSpikes.from_dense(binary((3, 2, 5), 0.5, 0), max_spikes=True)


@pytest.mark.filterwarnings("ignore:SparseSpikes.from_dense. spike list capacity")
@pytest.mark.parametrize("value", [3, np.int64(3), 3.0, np.float64(3.0)])
def test_capacities_and_sizes_from_numpy_are_taken_alike(value):
    """A capacity computed with numpy (np.max of counts, a percentile) is taken by a
    layer as by from_dense, and kept as a Python int; sizes take numpy ints."""
    layer = LIFLayer(5, 4, max_spikes=value)
    assert type(layer.max_spikes) is int and layer.max_spikes == 3
    assert SparseSpikes.from_dense(binary((3, 2, 5), 0.5, 0), max_spikes=value,
                                   overflow="drop").capacity == 3
    if not isinstance(value, float):
        sized = LIFLayer(value, value)
        assert (type(sized.in_features), sized.in_features, sized.weight.shape) == (
            int, 3, (3, 3))
    else:
        with pytest.raises(ValueError, match="in_features must be a positive integer"):
            LIFLayer(value, 4)


@pytest.mark.parametrize("shape", [(0, 2, 5), (3, 0, 5)])
def test_no_timesteps_or_no_samples(backend, shape):
    layer = LIFLayer(5, 4, backend=backend, name="hidden")
    for x in (torch.zeros(shape), SparseSpikes.from_dense(torch.zeros(shape))):
        with pytest.raises(ValueError, match=rf"hidden: input has T={shape[0]} timesteps and "
                                             rf"B={shape[1]} samples"):
            layer(x)


# Edge values of the fixed constants, per neuron, edited after construction: the layer's
# one-pass check on the CPU and its checks one by one (the messages) must draw the same
# line. float32 neighbours of the bounds: 1 + 2**-23 is the next float above 1.
@pytest.mark.parametrize("name, value, accepted", [
    ("beta", -0.0, True), ("beta", 1.0, True), ("beta", 1.0 + 2.0 ** -23, False),
    ("beta", -(2.0 ** -149), False), ("beta", math.inf, False),
    ("alpha", 0.0, True), ("alpha", 1.0 + 2.0 ** -23, False), ("alpha", math.nan, False),
    ("threshold", 2.0 ** -149, True), ("threshold", 3.0e38, True), ("threshold", -0.0, False),
    ("threshold", 0.0, False), ("threshold", -(2.0 ** -149), False),
    ("threshold", math.nan, False), ("threshold", math.inf, False),
])
def test_edge_values_of_fixed_constants(name, value, accepted):
    layer = SynapticLayer(5, 4, name="hidden", beta=torch.full((4,), 0.5),
                          alpha=torch.full((4,), 0.5), threshold=torch.ones(4))
    getattr(layer, name).data[2] = value
    x = SparseSpikes.from_dense(torch.ones(2, 3, 5))
    if accepted:
        layer(x)
    else:
        bound = r"must lie in \[0, 1\]" if name != "threshold" else "must be finite and > 0"
        with pytest.raises(ValueError, match=f"hidden: {name} {bound}"):
            layer(x)


@pytest.mark.parametrize("name, value, message", [
    ("beta", math.nan, r"beta must lie in \[0, 1\]"), ("beta", 1.5, r"beta must lie in \[0, 1\]"),
    ("threshold", 0.0, "threshold must be finite and > 0"),
    ("threshold", math.inf, "threshold must be finite and > 0"),
])
def test_fixed_constants_loaded_from_a_state_dict_are_checked(name, value, message):
    layer = LIFLayer(5, 4, name="hidden")
    state = layer.state_dict()
    state[name] = torch.tensor(value)
    with pytest.raises(ValueError, match=f"hidden: loaded {message}"):
        layer.load_state_dict(state)
    state = SynapticLayer(5, 4).state_dict()
    state["alpha"] = torch.tensor(-0.5)
    with pytest.raises(ValueError, match=r"loaded alpha must lie in \[0, 1\]"):
        SynapticLayer(5, 4).load_state_dict(state)


def test_float64_weights_on_the_emulator_are_refused_by_name():
    layer = LIFLayer(5, 4, backend="emulator", name="hidden").double()
    with pytest.raises(TypeError, match="hidden: the emulator backend takes float32 or "
                                        "float16 weights, got torch.float64"):
        layer(binary((3, 2, 5), 0.5, 0))
    layer.backend = "reference"  # which runs it
    assert layer(binary((3, 2, 5), 0.5, 0)).values.dtype == torch.float64


def test_bfloat16_weights_on_the_emulator_name_the_conversion():
    layer = LIFLayer(5, 4, backend="emulator", name="hidden").bfloat16()
    with pytest.raises(TypeError, match=r"got torch.bfloat16 \(convert the model with "
                                        r"\.float\(\) or \.half\(\); the reference backend "
                                        "runs bfloat16"):
        layer(binary((3, 2, 5), 0.5, 0))
    layer.backend = "reference"  # as the message says
    assert layer(binary((3, 2, 5), 0.5, 0)).to_dense().shape == (3, 2, 4)


@pytest.mark.parametrize("cls", [LIFLayer, ReadoutLayer])
def test_second_order_gradients_on_the_emulator_are_refused(cls):
    layer = cls(5, 4, backend="emulator", name="hidden")
    x = binary((3, 2, 5), 0.5, 0).requires_grad_()
    out = layer(x)
    out = out.values if isinstance(out, SparseSpikes) else out
    with pytest.raises(RuntimeError, match="hidden: the emulator backend has first-order "
                                           "gradients only; create_graph=True"):
        torch.autograd.grad(out.sum(), x, create_graph=True)
    (g,) = torch.autograd.grad(layer(x).values.sum() if cls is LIFLayer
                               else layer(x).sum(), x)  # first order: fine
    assert g.shape == x.shape


def test_from_dense_drop_warning_does_not_promise_a_layer():
    with pytest.warns(RuntimeWarning) as record:
        SparseSpikes.from_dense(torch.ones(3, 2, 5), max_spikes=2, overflow="drop")
    (w,) = record
    assert "SparseSpikes.from_dense" in str(w.message) and "layer" not in str(w.message)


@pytest.mark.parametrize("setting, value, message", [
    ("backend", "emulater", "unknown backend 'emulater'"),
    ("reset", "Zero", "unknown reset mechanism 'Zero'"),
    ("grad_window", -1.0, "grad_window must be None or a finite number >= 0"),
    ("grad_window", True, "grad_window must be None or a number >= 0"),
    ("max_spikes", 2.5, "max_spikes must be a positive integer"),
    ("overflow", "clip", "overflow"),
    ("plan_target", "ipu3", "unknown plan_target 'ipu3'"),
])
def test_settings_changed_on_a_layer_are_checked(setting, value, message):
    """A notebook's `layer.reset = ...` gets the constructor's checks, not a KeyError later."""
    layer = LIFLayer(4, 3)
    with pytest.raises(ValueError, match=message):
        setattr(layer, setting, value)


def test_settings_changed_on_a_layer_take_effect():
    layer = LIFLayer(4, 3)
    layer.surrogate = "fast_sigmoid"
    layer.grad_window = 1
    layer.backend = "reference"
    assert layer.surrogate == surrogate.FastSigmoid() and layer.grad_window == 1.0
    assert layer.config().surrogate == surrogate.FastSigmoid()
    with pytest.raises(TypeError, match="Python callbacks"):
        layer.surrogate = lambda x: x
    readout = ReadoutLayer(4, 2)
    with pytest.raises(ValueError, match="unknown backend"):
        readout.backend = "gpu"


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_a_learned_threshold_that_reached_zero_is_refused(backend):
    layer = LIFLayer(4, 3, learn_threshold=True, backend=backend)
    with torch.no_grad():
        layer.threshold.fill_(-0.2)
    with pytest.raises(ValueError, match=r"learned threshold reached -0.2\d* <= 0"):
        layer(binary((5, 2, 4), 0.3, 0))


def test_inf_in_half_weights_points_at_the_optimizer():
    layer = LIFLayer(4, 3, dtype=torch.float16, backend="reference")
    with torch.no_grad():
        layer.weight[0, 0] = math.inf
    with pytest.raises(ValueError,
                       match="weight contains NaN or inf .float16 weights: torch") as err:
        layer(binary((5, 2, 4), 0.3, 0))
    # the section it points to exists where it says (the README has none)
    assert "the Precision section of docs/guide.md" in str(err.value)
    guide = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
    assert "\n## Precision\n" in guide.read_text()


def test_a_windowed_layer_that_passes_no_gradient_warns_once(backend):
    """Too-small weights: nothing spikes or comes within the window, so the weights'
    gradient is exactly zero; the layer says so once, and not where it cannot matter."""
    x = binary((6, 3, 5), 0.5, 0)
    layer = LIFLayer(5, 4, grad_window=0.1, backend=backend, name="hidden")
    with torch.no_grad():
        layer.weight.fill_(0.01)
        layer.bias.zero_()
    with pytest.warns(RuntimeWarning, match="hidden: no neuron spiked or came within "
                                            "grad_window=0.1"):
        out = layer(x)
    out.values.sum().backward()
    assert float(layer.weight.grad.abs().max()) == 0.0  # what the warning is about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x)  # once per layer
        quiet = LIFLayer(5, 4, grad_window=0.1, backend=backend)
        with torch.no_grad():
            quiet.weight.fill_(0.01)
            quiet.bias.zero_()
            quiet(x)  # no gradient recorded
        exact = LIFLayer(5, 4, grad_window=None, backend=backend)
        with torch.no_grad():
            exact.weight.fill_(0.01)
            exact.bias.zero_()
        exact(x)  # every neuron listed


def test_parameter_order_is_kept_for_saved_optimizer_states():
    """An optimizer's state dict matches parameters by position: a recurrent layer's
    order is the one of version 0.1.0 (rec_bias, new, next to rec_weight)."""
    layer = LIFLayer(4, 3, recurrent=True, rec_bias=True, learn_beta=True,
                     learn_threshold=True)
    assert [n for n, _ in layer.named_parameters()] == [
        "weight", "bias", "rec_weight", "rec_bias", "beta", "threshold"]
    synaptic = SynapticLayer(4, 3, recurrent=True, learn_alpha=True, learn_beta=True)
    assert [n for n, _ in synaptic.named_parameters()][:4] == [
        "weight", "bias", "rec_weight", "beta"]
