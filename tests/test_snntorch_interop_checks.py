"""from_snntorch / to_snntorch: what they once dropped, added or said unclearly
(issue 30), held against snnTorch itself."""

import warnings

import pytest
import snntorch as snn
import torch
from conftest import assert_rel_close
from torch import nn

from snn_ipu import (
    LIFLayer,
    ReadoutLayer,
    SynapticLayer,
    export_to_nir,
    from_snntorch,
    pipeline,
    to_snntorch,
)

IN, HID, OUT = 8, 6, 4


def test_a_module_used_twice_is_refused_by_name():
    """named_children lists a module once: Sequential(fc, lif, fc, lif) gave one layer."""
    fc, lif = nn.Linear(IN, IN), snn.Leaky(beta=0.9, init_hidden=True)
    with pytest.raises(ValueError, match=r"from_snntorch: 2 is the module 0 again \(Linear\)"):
        from_snntorch(nn.Sequential(fc, lif, fc, lif))
    with pytest.raises(ValueError, match=r"3 is the module 1 again \(Leaky\)"):
        from_snntorch(nn.Sequential(fc, lif, nn.Linear(IN, IN), lif))


def test_to_snntorch_keeps_a_missing_recurrent_bias_missing_and_frozen_parameters_frozen():
    """A recurrent layer without rec_bias gained a trainable recurrent.bias in snnTorch
    (2,164 output mismatches after 20 Adam steps); requires_grad=False was dropped."""
    torch.manual_seed(0)
    ours = nn.Sequential(LIFLayer(IN, HID, recurrent=True),
                         SynapticLayer(HID, OUT, learn_beta=True, recurrent=True,
                                       rec_bias=True))
    ours[0].weight.requires_grad_(False)
    ours[1].beta.requires_grad_(False)
    ours[1].rec_bias.requires_grad_(False)
    net = to_snntorch(ours)
    assert net[1].recurrent.bias is None
    assert "1.recurrent.bias" not in dict(net.named_parameters())
    trainable = {n for n, p in net.named_parameters() if p.requires_grad}
    expected = {n for n, p in ours.named_parameters() if p.requires_grad}
    assert len(trainable) == len(expected) == 5
    assert not net[0].weight.requires_grad and not net[3].beta.requires_grad
    assert not net[3].recurrent.bias.requires_grad and net[3].recurrent.weight.requires_grad
    back = from_snntorch(net)  # and back: the same parameters, frozen alike
    assert back[0].rec_bias is None
    assert [(n, p.requires_grad) for n, p in back.named_parameters()] == \
        [(n, p.requires_grad) for n, p in ours.named_parameters()]


def test_from_snntorch_carries_frozen_decays_and_thresholds():
    neuron = snn.Leaky(beta=0.9, learn_beta=True, learn_threshold=True)
    neuron.beta.requires_grad_(False)
    layer = from_snntorch(nn.Sequential(nn.Linear(IN, HID), neuron))[0]
    assert isinstance(layer.beta, nn.Parameter) and not layer.beta.requires_grad
    assert layer.threshold.requires_grad


def test_a_subclass_of_a_supported_neuron_is_refused():
    """snnTorch's DeltaLeaky is a Leaky whose model differs (it fires on a change of
    the membrane and never resets): converting it as a Leaky would give other spikes."""
    with pytest.raises(ValueError, match=r"1 \(DeltaLeaky\).*DeltaLeaky is a subclass"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID), snn.DeltaLeaky(beta=0.9)))

    class MyLeaky(snn.Leaky):
        pass

    with pytest.raises(ValueError, match=r"MyLeaky is a subclass"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID), MyLeaky(beta=0.9)))


def test_a_pipelined_model_is_not_exported_without_its_delays():
    """snn_ipu.pipeline makes each layer after the first read its input a step late;
    to_snntorch and export_to_nir cannot express that and refuse, naming the layer."""
    model = nn.Sequential(LIFLayer(IN, HID), LIFLayer(HID, OUT))
    pipeline(model)
    assert model[1].input_delay == 1
    with pytest.raises(ValueError, match=r"to_snntorch: .*input 1 step\(s\) late"):
        to_snntorch(model)
    with pytest.raises(ValueError, match=r"export_to_nir: .*input 1 step\(s\) late"):
        export_to_nir(model)


def test_messages_say_what_to_do():
    with pytest.raises(ValueError, match=r"1 \(Dropout\): .*snn_ipu.SpikeDropout\(p=0.2\)"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID), nn.Dropout(0.2),
                                    snn.Leaky(beta=0.9)))

    class Grouped(nn.Module):  # Linears registered before their neurons
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(IN, HID), nn.Linear(HID, OUT)
            self.lif1, self.lif2 = snn.Leaky(beta=0.9), snn.Leaky(beta=0.9)

    with pytest.raises(ValueError, match=r"fc2 \(nn.Linear\) follows fc1 .* register each "
                                         r"neuron right after its nn.Linear"):
        from_snntorch(Grouped())
    with pytest.raises(ValueError, match=r"from_snntorch: 1 \(Leaky\): beta must lie in "
                                         r"\[0, 1\], got 1.2"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID), snn.Leaky(beta=1.2)))
    with pytest.raises(ValueError, match=r"from_snntorch: 3 \(Leaky\): threshold must be"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID), snn.Leaky(beta=0.9),
                                    nn.Linear(HID, OUT), snn.Leaky(beta=0.9, threshold=0.0)))


def _steps(net, x):
    for module in net.modules():
        if isinstance(module, snn.SpikingNeuron):
            module.reset_mem()
    return torch.stack([net(x[t])[0] for t in range(x.shape[0])])


def test_learned_decays_an_optimizer_took_out_of_range_convert_as_snntorch_steps_them():
    """snnTorch clamps a learned beta/alpha to [0, 1] where it uses it, and training
    takes them past 1 or below 0; from_snntorch refused such a trained network (the
    constructor's range check for fixed decays). It converts now, with the raw values:
    the same spikes, and the same weights after Adam steps (0 gradient past the clamp)."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(IN, HID), snn.Leaky(beta=0.9, learn_beta=True, init_hidden=True),
        nn.Linear(HID, OUT),
        snn.Synaptic(alpha=torch.full((OUT,), 0.7), beta=torch.full((OUT,), 0.8),
                     learn_alpha=True, learn_beta=True, init_hidden=True, output=True))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[2].weight.mul_(3.0)
        net[1].beta.fill_(1.05)
        net[3].alpha.copy_(torch.tensor([1.1, -0.05, 0.7, 0.95]))
        net[3].beta.copy_(torch.tensor([0.8, 1.2, -0.1, 0.9]))
    ours = from_snntorch(net, backend="reference")
    assert float(ours[0].beta.detach()) == pytest.approx(1.05)  # raw, as snnTorch holds it
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (net, ours)]
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        x = (torch.rand(12, 3, IN, generator=g) < 0.3).float()
        target = torch.randn(12, 3, OUT, generator=g)
        theirs = _steps(net, x)
        mine = ours(x).to_dense()
        assert 0.05 < float(theirs.mean()) < 0.6
        assert torch.equal(mine.detach(), theirs.detach()), f"spikes differ at step {step}"
        for opt, out in zip(opts, (theirs, mine)):
            opt.zero_grad()
            ((out - target) ** 2).sum().backward()
            opt.step()
    for name, theirs in [("0.beta", net[1].beta), ("1.alpha", net[3].alpha),
                         ("1.beta", net[3].beta), ("1.weight", net[2].weight)]:
        mine = dict(ours.named_parameters())[name]
        assert_rel_close(mine.detach().reshape(-1), theirs.detach().reshape(-1), 1e-5, name)


def test_a_parameter_snntorch_holds_as_a_buffer_stays_fixed():
    """Leaky(beta=nn.Parameter(...)) without learn_beta=True registers the parameter
    as a buffer: snnTorch's optimizer (net.parameters()) never moves it. from_snntorch
    took it for learned by its type, and Adam moved our beta, threshold and alpha."""
    torch.manual_seed(1)
    net = nn.Sequential(
        nn.Linear(IN, HID),
        snn.Leaky(beta=nn.Parameter(torch.tensor(0.85)),
                  threshold=nn.Parameter(torch.tensor(0.9)), init_hidden=True),
        nn.Linear(HID, OUT),
        snn.Synaptic(alpha=nn.Parameter(torch.tensor(0.7)), beta=0.8, init_hidden=True,
                     output=True))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[2].weight.mul_(3.0)
    ours = from_snntorch(net, backend="reference")
    assert sum(p.numel() for p in ours.parameters()) == \
        sum(p.numel() for p in net.parameters())
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (net, ours)]
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x = (torch.rand(12, 3, IN, generator=g) < 0.3).float()
        target = torch.randn(12, 3, OUT, generator=g)
        theirs, mine = _steps(net, x), ours(x).to_dense()
        assert torch.equal(mine.detach(), theirs.detach())
        for opt, out in zip(opts, (theirs, mine)):
            opt.zero_grad()
            ((out - target) ** 2).sum().backward()
            opt.step()
    for mine, theirs in [(ours[0].beta, net[1].beta), (ours[0].threshold, net[1].threshold),
                         (ours[1].alpha, net[3].alpha)]:
        assert float(mine.detach()) == float(theirs.detach())


@pytest.mark.parametrize("built, assigned", [("subtract", "zero"), ("zero", "none"),
                                             ("none", "subtract")])
def test_a_reset_mechanism_assigned_after_construction_is_refused(built, assigned):
    """snnTorch binds a neuron's step function in its constructor: assigning
    reset_mechanism later changes the attribute, not what the neuron computes.
    from_snntorch read the attribute, so the layer reset otherwise than snnTorch's."""
    torch.manual_seed(3)
    fc = nn.Linear(IN, HID)
    with torch.no_grad():
        fc.weight.mul_(4.0)
    lif = snn.Leaky(beta=0.9, reset_mechanism=built, init_hidden=True)
    lif.reset_mechanism = assigned
    x = (torch.rand(15, 3, IN, generator=torch.Generator().manual_seed(4)) < 0.4).float()
    stepped = _steps(nn.Sequential(fc, lif), x)
    as_built = _steps(nn.Sequential(fc, snn.Leaky(beta=0.9, reset_mechanism=built,
                                                  init_hidden=True)), x)
    assert torch.equal(stepped, as_built)  # snnTorch steps the constructor's reset
    with pytest.raises(ValueError, match=rf"1 \(Leaky\): reset_mechanism is '{assigned}' "
                                         rf"but the neuron steps '{built}'"):
        from_snntorch(nn.Sequential(fc, lif))


def test_a_readout_before_another_layer_is_neither_converted_nor_exported():
    """A ReadoutLayer outputs its membrane, which no layer takes; to_snntorch made it a
    Leaky that passed spikes on, and export_to_nir an LI feeding the next Affine (which
    import_from_nir refuses): networks the model never computed."""
    model = nn.Sequential(ReadoutLayer(IN, HID, backend="reference"),
                          LIFLayer(HID, OUT, reset="zero", backend="reference"))
    x = (torch.rand(10, 2, IN, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    with pytest.raises(ValueError, match="must be binary"):
        model(x)  # the model itself does not run
    with pytest.raises(ValueError, match=r"to_snntorch: .* is a ReadoutLayer before another"):
        to_snntorch(model)
    with pytest.raises(ValueError, match=r"export_to_nir: .* is a ReadoutLayer before another"):
        export_to_nir(model)


@pytest.mark.parametrize("kind", ["parameters", "buffers"])
def test_a_container_with_tensors_of_its_own_is_refused(kind):
    """A module's own parameter or buffer (an input gain its forward applies) was
    silently dropped: the converted network computed without it (and trained one
    tensor less)."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            gain = torch.full((IN,), 2.0)
            if kind == "parameters":
                self.gain = nn.Parameter(gain)
            else:
                self.register_buffer("gain", gain)
            self.fc1, self.lif1 = nn.Linear(IN, HID), snn.Leaky(beta=0.9)

        def forward(self, x):
            return self.lif1(self.fc1(x * self.gain))

    with pytest.raises(ValueError, match=rf"from_snntorch: Scaled holds {kind} of its own "
                                         r"\(gain\)"):
        from_snntorch(Scaled())
    inner = nn.Sequential(Scaled())
    with pytest.raises(ValueError, match=rf"from_snntorch: 0 holds {kind} of its own"):
        from_snntorch(inner)


@pytest.mark.parametrize("export", ["to_snntorch", "export_to_nir"])
def test_exporting_a_layer_that_drops_warns(export):
    """max_spikes with overflow='drop' has no form in snnTorch or NIR: a dropped spike
    resets its neuron but reaches no other layer, and the exported network passes every
    spike on (23 of 160 outputs differed), which the export now says."""
    torch.manual_seed(0)
    model = nn.Sequential(LIFLayer(IN, HID, max_spikes=1, overflow="drop", reset="zero"),
                          ReadoutLayer(HID, OUT))  # (NIR's neurons reset to zero)
    with torch.no_grad():
        model[0].weight.fill_(0.5)  # every neuron fires at the first step
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="max_spikes=1 exceeded"):
        model(torch.ones(5, 3, IN))
    dropped = model[0].stats["total_spikes_dropped"]
    assert dropped > 0
    fn = to_snntorch if export == "to_snntorch" else export_to_nir
    with pytest.warns(UserWarning, match=rf"{export}: .*max_spikes=1 with overflow='drop'.*"
                                         rf"dropped {dropped} spikes"):
        fn(model)
    kept = nn.Sequential(LIFLayer(IN, HID, max_spikes=1, reset="zero"),
                         ReadoutLayer(HID, OUT))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow="error": the export computes alike
        fn(kept)
