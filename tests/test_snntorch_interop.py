"""from_snntorch / to_snntorch against snnTorch itself: outputs, and weights after 20
Adam steps of the same training (RLeaky/RSynaptic with their separate recurrent bias)."""

import pytest
import snntorch as snn
import snntorch.functional as SF
import torch
from torch import nn

from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer, from_snntorch, to_snntorch
from snn_ipu.losses import ce_count_loss

T, B, IN, HID, OUT = 16, 6, 30, 20, 5


def neuron(kind, n, last, **kw):
    kw = dict(init_hidden=True, output=last, **kw)
    if kind == "leaky":
        return snn.Leaky(beta=0.85, **kw)
    if kind == "synaptic":
        return snn.Synaptic(alpha=0.7, beta=0.85, **kw)
    if kind == "rleaky":
        return snn.RLeaky(beta=0.85, linear_features=n, **kw)
    return snn.RSynaptic(alpha=0.7, beta=0.85, linear_features=n, **kw)


def snntorch_net(kind, seed, **kw):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(IN, HID), neuron(kind, HID, False, **kw),
                        nn.Linear(HID, OUT), neuron(kind, OUT, True, **kw))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[2].weight.mul_(3.0)
        for module in (net[1], net[3]):
            if hasattr(module, "recurrent"):
                module.recurrent.weight.mul_(0.5)
                module.recurrent.bias.normal_(0.0, 0.2)  # a bias that matters
    return net


def reset(net):
    """Zero, fresh hidden states (snntorch.utils.reset leaves RSynaptic's in the graph)."""
    for module in net.modules():
        if isinstance(module, snn.SpikingNeuron):
            module.reset_mem()


def run_snntorch(net, x):
    """Output spikes [T, B, OUT] of an init_hidden Sequential, one step at a time."""
    reset(net)
    spikes = []
    for t in range(x.shape[0]):
        out = net(x[t])
        spikes.append(out[0])
    return torch.stack(spikes)


def data(seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(T, B, IN, generator=g) < 0.3).float()
    y = torch.randint(0, OUT, (B,), generator=g)
    return x, y


def pairs(net, ours):
    """(snnTorch tensor, our tensor, name) for every parameter."""
    out = []
    for i in (0, 1):
        fc, lif, layer = net[2 * i], net[2 * i + 1], ours[i]
        out += [(fc.weight, layer.weight, f"weight {i}"), (fc.bias, layer.bias, f"bias {i}")]
        if hasattr(lif, "recurrent"):
            out += [(lif.recurrent.weight, layer.rec_weight, f"rec_weight {i}"),
                    (lif.recurrent.bias, layer.rec_bias, f"rec_bias {i}")]
        if isinstance(getattr(lif, "beta", None), nn.Parameter):
            out.append((lif.beta, layer.beta, f"beta {i}"))
    return out


KINDS = ["leaky", "synaptic", "rleaky", "rsynaptic"]


@pytest.mark.parametrize("kind", KINDS)
def test_same_outputs_as_snntorch(kind, backend):
    net = snntorch_net(kind, 0)
    ours = from_snntorch(net, backend=backend)
    assert [type(m) for m in ours] == [SynapticLayer if "syn" in kind else LIFLayer] * 2
    assert ours[0].recurrent == kind.startswith("r")
    x, _ = data(0)
    with torch.no_grad():
        ref = run_snntorch(net, x)
        out = ours(x).to_dense()
    assert 0 < float(ref.mean()) < 0.9
    assert torch.equal(out, ref)


@pytest.mark.parametrize("kind", KINDS)
def test_twenty_adam_steps_give_snntorchs_weights(kind, backend):
    net = snntorch_net(kind, 1, learn_beta=kind == "leaky")
    ours = from_snntorch(net, backend=backend)
    theirs_opt = torch.optim.Adam(net.parameters(), lr=5e-3)
    ours_opt = torch.optim.Adam(ours.parameters(), lr=5e-3)
    # the same parameters in the same roles (Adam is per element: order does not matter)
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in ours.parameters())
    for step in range(20):
        x, y = data(100 + step)
        ref = run_snntorch(net, x)
        theirs_loss = SF.ce_count_loss()(ref, y)
        theirs_opt.zero_grad()
        theirs_loss.backward()
        theirs_opt.step()
        out = ours(x)
        loss = ce_count_loss(out, y)
        ours_opt.zero_grad()
        loss.backward()
        ours_opt.step()
        assert torch.equal(out.to_dense().detach(), ref.detach()), f"spikes differ at step {step}"
        torch.testing.assert_close(loss.detach(), theirs_loss.detach().reshape(()))
    moved = 0.0
    for theirs, mine, name in pairs(net, ours):
        torch.testing.assert_close(mine.detach(), theirs.detach().reshape(mine.shape),
                                   rtol=1e-5, atol=1e-6, msg=name)
    for p in ours.parameters():
        moved = max(moved, float(p.grad.abs().max()))
    assert moved > 0


def test_readout_from_a_non_resetting_leaky():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(IN, HID), snn.Leaky(beta=0.9, init_hidden=True),
                        nn.Linear(HID, OUT),
                        snn.Leaky(beta=0.8, reset_mechanism="none", init_hidden=True,
                                  output=True))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
    ours = from_snntorch(net, readout=True)
    assert isinstance(ours[1], ReadoutLayer)
    x, _ = data(3)
    reset(net)
    mems = torch.stack([net(x[t])[1] for t in range(T)])
    torch.testing.assert_close(ours(x).detach(), mems.detach(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="reset_mechanism='none'"):
        from_snntorch(snntorch_net("leaky", 0), readout=True)


def test_a_module_with_its_layers_as_attributes():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(IN, HID)
            self.lif1 = snn.Leaky(beta=torch.linspace(0.5, 0.95, HID), threshold=0.7,
                                  learn_threshold=True, spike_grad=snn.surrogate.fast_sigmoid(10))
            self.fc2 = nn.Linear(HID, OUT, bias=False)
            self.lif2 = snn.Leaky(beta=0.9, reset_mechanism="zero",
                                  spike_grad=snn.surrogate.sigmoid(5))

    ours = from_snntorch(Net())
    assert torch.equal(ours[0].beta, torch.linspace(0.5, 0.95, HID))
    assert isinstance(ours[0].threshold, nn.Parameter) and float(ours[0].threshold.detach()) == \
        pytest.approx(0.7)
    assert ours[0].surrogate.slope == 10 and ours[1].surrogate.slope == 5
    assert ours[1].bias is None and ours[1].reset == "zero"


@pytest.mark.parametrize("make, match", [
    (lambda: snn.RLeaky(beta=0.9, all_to_all=False, V=0.5), "all_to_all=False"),
    (lambda: snn.Leaky(beta=0.9, inhibition=True), "inhibition"),
    (lambda: snn.Leaky(beta=0.9, reset_delay=False), "reset_delay=False"),
    (lambda: snn.Leaky(beta=0.9, state_quant=lambda m: m), "state_quant"),
    (lambda: snn.Leaky(beta=0.9, graded_spikes_factor=2.0), "graded spikes"),
    (lambda: snn.Leaky(beta=0.9, spike_grad=lambda m: (m > 0).float()), "callback"),
    (lambda: snn.Leaky(beta=0.9, spike_grad=snn.surrogate.triangular()), "triangular"),
    (lambda: snn.Leaky(beta=0.9, surrogate_disable=True), "surrogate_disable"),
    (lambda: snn.RLeaky(beta=0.9, linear_features=HID, reset_mechanism="zero"),
     "zeroes the step's input"),
    (lambda: snn.Alpha(alpha=0.9, beta=0.8), "supported neurons"),
])
def test_unsupported_options_are_named(make, match):
    net = nn.Sequential(nn.Linear(IN, HID), make())
    with pytest.raises(ValueError, match=match):
        from_snntorch(net)


def test_layout_errors():
    with pytest.raises(ValueError, match="needs a neuron after it"):
        from_snntorch(nn.Sequential(nn.Linear(IN, HID)))
    with pytest.raises(ValueError, match="where an nn.Linear belongs"):
        from_snntorch(nn.Sequential(snn.Leaky(beta=0.9)))
    with pytest.raises(ValueError, match="where an nn.Linear belongs"):
        from_snntorch(nn.Sequential(nn.Conv2d(1, 2, 3), snn.Leaky(beta=0.9)))


@pytest.mark.parametrize("recurrent", [False, True])
def test_to_snntorch_runs_the_same_network(recurrent):
    torch.manual_seed(4)
    ours = nn.Sequential(
        SynapticLayer(IN, HID, alpha=0.6, beta=0.8, recurrent=recurrent, rec_bias=recurrent),
        LIFLayer(HID, HID, beta=torch.linspace(0.6, 0.9, HID), reset="none",
                 surrogate="fast_sigmoid"),
        ReadoutLayer(HID, OUT, beta=0.7),
    )
    with torch.no_grad():
        ours[0].weight.mul_(4.0)
        ours[1].weight.mul_(3.0)
        if recurrent:
            ours[0].rec_bias.normal_(0, 0.3)
    net = to_snntorch(ours)
    assert isinstance(net[1], snn.RSynaptic if recurrent else snn.Synaptic)
    x, _ = data(5)
    reset(net)
    mems = torch.stack([net(x[t])[1] for t in range(T)])
    with torch.no_grad():
        torch.testing.assert_close(ours(x), mems.detach(), rtol=1e-5, atol=1e-5)
    back = from_snntorch(net, readout=True)
    for a, b in zip(ours.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)


def test_to_snntorch_refuses_what_snntorch_lacks():
    with pytest.raises(ValueError, match="no surrogate like"):
        to_snntorch([LIFLayer(4, 3, surrogate="triangle")])
    with pytest.raises(ValueError, match="zero reset"):
        to_snntorch([LIFLayer(4, 3, reset="zero", recurrent=True)])
    with pytest.warns(UserWarning, match="grad_window"):
        to_snntorch([LIFLayer(4, 3, grad_window=0.2)])
