"""Shared helpers: seeded random problems that stay clear of threshold ties."""

import re

import pytest
import torch

BACKENDS = ["reference", "emulator"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def host_l2_bytes():
    """The L2 per core as the native planner reads it (2 MiB where the system does not
    say); None where it cannot be read here."""
    import shutil
    import subprocess

    # (Python's os.sysconf does not know the name on every build; getconf asks the
    # same libc call)
    getconf = shutil.which("getconf")
    if getconf is None:
        return None
    out = subprocess.run([getconf, "LEVEL2_CACHE_SIZE"], capture_output=True, text=True)
    try:
        l2 = int(out.stdout.strip()) if out.returncode == 0 else 0
    except ValueError:  # "undefined", or nothing
        l2 = 0
    return l2 if l2 > 0 else 2 * 2**20


def adam_step_rates(monkeypatch):
    """The learning rate of every torch.optim.Adam step from here on, in order (a list
    the caller reads after training)."""
    used = []
    real = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        used.append(self.param_groups[0]["lr"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    return used


def binary(shape, p, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) < p).float()


def assert_rel_close(actual, expected, rtol, what):
    """max |a - e| <= rtol * max |e| (relative to the tensor's scale)."""
    assert actual is not None, f"{what}: no gradient"
    scale = expected.abs().max().clamp(min=1e-12)
    err = (actual - expected).abs().max()
    assert err <= rtol * scale, f"{what}: max error {err:.3e} vs scale {scale:.3e}"


def check_out_of_range_ids_refused(layer, spikes):
    """Ids out of ``[0, num_neurons)`` edited into a copy of ``spikes`` at (t=3, b=1, k=0)
    after the list's own check, through ``.data`` (which the list's check does not see),
    so that the layer's backend scan meets them: each is refused with the step, sample
    and slot named."""
    from snn_ipu import SparseSpikes

    n = spikes.num_neurons
    for bad in (10**6, -5, n):
        edited = SparseSpikes(spikes.ids.clone(), spikes.counts, n, spikes.values)
        edited.ids.data[3, 1, 0] = bad
        with pytest.raises(ValueError, match=re.escape(
                f"{layer.name}: input list id {bad} at t=3, b=1, k=0 out of range [0, {n})")):
            layer(edited)


def margin(membrane, threshold, window=None):
    """Distance of every membrane value to the decision lines of the forward pass."""
    m = (membrane - threshold).abs().min()
    if window is not None:
        m = torch.minimum(m, (membrane - (threshold - window)).abs().min())
    return float(m.detach())


def tie_free(make_layer, shape, window=None, seeds=40, min_margin=1e-4):
    """(layer, x): the first seed whose reference layer ``make_layer(seed)`` keeps every
    membrane at least ``min_margin`` from the decision lines (threshold 1, and the
    window's edge) on a binary input ``x``."""
    for seed in range(seeds):
        layer = make_layer(seed)
        x = binary(shape, 0.25, seed)
        layer.record_membrane = True
        with torch.no_grad():
            layer(x)
        layer.record_membrane = False
        if margin(layer.last_membrane, 1.0, window) > min_margin:
            return layer, x
    pytest.fail("no tie-free seed")


def two_layer_net(sizes, model, reset, recurrent, window, surrogate, seed, first=None,
                  second=None, **kw):
    """A seeded 2-layer reference-backend net, IN -> HID (optionally recurrent) -> OUT, of
    SynapticLayer for ``model == "synaptic"`` else LIFLayer; ``sizes`` = (T, B, IN, HID, OUT).

    ``kw`` goes to both layers, ``first`` / ``second`` (dicts) to layer 1 / layer 2 only.
    The weights are scaled up so that both layers fire on a sparse binary input, and every
    layer records its membrane for the tie check of ``tie_free_net``."""
    from snn_ipu import LIFLayer, SynapticLayer

    _, _, n_in, n_hid, n_out = sizes
    torch.manual_seed(seed)
    cls = SynapticLayer if model == "synaptic" else LIFLayer
    common = dict(reset=reset, grad_window=window, surrogate=surrogate, backend="reference", **kw)
    net = torch.nn.Sequential(cls(n_in, n_hid, recurrent=recurrent, **(first or {}), **common),
                              cls(n_hid, n_out, **(second or {}), **common))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[1].weight.mul_(3.0)
        if recurrent:
            net[0].rec_weight.mul_(2.0)
    for layer in net:
        layer.record_membrane = True
    return net


def tie_free_net(sizes, model, reset, recurrent, window, surrogate, first=None, second=None,
                 min_margin=1e-4, **kw):
    """(net, x, readout): the first seed (of 30) whose ``two_layer_net`` keeps every membrane
    of both layers at least ``min_margin`` from the decision lines (threshold 1, and the
    window's edge) on a binary input ``x`` of shape (T, B, IN), so that backends that sum
    in different orders cannot disagree on a spike; ``readout`` is a seeded (T, B, OUT)
    weighting for a loss. The search runs with warnings ignored (e.g. a small list's
    capacity warnings)."""
    import warnings

    steps, batch, n_in, _, n_out = sizes
    for seed in range(30):
        net = two_layer_net(sizes, model, reset, recurrent, window, surrogate, seed,
                            first=first, second=second, **kw)
        x = binary((steps, batch, n_in), 0.25, seed)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net(x)
        if min(margin(layer.last_membrane, 1.0, window) for layer in net) > min_margin:
            readout = torch.randn(steps, batch, n_out,
                                  generator=torch.Generator().manual_seed(seed))
            return net, x, readout
    pytest.fail("no tie-free seed")


def check_learned_decays_and_threshold(backend, model, sizes, recurrent=False, device="cpu"):
    """Gradients of learned beta, threshold (and alpha) on ``backend`` (its layer and input
    on ``device``) equal the reference's on the CPU, on a tie-free draw of ``sizes`` =
    (T, B, IN, HID)."""
    import copy

    from snn_ipu import LIFLayer, SynapticLayer

    steps, batch, n_in, n_hid = sizes
    extra = dict(learn_beta=True, learn_threshold=True, beta=torch.linspace(0.6, 0.95, n_hid),
                 recurrent=recurrent)
    if model == "synaptic":
        extra.update(learn_alpha=True)
    cls = SynapticLayer if model == "synaptic" else LIFLayer
    for seed in range(30):
        torch.manual_seed(seed)
        ref = cls(n_in, n_hid, backend="reference", grad_window=0.4, **extra)
        with torch.no_grad():
            ref.weight.mul_(4.0)
        ref.record_membrane = True
        x = binary((steps, batch, n_in), 0.25, seed)
        with torch.no_grad():
            ref(x)
        if margin(ref.last_membrane, 1.0, 0.4) > 1e-4:
            break
    other = copy.deepcopy(ref).to(device)
    other.backend = backend
    readout = torch.randn(steps, batch, n_hid)
    for layer, dev in ((ref, "cpu"), (other, device)):
        (layer(x.to(dev)).to_dense() * readout.to(dev)).sum().backward()
    for (name, p_ref), (_, p_other) in zip(ref.named_parameters(), other.named_parameters()):
        assert_rel_close(p_other.grad.cpu(), p_ref.grad, 1e-4, name)


def check_readout(backend, sizes, device="cpu"):
    """A ReadoutLayer with learned beta on ``backend`` (on ``device``): the reference's
    membrane, input gradient and parameter gradients on the CPU, ``sizes`` = (T, B, IN,
    OUT)."""
    import copy

    from snn_ipu import ReadoutLayer

    steps, batch, n_in, n_out = sizes
    torch.manual_seed(1)
    ref = ReadoutLayer(n_in, n_out, beta=torch.linspace(0.5, 0.9, n_out), learn_beta=True,
                       backend="reference")
    other = copy.deepcopy(ref).to(device)
    other.backend = backend
    x = binary((steps, batch, n_in), 0.3, 1)
    target = torch.randn(steps, batch, n_out)
    got = []
    for layer, dev in ((ref, "cpu"), (other, device)):
        xg = x.to(dev).clone().requires_grad_()
        mem = layer(xg)
        ((mem - target.to(dev)) ** 2).sum().backward()
        got.append((mem.detach().cpu(), xg.grad.cpu()))
    torch.testing.assert_close(got[1][0], got[0][0], atol=1e-5, rtol=0)
    assert_rel_close(got[1][1], got[0][1], 1e-4, "input grad")
    for (name, p_ref), (_, p_other) in zip(ref.named_parameters(), other.named_parameters()):
        assert_rel_close(p_other.grad.cpu(), p_ref.grad, 1e-4, name)


def run_two_layers(net, x, readout):
    """(input gradient, both layers' output lists), on the CPU, of a two-layer ``net``
    run on the device of its weights, for the loss ``sum(out2 * readout)``."""
    dev = next(net.parameters()).device
    xg = x.to(dev).clone().requires_grad_()
    outs = [net[0](xg)]
    outs.append(net[1](outs[0]))
    (outs[1].to_dense() * readout.to(dev)).sum().backward()
    return xg.grad.cpu(), [o.to("cpu") for o in outs]


def check_without_recorded_membranes(ref_net, net, x, readout, ref_outs, gx_ref):
    """Runs a copy of the two-layer ``net`` without recorded membranes, as a layer trains
    by default, and checks its lists and gradients against the reference's run
    (``ref_net``'s gradients, its output lists ``ref_outs`` and input gradient
    ``gx_ref``): recording keeps the dense state history, which a backend's backward
    then reads instead of the lists, so a comparison made with recorded membranes alone
    never reaches the backward a training run takes."""
    import copy

    lean = copy.deepcopy(net)
    for layer in lean:
        layer.record_membrane = False
    for p in lean.parameters():
        p.grad = None
    gx, outs = run_two_layers(lean, x, readout)
    for i, (r, e) in enumerate(zip(ref_outs, outs)):
        assert torch.equal(r.ids, e.ids) and torch.equal(r.counts, e.counts), f"layer {i}"
    for (name, p_ref), (_, p) in zip(ref_net.named_parameters(), lean.named_parameters()):
        assert_rel_close(p.grad.cpu(), p_ref.grad, 1e-4, f"{name} (membranes not recorded)")
    assert_rel_close(gx, gx_ref, 1e-4, "input grad (membranes not recorded)")


def compare_triton(ref_net, tri_net, x, readout, path="sparse", membrane_rtol=1e-6):
    """``tri_net`` (the triton backend, on any device) against ``ref_net`` (the reference,
    on the CPU): identical lists, counts and stats, membranes within ``membrane_rtol`` of
    their scale, every gradient within 1e-4 relative; the weight-gradient path taken is
    ``path``. Returns the reference's output lists."""
    gx_ref, ref_outs = run_two_layers(ref_net, x, readout)
    gx_tri, tri_outs = run_two_layers(tri_net, x, readout)
    for i, (r, e) in enumerate(zip(ref_outs, tri_outs)):
        assert torch.equal(r.counts, e.counts), f"layer {i} counts"
        assert torch.equal(r.ids, e.ids), f"layer {i} ids"
        assert torch.equal(r.values.detach(), e.values.detach()), f"layer {i} values"
        assert_rel_close(tri_net[i].last_membrane.cpu(), ref_net[i].last_membrane,
                         membrane_rtol, f"layer {i} membrane")
        assert tri_net[i].stats["backend"] == "triton"
        assert tri_net[i].stats["weight_grad_path"] == path
        for key in ("spikes", "capacity", "needed_capacity", "eligible_activity"):
            assert tri_net[i].stats[key] == ref_net[i].stats[key], key
    for (name, p_ref), (_, p_tri) in zip(ref_net.named_parameters(), tri_net.named_parameters()):
        assert p_ref.grad is not None and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_tri.grad.cpu(), p_ref.grad, 1e-4, name)
    assert_rel_close(gx_tri, gx_ref, 1e-4, "input grad")
    check_without_recorded_membranes(ref_net, tri_net, x, readout, ref_outs, gx_ref)
    return ref_outs


def triton_configs():
    """(model, reset, recurrent, window, surrogate) of the triton backend's layer tests:
    every model, reset, window kind and surrogate, recurrent or not, in 6 configurations."""
    from snn_ipu import surrogate as sg

    return [
        ("leaky", "subtract", False, None, sg.ATan(2.0)),
        ("leaky", "zero", True, 0.3, sg.FastSigmoid(5.0)),
        ("leaky", "none", True, 0.0, sg.Sigmoid(4.0)),
        ("synaptic", "subtract", True, 0.3, sg.StraightThrough()),
        ("synaptic", "zero", True, None, sg.Triangle(0.8, 1.0)),
        ("synaptic", "none", False, 0.3, sg.ATan(2.0)),
    ]


CHANGES_BETWEEN_PASSES = ["threshold.data", "threshold.fill_", "weight.data",
                          "rec_weight.data", "readout weight.data"]


def check_parameters_changed_between_passes(backend, change):
    """A parameter changed between a call's forward and backward pass (``change``, one of
    CHANGES_BETWEEN_PASSES): ``backend``'s gradients, input's included, equal the
    reference's, which differentiate the forward pass that ran."""
    from snn_ipu import LIFLayer, ReadoutLayer

    x = binary((12, 3, 20), 0.3, 1)
    grads = {}
    for name in ("reference", backend):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            LIFLayer(20, 16, threshold=torch.linspace(0.8, 1.2, 16), grad_window=0.5,
                     recurrent=True, backend=name),
            ReadoutLayer(16, 4, backend=name))
        xg = x.clone().requires_grad_()
        out = net(xg)
        layer = net[1] if change.startswith("readout") else net[0]
        attribute = change.split()[-1].split(".")[0]
        if change.endswith("fill_"):
            layer.threshold.fill_(1.4)
        else:
            getattr(layer, attribute).data = getattr(layer, attribute).data * 1.3
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        grads[name] = dict(net.named_parameters(), input=xg)
    for key, p in grads["reference"].items():
        assert float(p.grad.abs().max()) > 0, key
        assert_rel_close(grads[backend][key].grad, p.grad, 1e-4, key)


def check_recorded_membrane_edited_before_backward(backend):
    """A recorded membrane edited in place (a plot's normalisation) before the backward
    pass: ``backend``'s gradients equal the reference's, whose record is its own copy
    (the emulator and Triton handed out the tensor their backward reads, and autograd
    refused the edit)."""
    from snn_ipu import LIFLayer

    x = binary((10, 2, 12), 0.4, 3)
    grads = {}
    for name in ("reference", backend):
        torch.manual_seed(0)
        layer = LIFLayer(12, 8, learn_beta=True, grad_window=0.3, backend=name)
        layer.record_membrane = True
        with torch.no_grad():
            layer.weight.mul_(3.0)
        out = layer(x)
        layer.last_membrane.mul_(0.0)
        out.values.sum().backward()
        grads[name] = dict(layer.named_parameters())
    for key, p in grads["reference"].items():
        assert float(p.grad.abs().max()) > 0, key
        assert_rel_close(grads[backend][key].grad, p.grad, 1e-4, key)
