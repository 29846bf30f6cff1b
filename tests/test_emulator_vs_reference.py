"""The emulator backend (codelets on the host executor) against the dense reference.

Both run the same layers with the same weights, under the host tile plan and
the ipu2 plan (many tiles, few neurons each): spikes must be identical,
membranes within 1e-6 of their largest magnitude (a few float32 steps: the two sum a
step's inputs in different orders, and contract multiply-adds differently on CPUs
with and without FMA), gradients within 1e-4 relative.
"""

import copy
import importlib
import re
import warnings

import pytest
import torch
from conftest import (
    CHANGES_BETWEEN_PASSES,
    assert_rel_close,
    binary,
    check_learned_decays_and_threshold,
    check_parameters_changed_between_passes,
    check_readout,
    check_recorded_membrane_edited_before_backward,
    check_without_recorded_membranes,
    tie_free_net,
    two_layer_net,
)
from torch.nn.utils import parametrize

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SpikeOverflowError
from snn_ipu import surrogate as sg
from snn_ipu.backends import dense_paths, emulator
from snn_ipu.spikes import listed_mask

T, B, IN, HID, OUT = 16, 3, 36, 22, 9
SIZES = (T, B, IN, HID, OUT)
SURROGATES = [sg.ATan(2.0), sg.FastSigmoid(5.0), sg.Sigmoid(4.0), sg.Triangle(0.8, 1.0),
              sg.StraightThrough()]


def build(model, reset, recurrent, window, target, surrogate, seed, **kw):
    return two_layer_net(SIZES, model, reset, recurrent, window, surrogate, seed,
                         plan_target=target, **kw)


def run(net, x, readout):
    xg = x.clone().requires_grad_()
    outs = [net[0](xg)]
    outs.append(net[1](outs[0]))
    (outs[1].to_dense() * readout).sum().backward()
    return xg.grad, outs


def emulated(net):
    twin = copy.deepcopy(net)
    for layer in twin:
        layer.backend = "emulator"
    return twin


def tie_free(model, reset, recurrent, window, target, surrogate, **kw):
    return tie_free_net(SIZES, model, reset, recurrent, window, surrogate, plan_target=target,
                        **kw)


def compare(ref_net, emu_net, x, readout):
    gx_ref, ref_outs = run(ref_net, x, readout)
    gx_emu, emu_outs = run(emu_net, x, readout)
    for i, (r, e) in enumerate(zip(ref_outs, emu_outs)):
        assert torch.equal(r.counts, e.counts), f"layer {i} counts"
        assert torch.equal(r.ids, e.ids), f"layer {i} ids"
        assert torch.equal(r.values.detach(), e.values.detach()), f"layer {i} values"
        assert_rel_close(emu_net[i].last_membrane, ref_net[i].last_membrane, 1e-6,
                         f"layer {i} membrane")
    for (name, p_ref), (_, p_emu) in zip(ref_net.named_parameters(), emu_net.named_parameters()):
        assert p_ref.grad is not None and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_emu.grad, p_ref.grad, 1e-4, name)
    assert_rel_close(gx_emu, gx_ref, 1e-4, "input grad")
    check_without_recorded_membranes(ref_net, emu_net, x, readout, ref_outs, gx_ref)
    return ref_outs


@pytest.mark.parametrize("window", [None, 2.0])
def test_dense_input_gradient_of_full_and_padded_lists(window):
    """The backward's dense GEMM path for dL/dx (most input rows listed) against the
    reference: on lists whose rows are all full (exact gradients: nothing to zero) and
    on lists with padding (a window: the padding's entries must come out 0)."""
    net, x, readout = tie_free("leaky", "subtract", False, window, "host", sg.ATan(2.0))
    emu = emulated(net)
    compare(net, emu, x, readout)
    assert emu[1].stats["input_grad_path"] == "dense"
    # dL/dvalues of the hidden list: 0 at its padding, where the GEMM path gathers with
    # the padding's id 0
    hidden = emu[0](x)
    hidden.values.retain_grad()
    (emu[1](hidden).to_dense() * readout).sum().backward()
    padding = ~listed_mask(hidden.counts.long(), hidden.ids.shape[-1], 1)
    assert bool(padding.any()) == (window is not None)
    assert not hidden.values.grad[padding].any()
    assert hidden.values.grad[~padding].any()


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("window", [None, 0.3, 0.0])
def test_host_plan(model, reset, recurrent, window):
    surrogate = SURROGATES[(len(model) + len(reset) + int(recurrent)) % len(SURROGATES)]
    net, x, readout = tie_free(model, reset, recurrent, window, "host", surrogate)
    outs = compare(net, emulated(net), x, readout)
    if window is not None:  # the window really made the lists sparse
        assert int(outs[0].counts[..., 1].sum()) < T * B * HID


@pytest.mark.parametrize("model, reset, recurrent, window", [
    ("leaky", "subtract", False, None), ("leaky", "zero", True, 0.3),
    ("synaptic", "subtract", True, None), ("synaptic", "zero", False, 0.3),
    ("leaky", "none", True, 0.0),
])
def test_ipu2_plan(model, reset, recurrent, window):
    net, x, readout = tie_free(model, reset, recurrent, window, "ipu2", sg.ATan(2.0))
    emu = emulated(net)
    compare(net, emu, x, readout)
    assert emu[0].stats["tiles"] > 1, "the ipu2 plan should spread a layer over tiles"


@pytest.mark.parametrize("model, recurrent, window", [
    ("leaky", False, 0.3), ("synaptic", True, None),
])
def test_dense_backward_paths(monkeypatch, model, recurrent, window):
    """The backward's GEMM paths for dL/dx and dL/dW (forced here at any density)
    against the reference. The widths (IN 36, HID 22, OUT 9) are not multiples of 8:
    the GEMMs write rows padded to 8 floats, which the gather and .grad read past."""
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (0.0, 0.0))
    net, x, readout = tie_free(model, "subtract", recurrent, window, "host", sg.ATan(2.0))
    emu = emulated(net)
    compare(net, emu, x, readout)
    for layer in emu:
        assert layer.stats["input_grad_path"] == layer.stats["weight_grad_path"] == "dense"
    assert all(p.grad.is_contiguous() for p in emu.parameters())


@pytest.mark.parametrize("model, recurrent, window", [
    ("leaky", False, None), ("synaptic", True, 0.3),
])
def test_dense_backward_paths_on_whole_vector_widths(monkeypatch, model, recurrent, window):
    """As test_dense_backward_paths, on widths that are multiples of 8 (HID 24, OUT 16),
    where a layer of one tile keeps its dL/dI in the GEMMs' input itself, each sample
    group at its own rows."""
    monkeypatch.setattr(emulator, "backward_dense_fractions", lambda n_in, n_out: (0.0, 0.0))
    net, x, readout = tie_free_net((T, B, IN, 24, 16), model, "subtract", recurrent, window,
                                   sg.ATan(2.0), plan_target="host")
    emu = emulated(net)
    compare(net, emu, x, readout)
    for layer in emu:
        assert layer.stats["input_grad_path"] == "dense" and layer.stats["tiles"] == 1
    assert max(layer.stats["sample_groups"] for layer in emu) > 1


@pytest.mark.parametrize("model, reset, recurrent, window", [
    ("leaky", "subtract", False, 0.3), ("leaky", "zero", True, None),
    ("synaptic", "subtract", True, 0.3), ("synaptic", "none", False, None),
])
def test_dense_input_forward(monkeypatch, model, reset, recurrent, window):
    """The forward's GEMM path for dense inputs (forced here at any density) gives the
    reference's spikes, membranes and gradients, and the stats say it was taken."""
    monkeypatch.setattr(emulator, "forward_dense_fraction", lambda n_out: 0.0)
    net, x, readout = tie_free(model, reset, recurrent, window, "host", sg.ATan(2.0))
    emu = emulated(net)
    compare(net, emu, x, readout)
    assert [layer.stats["path"] for layer in emu] == ["dense", "dense"]


@pytest.fixture
def dense_paths_on(monkeypatch):
    """dense_paths as imported on a host whose torch reports a given CPU capability;
    the module is imported again for this host afterwards (the emulator's references to
    its functions read its globals)."""
    def on(capability: str):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability,
                            raising=False)
        return importlib.reload(dense_paths)
    yield on
    monkeypatch.undo()
    importlib.reload(dense_paths)


@pytest.mark.parametrize("capability", ["AVX512", "AVX2", "DEFAULT"])
def test_dense_fractions_follow_the_layer_shape(dense_paths_on, capability):
    """The GEMM paths pay a cost per input row and per neuron that the row
    kernels do not: small layers keep the sparse paths to higher densities than large
    ones, a readout of a few neurons keeps its sparse forward and dL/dW at any density,
    and a fully listed input (exact gradients) takes the dense dL/dx at every shape."""
    paths = dense_paths_on(capability)
    fractions = paths.backward_dense_fractions
    for n_in, n_out in ((256, 256), (700, 256), (1466, 1466), (2312, 1466), (128, 10)):
        assert paths.forward_dense_fraction(2 * n_out) < paths.forward_dense_fraction(n_out)
        x, w = fractions(n_in, n_out)
        assert 0 < x < 1 and 0 < w
        assert fractions(2 * n_in, 2 * n_out)[1] < w
        assert fractions(2 * n_in, 2 * n_out)[0] <= x
    assert fractions(1466, 10)[1] > 1 and fractions(256, 20)[1] > 1
    assert paths.forward_dense_fraction(10) > 1 and paths.forward_dense_fraction(20) > 1
    # L's layers on the AVX2 host, where 0.3 (backward) and ~0.5 (forward) were measured
    if capability != "AVX512":
        assert 0.25 <= fractions(2312, 1466)[1] <= 0.35
        assert 0.45 <= paths.forward_dense_fraction(1466) <= 0.55


def test_wider_blas_takes_the_gemm_sooner(dense_paths_on):
    """Where BLAS runs AVX-512 (twice as wide; the row kernels the same) the forward's
    and dL/dW's GEMMs start at lower densities, on every shape."""
    wide = dense_paths_on("AVX512")
    shapes = ((256, 256), (700, 256), (2312, 1466), (128, 128))
    on_wide = [(wide.forward_dense_fraction(o), wide.backward_dense_fractions(i, o)[1])
               for i, o in shapes]
    narrow = dense_paths_on("AVX2")
    for (i, o), (forward, weight) in zip(shapes, on_wide):
        assert forward < narrow.forward_dense_fraction(o)
        assert weight < narrow.backward_dense_fractions(i, o)[1]


def test_dense_paths_are_this_hosts_after_the_reloads():
    """The tests above import dense_paths again for other hosts; its constants (which
    the emulator's references to its functions read) are this host's again after them."""
    assert dense_paths._WIDE == dense_paths._wide_gemm_host()


@pytest.mark.parametrize("n_in, n_out", [(256, 256), (1000, 1000), (256, 20)])
def test_weight_gradient_path_is_chosen_by_density(n_in, n_out):
    """dL/dW takes its GEMM path exactly where the input's spikes pass the layer
    shape's fraction of its input rows (never on the 20-neuron readout)."""
    fraction_w = emulator.backward_dense_fractions(n_in, n_out)[1]
    layer = LIFLayer(n_in, n_out, backend="emulator")
    densities = [d for d in (fraction_w - 0.1, fraction_w + 0.1) if 0 < d < 1] or [0.95]
    for density in densities:
        x = binary((4, 3, n_in), density, 1)
        layer(x).to_dense().sum().backward()
        assert layer.stats["weight_grad_path"] == (
            "dense" if x.mean() > fraction_w else "sparse"), density


@pytest.mark.parametrize("n_in, n_out", [(36, 512), (128, 128), (700, 256)])
def test_dense_input_is_chosen_by_density(n_in, n_out):
    """The forward takes its GEMM path exactly where the input spikes pass the layer
    shape's density; a readout of a few neurons never does (its row adds cost less
    than building the dense input)."""
    fraction = emulator.forward_dense_fraction(n_out)
    assert 0 < fraction < 1
    layer = LIFLayer(n_in, n_out, backend="emulator")
    for density in (max(0.05, fraction - 0.15), min(0.99, fraction + 0.15)):
        x = binary((T, B, n_in), density, 1)
        layer(x)
        assert layer.stats["path"] == ("dense" if x.mean() > fraction else "sparse"), density
    readout = ReadoutLayer(n_in, OUT, backend="emulator")
    readout(binary((T, B, n_in), 0.99, 1))
    assert readout.stats["path"] == "sparse"
    assert emulator.forward_dense_fraction(OUT) > 1


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_stats_report_eligible_activity(backend):
    """Exact gradients list every neuron in a recorded call: eligible-only entries are
    all the neurons that did not spike. Under no_grad nothing but spikes is listed."""
    layer = LIFLayer(IN, HID, backend=backend)
    with torch.no_grad():
        layer.weight.mul_(4.0)
    x = binary((T, B, IN), 0.3, 2)
    layer(x)
    assert 0 < layer.stats["activity"] < 1
    assert layer.stats["eligible_activity"] == pytest.approx(1 - layer.stats["activity"])
    with torch.no_grad():
        layer(x)
    assert layer.stats["eligible_activity"] == 0


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
def test_learned_decays_and_threshold(model):
    check_learned_decays_and_threshold("emulator", model, (T, B, IN, HID))


@pytest.mark.parametrize("steps", [T, 1])
def test_readout(steps):
    check_readout("emulator", (steps, B, IN, OUT))


def test_half_weights_against_float32():
    """float16 weights, float32 state: same as float32 run with the half-rounded weights;
    against the unrounded float32 weights the membrane error stays within 2e-3 here."""
    torch.manual_seed(2)
    ref = LIFLayer(IN, HID, backend="reference", grad_window=0.5)
    with torch.no_grad():
        ref.weight.mul_(4.0)
        ref.weight.copy_(ref.weight.half().float())
    ref.record_membrane = True
    emu = LIFLayer(IN, HID, backend="emulator", grad_window=0.5, dtype=torch.float16)
    with torch.no_grad():
        emu.weight.copy_(ref.weight.half())
        emu.bias.copy_(ref.bias)
    emu.record_membrane = True
    x = binary((T, B, IN), 0.25, 2)
    readout = torch.randn(T, B, HID)
    (ref(x).to_dense() * readout).sum().backward()
    out = emu(x)
    (out.to_dense() * readout).sum().backward()
    assert emu.weight.grad.dtype == torch.float16
    assert torch.equal(out.ids, ref(x).ids)
    torch.testing.assert_close(emu.last_membrane, ref.last_membrane, atol=2e-3, rtol=0)
    assert_rel_close(emu.weight.grad.float(), ref.weight.grad, 2e-3, "half weight grad")


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_half_recurrent_grad_is_float32_grad_rounded_once(backend):
    """dL/dV of a half recurrent layer is the float32 gradient rounded once, not a sum
    in half of every step's (the reference once summed it so: 1.25e-1 off here)."""
    torch.manual_seed(5)
    half = LIFLayer(IN, HID, backend=backend, recurrent=True, dtype=torch.float16)
    full = LIFLayer(IN, HID, backend="reference", recurrent=True)
    with torch.no_grad():
        half.weight.mul_(4.0)
        half.rec_weight.mul_(2.0)
        for name in ("weight", "rec_weight", "bias"):
            getattr(full, name).copy_(getattr(half, name).float())
    x = binary((100, B, IN), 0.25, 5)
    readout = torch.randn(100, B, HID, generator=torch.Generator().manual_seed(5))
    for layer in (half, full):
        (layer(x).to_dense() * readout).sum().backward()
    expected = full.rec_weight.grad.half().float()
    err = (half.rec_weight.grad.float() - expected).abs().max()
    assert err <= float(expected.abs().max()) * 2.0**-10, f"max error {err:.3e}"


def busy_layer(policy, max_spikes, backend="emulator", recurrent=False):
    torch.manual_seed(4)
    layer = LIFLayer(IN, HID, backend=backend, max_spikes=max_spikes, overflow=policy,
                     grad_window=0.2, recurrent=recurrent, name="hidden1")
    with torch.no_grad():
        layer.weight.mul_(5.0)
    return layer


def test_overflow_error_names_layer_timestep_counts():
    with pytest.raises(SpikeOverflowError, match=r"hidden1: .*max_spikes=2 .*timestep \d+, "
                                                  r"sample \d+: \d+ spikes"):
        busy_layer("error", 2)(binary((T, B, IN), 0.4, 4))


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("recurrent", [False, True])
def test_calls_autograd_does_not_record_list_spikes_only(backend, recurrent):
    """Eligible-only entries serve the backward pass alone. With exact gradients every
    neuron is eligible, so a capacity under the layer's width overflows in training;
    under no_grad, or with nothing that needs a gradient, the same layer lists only its
    spikes, which fit, and they are the spikes of a recorded call."""
    torch.manual_seed(3)
    layer = LIFLayer(IN, HID, recurrent=recurrent, max_spikes=12, backend=backend,
                     name="hidden1")
    with torch.no_grad():
        layer.weight.mul_(3.0)
    x = binary((T, B, IN), 0.3, 6)
    unbounded = copy.deepcopy(layer)
    unbounded.max_spikes = None
    full = unbounded(x)
    assert 0 < int(full.counts[..., 0].max()) <= 12 < int(full.counts[..., 1].max())
    with pytest.raises(SpikeOverflowError, match="hidden1: .*gradient-eligible"):
        layer(x)
    with torch.no_grad():
        quiet = layer(x)
    for p in layer.parameters():
        p.requires_grad_(False)
    frozen = layer(x)
    spikes = listed_mask(full.counts.long(), full.capacity, 0)[..., :12]
    for out in (quiet, frozen):
        assert torch.equal(out.counts[..., 0], full.counts[..., 0])
        assert torch.equal(out.counts[..., 1], out.counts[..., 0])
        assert torch.equal(out.ids * spikes, full.ids[..., :12] * spikes)
        assert layer.stats["spikes_dropped"] == 0


@pytest.mark.parametrize("recurrent", [False, True])
def test_overflow_drop_keeps_first_entries_and_warns_once(recurrent):
    x = binary((T, B, IN), 0.4, 4)
    emu, ref = busy_layer("drop", 3, recurrent=recurrent), busy_layer(
        "drop", 3, "reference", recurrent=recurrent)
    with pytest.warns(RuntimeWarning, match="hidden1"):
        out = emu(x)
    expected = ref(x)
    assert torch.equal(out.ids, expected.ids) and torch.equal(out.counts, expected.counts)
    assert emu.stats["spikes_dropped"] > 0
    assert emu.stats["spikes_dropped"] == ref.stats["spikes_dropped"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        emu(x)  # warned once per layer
    assert emu.stats["total_spikes_dropped"] == 2 * emu.stats["spikes_dropped"]


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_drops_are_counted_once(backend, reentrant):
    """torch.utils.checkpoint runs a call again in the backward pass: the running drop
    totals are those of the same forward and backward without it (the recomputation
    counted every drop a second time). The reentrant form runs the first call without
    grad, so its eligible-only drops are the recomputation's."""
    from torch.utils.checkpoint import checkpoint

    x = binary((T, B, IN), 0.4, 4)
    plain, checkpointed = busy_layer("drop", 6, backend), busy_layer("drop", 6, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the drops' warning
        plain(x).to_dense().sum().backward()
        inputs = x.clone().requires_grad_()  # the reentrant form needs one
        checkpoint(lambda s: checkpointed(s).to_dense(), inputs,
                   use_reentrant=reentrant).sum().backward()
    expected = plain.stats
    assert expected["total_spikes_dropped"] > 0 and expected["total_eligible_dropped"] > 0
    for key in ("total_spikes_dropped", "total_eligible_dropped"):
        assert checkpointed.stats[key] == expected[key], key
    torch.testing.assert_close(checkpointed.weight.grad, plain.weight.grad)


@pytest.mark.parametrize("reset", ["subtract", "zero"])
@pytest.mark.parametrize("recurrent", [False, True])
def test_overflow_drop_gradients_match_reference(reset, recurrent):
    """A dropped spike is not passed on but still resets its neuron: the backward pass
    must follow that reset too (it once saw only the listed spikes: dL/dthreshold and
    the zero reset's gating were off wherever a spike was dropped)."""
    torch.manual_seed(6)
    ref = LIFLayer(IN, HID, backend="reference", max_spikes=3, overflow="drop",
                   grad_window=0.2, reset=reset, recurrent=recurrent, learn_threshold=True)
    with torch.no_grad():
        ref.weight.mul_(5.0)
    emu = copy.deepcopy(ref)
    emu.backend = "emulator"
    x = binary((T, B, IN), 0.4, 6)
    readout = torch.randn(T, B, HID, generator=torch.Generator().manual_seed(6))
    grads = []
    for layer in (ref, emu):
        xg = x.clone().requires_grad_()
        with pytest.warns(RuntimeWarning, match="dropped"):
            (layer(xg).to_dense() * readout).sum().backward()
        grads.append(xg.grad)
    assert emu.stats["spikes_dropped"] > 0
    for (name, p_ref), (_, p_emu) in zip(ref.named_parameters(), emu.named_parameters()):
        assert_rel_close(p_emu.grad, p_ref.grad, 1e-4, name)
    assert_rel_close(grads[1], grads[0], 1e-4, "input grad")


def test_overflow_grow_equals_large_capacity():
    x = binary((T, B, IN), 0.4, 4)
    grown = busy_layer("grow", 2)
    big = busy_layer("error", HID)
    a, b = grown(x), big(x)
    assert grown.stats["grew"] and a.capacity == grown.stats["needed_capacity"]
    assert torch.equal(a.to_dense(), b.to_dense())
    assert torch.equal(a.ids, b.ids[..., : a.capacity])


@pytest.mark.parametrize("short_samples", [[1], [0, 1, 2]])
def test_exact_lists_with_rows_short_of_every_neuron(short_samples):
    """Exact gradients list every neuron, except one whose membrane is -inf (float32
    sums of huge weights): such a row lists fewer than all. Against the reference, on a
    layer of one tile (whose lists the executor writes in place, a row per neuron
    width): rows short in some samples (K is still the width, and the compact copy of
    the list is not where every row is full) and in every sample (K below the width)."""
    n_in, n_hid = 12, 20
    net = two_layer_net((T, B, n_in, n_hid, OUT), "leaky", "subtract", False, None,
                        sg.ATan(2.0), seed=3)
    with torch.no_grad():
        net[0].weight[:5, :2] = -3e38  # two of these inputs sum to -inf
    x = binary((T, B, n_in), 0.3, 3)
    x[:, :, :2] = 0
    x[0, short_samples, :2] = 1  # from step 0 on, the short samples' neurons 0-4 sit at -inf
    emu = emulated(net)
    readout = torch.randn(T, B, OUT)
    gx_ref, ref_outs = run(net, x, readout)
    gx_emu, emu_outs = run(emu, x, readout)
    listed = ref_outs[0].counts[..., 1]
    assert int(listed.min()) == n_hid - 5
    assert int(listed.max()) == (n_hid - 5 if len(short_samples) == B else n_hid)
    assert emu[0].stats["tiles"] == 1
    for r, e in zip(ref_outs, emu_outs):
        assert torch.equal(r.counts, e.counts)
        assert torch.equal(r.ids, e.ids)
        assert torch.equal(r.values.detach(), e.values.detach())
    membrane_ref, membrane_emu = net[0].last_membrane, emu[0].last_membrane
    finite = torch.isfinite(membrane_ref)
    assert torch.equal(finite, torch.isfinite(membrane_emu)) and not finite.all()
    assert_rel_close(membrane_emu[finite], membrane_ref[finite], 1e-6, "membrane")
    for (name, p_ref), (_, p_emu) in zip(net.named_parameters(), emu.named_parameters()):
        assert torch.isfinite(p_ref.grad).all() and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_emu.grad, p_ref.grad, 1e-4, name)
    # the huge weights' inputs have an infinite gradient on both
    finite = torch.isfinite(gx_ref)
    assert torch.equal(gx_emu[~finite], gx_ref[~finite])
    assert_rel_close(gx_emu[finite], gx_ref[finite], 1e-4, "input grad")


def test_deterministic_across_threads_and_runs():
    net, x, readout = tie_free("leaky", "subtract", True, 0.3, "host", sg.ATan(2.0))
    results = []
    old = emulator.get_num_threads()
    try:
        for threads in (1, 2, 2):
            emulator.set_num_threads(threads)
            emu = emulated(net)
            _, outs = run(emu, x, readout)
            results.append([outs[1].ids] + [p.grad.clone() for p in emu.parameters()])
    finally:
        emulator.set_num_threads(old)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("recurrent", [False, True])
def test_inference_mode_runs_and_matches_no_grad(recurrent):
    """torch.inference_mode() tensors have no version counter: the lists made and read
    under it must not need one. Same outputs as under no_grad, on both backends."""
    net = build("leaky", "subtract", recurrent, 0.3, "host", sg.ATan(2.0), 5)
    net.append(ReadoutLayer(OUT, 4, backend="reference"))
    x = binary((T, B, IN), 0.25, 5)
    results = {}
    for backend in ("reference", "emulator"):
        for layer in net:
            layer.backend = backend
        with torch.no_grad():
            expected = net(SparseSpikes.from_dense(x))
        with torch.inference_mode():
            got = net(SparseSpikes.from_dense(x))
        assert torch.equal(got, expected)
        results[backend] = got
    assert_rel_close(results["emulator"], results["reference"], 1e-5, "readout membrane")


def test_corrupted_ids_raise_not_crash():
    """Lists edited in place after their check reach the native scan, which names the
    entry; unchecked lists are checked in full before (tests/test_reliability_lists.py)."""
    layer = LIFLayer(IN, HID, backend="emulator")
    s = SparseSpikes.from_dense(binary((T, B, IN), 0.3, 0))
    assert int(s.counts[3, 1, 0]) > 0, "the test needs a spike at t=3, b=1"
    for bad in (10**6, -5, IN):
        hostile = SparseSpikes(s.ids.clone(), s.counts, IN, s.values)
        hostile.ids.data[3, 1, 0] = bad  # after the check: not seen by the list's flag
        with pytest.raises(ValueError, match=re.escape(
                f"{layer.name}: input list id {bad} at t=3, b=1, k=0 out of range [0, {IN})")):
            layer(hostile)
        unchecked = SparseSpikes(hostile.ids, s.counts, IN, s.values, validate=False)
        with pytest.raises(ValueError, match=re.escape(
                f"{layer.name}: input list: SparseSpikes.ids out of range at [t=3, b=1, k=0]")):
            layer(unchecked)
    hostile = SparseSpikes(s.ids, s.counts.clone(), IN, s.values)
    hostile.counts.data[0, 0, 1] = s.capacity + 7
    with pytest.raises(ValueError, match="exceed capacity"):
        layer(hostile)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_graded_values_are_refused_by_both_backends(backend, dtype):
    """A list built with validate=False (or edited since) with values other than 1 at
    its spikes and 0 at its eligible-only entries: the emulator would add whole rows
    where the reference scales by the value, so both refuse it, naming the entry."""
    layer = LIFLayer(IN, HID, backend=backend)
    x = binary((T, B, IN), 0.3, 0)
    eligible = torch.zeros(T, B, IN, dtype=torch.bool)
    eligible[2, 1, : IN // 2] = True  # silent inputs of (2, 1) listed after its spikes
    s = SparseSpikes.from_dense(x, max_spikes=IN, eligible=eligible)
    spikes_at = int(s.counts[2, 1, 0])
    assert 1 < spikes_at < int(s.counts[2, 1, 1]) < s.capacity
    for k, value, what in ((1, 0.5, "a spike"), (spikes_at + 1, 1.0, "eligible-only"),
                           (0, float("nan"), "a spike")):
        values = s.values.to(dtype).clone()
        values[2, 1, k] = value
        hostile = SparseSpikes(s.ids, s.counts, IN, values, validate=False)
        with pytest.raises(ValueError, match=re.escape(
                f"{layer.name}: input list value ") + r".* at t=2, b=1, " +
                re.escape(f"k={k} ({what})")):
            layer(hostile)
        assert not hostile.values_checked
        with pytest.raises(ValueError, match="graded"):  # a refused list stays unchecked
            layer(hostile)
    values = s.values.to(dtype).clone()
    values[2, 1, -1] = 0.5  # padding: read by neither backend
    assert int(s.counts[2, 1, 1]) < s.capacity
    fine = SparseSpikes(s.ids, s.counts, IN, values, validate=False)
    assert not fine.values_checked
    layer(fine)
    assert fine.values_checked and s.values_checked and layer(s).values_checked


@pytest.mark.parametrize("edit", ["in_place", "data", "numpy"])
def test_lists_edited_after_they_were_made_raise_not_crash(edit):
    """However a list's ids are changed after validation or after a layer made them
    (in place, or through .data / .numpy(), which autograd's version counters do not
    see), the executor's own scan raises before any kernel reads them."""
    first = LIFLayer(IN, HID, backend="emulator")
    second = LIFLayer(HID, HID, backend="emulator")
    with torch.no_grad():
        first.weight.mul_(4.0)

    def corrupt(s, t, b, value):
        if edit == "in_place":
            s.ids[t, b, 0] = value
        elif edit == "data":
            s.ids.data[t, b, 0] = value
        else:
            s.ids.numpy()[t, b, 0] = value

    x = SparseSpikes.from_dense(binary((T, B, IN), 0.3, 0))
    out = first(x)
    t, b = (int(i) for i in (out.counts[..., 1] > 0).nonzero()[0])
    corrupt(out, t, b, HID + 3)
    with pytest.raises(ValueError, match="out of range"):
        second(out)
    t, b = (int(i) for i in (x.counts[..., 0] > 0).nonzero()[0])
    corrupt(x, t, b, -2)
    with pytest.raises(ValueError, match="out of range"):
        first(x)


def test_window_line_is_one_float32_comparison_on_both_backends():
    """Eligible means U > threshold - grad_window, the right side rounded to float32, on
    both backends (and by hand here): membranes one float32 step either side of that
    line, and on it, for thresholds and windows where the other way of drawing it,
    U - threshold > -grad_window, rounds differently for some of them."""
    g = torch.Generator().manual_seed(7)
    cases = [(0.5, 0.5)] + [(float(t), float(w)) for t, w in zip(
        torch.rand(12, generator=g) * 2 + 0.2, torch.rand(12, generator=g) * 0.9 + 0.05)]
    disagree_elsewhere = 0
    for thr, window in cases:
        line = torch.tensor(thr) - torch.tensor(window)  # float32
        u = torch.stack([torch.nextafter(line, torch.tensor(-1.0)), line,
                         torch.nextafter(line, torch.tensor(2.0)),
                         torch.nextafter(torch.nextafter(line, torch.tensor(2.0)),
                                         torch.tensor(2.0)), torch.tensor(1e-9)])
        expected = u > line
        disagree_elsewhere += int(((u - thr > -window) != expected).sum())
        lists = []
        for backend in ("reference", "emulator"):
            layer = LIFLayer(1, len(u), beta=0.0, threshold=thr, grad_window=window,
                             backend=backend)
            with torch.no_grad():
                layer.weight.zero_()
                layer.bias.copy_(u)  # one step from zero state: U = bias exactly
            out = layer(torch.zeros(1, 1, 1))
            listed = out.ids[0, 0, : int(out.counts[0, 0, 1])].tolist()
            lists.append(listed)
            assert listed == expected.nonzero().flatten().tolist(), (backend, thr, window)
        assert lists[0] == lists[1]
    assert disagree_elsewhere > 0  # the cases can tell the two ways apart


def test_a_half_input_gradient_past_its_range_is_inf_at_listed_entries_alone():
    """float16 inputs whose gradient (2e5 here) is past float16's range: inf where the
    input is listed, 0 at the rest, on both backends; not NaN at neuron 0, where the
    padding entries point (inf * 0 in the reference's lists)."""
    x = torch.tensor([[[0.0, 1.0, 1.0]], [[0.0, 0.0, 1.0]]], dtype=torch.float16)
    grads = []
    for backend in ("reference", "emulator"):
        layer = ReadoutLayer(3, 2, beta=0.0, bias=False, backend=backend)
        with torch.no_grad():
            layer.weight.fill_(1e5)
        xg = x.clone().requires_grad_()
        layer(SparseSpikes.from_dense(xg)).sum().backward()
        grads.append(xg.grad)
    inf = float("inf")
    for grad in grads:
        assert grad.tolist() == [[[0.0, inf, inf]], [[0.0, 0.0, inf]]]


def test_fixed_constants_changed_between_calls_take_effect():
    """A layer keeps the per-neuron fill of a fixed scalar beta or threshold from one call
    to the next; a constant changed in place (or through ``.data``) between calls must
    reach the next call: each call checked against a fresh reference layer."""
    torch.manual_seed(0)
    layer = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=0.2, backend="emulator")
    with torch.no_grad():
        layer.weight.mul_(4.0)
    x = binary((T, B, IN), 0.3, seed=1)
    for beta, threshold, through_data in ((0.9, 1.0, False), (0.5, 1.0, False),
                                          (0.5, 0.7, True), (0.9, 1.0, True)):
        with torch.no_grad():
            (layer.beta.data if through_data else layer.beta).fill_(beta)
            (layer.threshold.data if through_data else layer.threshold).fill_(threshold)
        # a new layer, not a copy: a copy would take the emulator layer's fills along
        ref = LIFLayer(IN, HID, beta=beta, threshold=threshold, grad_window=0.2,
                       backend="reference")
        with torch.no_grad():
            ref.weight.copy_(layer.weight)
            ref.bias.copy_(layer.bias)
        out, want = layer(x), ref(x)
        assert torch.equal(out.ids, want.ids) and torch.equal(out.counts, want.counts), (
            beta, threshold)
        (out.values.sum()).backward()
        (want.values.sum()).backward()
        assert_rel_close(layer.weight.grad, ref.weight.grad, 1e-4, f"{beta}, {threshold}")
        layer.weight.grad = None


def _reference_twin(layer):
    """A new reference-backend layer with ``layer``'s settings and values (a new layer,
    not a copy: a copy would take along what the emulator layer kept between calls)."""
    kwargs = dict(beta=layer.beta.detach().clone(), threshold=layer.threshold.detach().clone(),
                  grad_window=layer.grad_window, reset=layer.reset, surrogate=layer.surrogate,
                  backend="reference")
    ref = LIFLayer(layer.in_features, layer.out_features, **kwargs)
    with torch.no_grad():
        ref.weight.copy_(layer.weight)
        ref.bias.copy_(layer.bias)
    return ref


def _check_against_reference(layer, x, what):
    ref = _reference_twin(layer)
    xs = SparseSpikes.from_dense(x)
    xe = SparseSpikes(xs.ids, xs.counts, xs.num_neurons, xs.values.clone().requires_grad_())
    xr = SparseSpikes(xs.ids, xs.counts, xs.num_neurons, xs.values.clone().requires_grad_())
    out, want = layer(xe), ref(xr)
    assert torch.equal(out.ids, want.ids) and torch.equal(out.counts, want.counts), what
    (out.values * torch.arange(out.values.numel()).reshape(out.values.shape).sin()).sum() \
        .backward()
    (want.values * torch.arange(want.values.numel()).reshape(want.values.shape).sin()).sum() \
        .backward()
    weight = layer.weight
    assert_rel_close(weight.grad, ref.weight.grad, 1e-4, f"{what}: dL/dW")
    assert_rel_close(xe.values.grad, xr.values.grad, 1e-4, f"{what}: dL/dx")
    weight.grad = None


def test_kept_call_follows_what_changes_between_calls():
    """The emulator keeps a layer's call object (its settings and parameter views) and
    plan from one call to the next; whatever the next call is made with must reach them:
    the weights changed in place, through ``.data``, or replaced, the settings, the
    thread count, the input's shape, a copy of the layer. Each call checked against a
    fresh reference layer."""
    torch.manual_seed(0)
    layer = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=0.2, backend="emulator")
    with torch.no_grad():
        layer.weight.mul_(4.0)
    x = binary((T, B, IN), 0.3, seed=1)
    _check_against_reference(layer, x, "first call")
    with torch.no_grad():
        layer.weight.mul_(-0.5)
    _check_against_reference(layer, x, "weight changed in place")
    layer.weight.data = torch.randn(HID, IN) * 2.0
    _check_against_reference(layer, x, "weight assigned through .data")
    layer.weight = torch.nn.Parameter(torch.randn(HID, IN) * 3.0)
    _check_against_reference(layer, x, "weight replaced")
    layer.bias.data = torch.randn(HID)
    _check_against_reference(layer, x, "bias assigned through .data")
    layer.grad_window = 0.6
    _check_against_reference(layer, x, "grad_window changed")
    layer.reset = "zero"
    _check_against_reference(layer, x, "reset changed")
    layer.surrogate = sg.FastSigmoid(5.0)
    _check_against_reference(layer, x, "surrogate changed")
    old = emulator.get_num_threads()
    try:
        emulator.set_num_threads(1 if old > 1 else 2)
        _check_against_reference(layer, x, "thread count changed")
    finally:
        emulator.set_num_threads(old)
    _check_against_reference(layer, binary((2 * T, 2 * B + 1, IN), 0.3, seed=4),
                             "more steps and samples")
    _check_against_reference(layer, binary((3, 1, IN), 0.3, seed=5), "fewer steps and samples")
    twin = copy.deepcopy(layer)
    with torch.no_grad():
        twin.weight.mul_(2.0)
    _check_against_reference(twin, x, "a deep copy, its weights changed")
    _check_against_reference(layer, x, "the original after its copy changed")


def test_layer_called_twice_in_one_graph():
    """Two calls of one layer in one graph share the layer's kept call object; each
    backward pass must still differentiate its own call (against the reference)."""
    torch.manual_seed(0)
    layer = LIFLayer(HID, HID, beta=0.8, threshold=1.0, grad_window=0.3, backend="emulator")
    with torch.no_grad():
        layer.weight.mul_(5.0)
    ref = _reference_twin(layer)
    x = SparseSpikes.from_dense(binary((T, B, HID), 0.3, seed=2))
    out, want = layer(layer(x)), ref(ref(x))
    assert torch.equal(out.ids, want.ids) and torch.equal(out.counts, want.counts)
    out.values.sum().backward()
    want.values.sum().backward()
    assert_rel_close(layer.weight.grad, ref.weight.grad, 1e-4, "dL/dW of two calls")
    assert_rel_close(layer.bias.grad, ref.bias.grad, 1e-4, "dL/db of two calls")


@pytest.mark.parametrize("what", ["learned beta", "learned threshold", "transposed weight"])
def test_kept_call_follows_parameters_it_copies(what):
    """A parameter that is not contiguous reaches the native call as a copy: a learned
    scalar beta or threshold (expanded to every neuron, a new tensor each call) or a
    weight stored transposed. A call kept from the last one must not read the last
    call's copy: each call after an in-place change (an optimizer's step) against a
    fresh reference layer, forward-only (where the last call's temporaries are freed at
    once and their addresses come back) and then with gradients."""
    torch.manual_seed(0)
    layer = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=0.3, backend="emulator",
                     learn_beta=what == "learned beta",
                     learn_threshold=what == "learned threshold")
    with torch.no_grad():
        layer.weight.mul_(4.0)
    if what == "transposed weight":
        layer.weight = torch.nn.Parameter(layer.weight.detach().t().contiguous().t())
        assert not layer.weight.is_contiguous()
    x = binary((T, B, IN), 0.3, seed=6)
    param = {"learned beta": layer.beta, "learned threshold": layer.threshold,
             "transposed weight": layer.weight}[what]
    for call in range(12):
        with torch.no_grad():
            param.mul_(0.97)
            out, want = layer(x), _reference_twin(layer)(x)
        assert torch.equal(out.to_dense(), want.to_dense()), f"{what}: call {call}"
    _check_against_reference(layer, x, what)


class _Scaled(torch.nn.Module):
    """A parametrization: the weight a call reads is twice the stored one."""

    def forward(self, w):
        return 2.0 * w


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("window", [None, 0.3])
def test_a_parametrized_weight_is_trained_like_a_plain_one(backend, window):
    """A parametrized weight (``torch.nn.utils.parametrize``, as ``weight_norm`` uses)
    leaves the module's own parameters for the parametrization's. With an input that
    needs no gradient (a first layer), the call must still be recorded, listing its
    eligible entries: spikes, and dL/dW through the parametrization, against a plain
    reference layer holding the weight the call reads (dL/dW_stored = 2 dL/dW)."""
    torch.manual_seed(0)
    layer = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=window, bias=False,
                     backend=backend)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    plain = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=window, bias=False,
                     backend="reference")
    with torch.no_grad():
        plain.weight.copy_(2.0 * layer.weight)
    parametrize.register_parametrization(layer, "weight", _Scaled())
    assert "weight" not in layer._parameters
    x = binary((T, B, IN), 0.3, seed=7)
    out, want = layer(x), plain(x)
    assert torch.equal(out.to_dense(), want.to_dense())
    assert layer.last_call.eligible_listed == plain.last_call.eligible_listed > 0
    for o in (out, want):
        d = o.to_dense()
        (d * torch.arange(d.numel()).reshape(d.shape).sin()).sum().backward()
    assert_rel_close(layer.parametrizations.weight.original.grad, 2.0 * plain.weight.grad,
                     1e-4, "dL/dW through the parametrization")
    with torch.no_grad():
        layer.parametrizations.weight.original[1, 2] = float("nan")
    with pytest.raises(ValueError, match="weight contains NaN or inf"):
        layer(x)


@pytest.mark.parametrize("window", [None, 0.3])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("name, shared, other", [("threshold", 1.0, 0.6), ("beta", 0.9, 0.5)])
def test_parameters_that_differ_in_one_neuron(window, reset, name, shared, other):
    """The neuron update and the state gradient take a threshold or beta shared by every
    neuron as one value; a layer whose values are all the same but one (in the last
    tile) must not be taken for one: its outputs and gradients against the
    reference's, with each reset."""
    torch.manual_seed(0)
    values = torch.full((HID,), shared)
    values[-1] = other
    kw = {"beta": 0.9, "threshold": 1.0, name: values}
    layer = LIFLayer(IN, HID, grad_window=window, reset=reset, backend="emulator", **kw)
    with torch.no_grad():
        layer.weight.mul_(4.0)
    x = binary((T, B, IN), 0.3, seed=3)
    _check_against_reference(layer, x, f"one {name} apart")
    # and a shared value, taken as one
    getattr(layer, name).fill_(other)
    _check_against_reference(layer, x, f"a shared {name}")


def test_results_do_not_depend_on_the_calls_before():
    """The plan a layer keeps between calls is its shape's: a call after calls of other
    shapes gives the bits of the same call on a fresh copy (the plan of one sample, two
    tiles, is not that of three samples, one tile in two sample groups)."""
    torch.manual_seed(0)
    layer = LIFLayer(IN, HID, beta=0.9, threshold=1.0, grad_window=0.5, backend="emulator")
    with torch.no_grad():
        layer.weight.mul_(4.0)
    fresh = copy.deepcopy(layer)  # keeps nothing of the layer's calls

    def grads(net, x):
        xs = SparseSpikes.from_dense(x)
        xs = SparseSpikes(xs.ids, xs.counts, xs.num_neurons, xs.values.clone().requires_grad_())
        out = net(xs)
        (out.values * torch.arange(out.values.numel()).reshape(out.values.shape).cos()).sum() \
            .backward()
        g = (out.ids, out.counts, xs.values.grad, net.weight.grad.clone())
        net.weight.grad = None
        return g

    grads(layer, binary((T, 3, IN), 0.3, seed=6))
    x = binary((T, 1, IN), 0.3, seed=7)
    for got, want, what in zip(grads(layer, x), grads(fresh, x), ("ids", "counts", "dL/dx",
                                                                  "dL/dW")):
        assert torch.equal(got, want), what


@pytest.mark.parametrize("change", CHANGES_BETWEEN_PASSES)
def test_parameters_changed_between_the_passes_differentiate_the_forward(change):
    """A parameter assigned through .data, or a fixed threshold changed in place, after
    the forward pass: the backward differentiates the forward that ran, as the
    reference's (and torch's own) saved tensors do. The emulator took the new weights
    (rec_weight: every gradient 0.16-0.51 off) and the new threshold (0.5 off), and a
    threshold's fill_ raised autograd's in-place error."""
    check_parameters_changed_between_passes("emulator", change)


def test_a_recorded_membrane_edited_before_backward_changes_nothing():
    check_recorded_membrane_edited_before_backward("emulator")
