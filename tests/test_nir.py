"""NIR: ours -> NIR -> ours, snnTorch's export_to_nir -> ours, and NIR's equations
stepped by hand."""

import nir
import numpy as np
import pytest
import snntorch as snn
import torch
from snntorch.export_nir import export_to_nir as snntorch_export
from torch import nn

from snn_ipu import (
    LIFLayer,
    ReadoutLayer,
    SynapticLayer,
    export_to_nir,
    import_from_nir,
)

T, B, IN, HID, OUT = 20, 4, 12, 10, 3


def data(seed, p=0.3):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(T, B, IN, generator=g) < p).float()


def our_model(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(
        LIFLayer(IN, HID, beta=torch.linspace(0.6, 0.95, HID), threshold=0.8, reset="zero"),
        SynapticLayer(HID, HID, alpha=0.7, beta=0.85, reset="zero", recurrent=True,
                      rec_bias=True, bias=False),
        LIFLayer(HID, HID, beta=0.9, threshold=torch.linspace(0.5, 1.5, HID), reset="zero",
                 recurrent=True),
        ReadoutLayer(HID, OUT, beta=0.8),
    )
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(3.0)
        model[1].rec_bias.normal_(0, 0.2)
    return model


def run(model, x):
    """Every layer's output, dense."""
    outs = []
    with torch.no_grad():
        for layer in model:
            x = layer(x)
            outs.append(x if isinstance(x, torch.Tensor) else x.to_dense())
    return outs


def test_round_trip_gives_identical_outputs(tmp_path, backend):
    model = our_model(0)
    graph = export_to_nir(model, data(0), synaptic_as_cubalif=True)
    assert {type(n).__name__ for n in graph.nodes.values()} >= {"Affine", "Linear", "LIF",
                                                                "CubaLIF", "LI"}
    nir.write(tmp_path / "model.nir", graph)  # through NIR's file format too
    back = import_from_nir(nir.read(tmp_path / "model.nir"), backend=backend,
                           cubalif_as_synaptic=True)
    assert [type(m) for m in back] == [type(m) for m in model]
    x = data(1)
    expected, got = run(model, x), run(back, x)
    assert 0 < float(expected[0].mean()) < 0.8 and float(expected[2].sum()) > 0
    for i, (a, b) in enumerate(zip(expected, got)):
        if i < 3:
            assert torch.equal(a, b), f"layer {i} spikes"
        else:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), back.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=0, msg=name)


def snntorch_feed_forward(seed):
    torch.manual_seed(seed)

    def per_neuron(n, value):
        return torch.full((n,), value)

    net = nn.Sequential(
        nn.Linear(IN, HID),
        snn.Leaky(beta=torch.linspace(0.7, 0.95, HID), threshold=per_neuron(HID, 1.0),
                  reset_mechanism="zero", init_hidden=True),
        nn.Linear(HID, OUT),
        snn.Synaptic(alpha=per_neuron(OUT, 0.6), beta=per_neuron(OUT, 0.8),
                     threshold=per_neuron(OUT, 1.0), reset_mechanism="zero", init_hidden=True,
                     output=True),
    )
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[2].weight.mul_(3.0)
    return net


def snntorch_recurrent(seed):
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(IN, HID),
        snn.RSynaptic(alpha=0.6, beta=0.85, linear_features=HID, reset_mechanism="zero",
                      init_hidden=True),
        nn.Linear(HID, OUT),
        snn.RSynaptic(alpha=0.7, beta=0.8, linear_features=OUT, reset_mechanism="zero",
                      init_hidden=True, output=True),
    )
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[2].weight.mul_(3.0)
        net[1].recurrent.bias.normal_(0, 0.2)
    return net


def snntorch_spikes(net, x):
    for module in net.modules():
        if isinstance(module, snn.SpikingNeuron):
            module.reset_mem()
    with torch.no_grad():
        return torch.stack([net(x[t])[0] for t in range(x.shape[0])])


@pytest.mark.parametrize("make", [snntorch_feed_forward, snntorch_recurrent])
def test_snntorch_export_imports_with_snntorchs_outputs(make, backend):
    net = make(2)
    graph = snntorch_export(net, torch.zeros(IN))
    ours = import_from_nir(graph, backend=backend, cubalif_as_synaptic=True)
    assert len(ours) == 2 and ours[0].recurrent == (make is snntorch_recurrent)
    x = data(3)
    expected = snntorch_spikes(net, x)
    assert 0 < float(expected.mean()) < 0.9
    with torch.no_grad():
        assert torch.equal(ours(x).to_dense(), expected)


def euler_lif(x, w, b, tau, r, v_leak, v_thr, dt):
    """NIR's LIF stepped with forward Euler in float64, numpy: the independent reference."""
    v = np.zeros((x.shape[1], w.shape[0]))
    out = []
    for t in range(x.shape[0]):
        current = x[t] @ w.T + b
        v = v + dt / tau * (v_leak - v + r * current)
        spikes = (v > v_thr).astype(float)
        out.append(spikes)
        v = np.where(spikes > 0, 0.0, v)
    return np.stack(out)


def test_gain_and_leak_of_a_hand_made_graph_follow_nirs_equation():
    dt = 1e-3
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1.5, (HID, IN)).astype(np.float32)
    b = rng.normal(0, 0.1, HID).astype(np.float32)
    tau = np.linspace(5e-3, 2e-2, HID).astype(np.float32)
    r = np.linspace(2.0, 6.0, HID).astype(np.float32)  # a gain dt r / tau != 1
    v_leak = np.linspace(-0.3, 0.5, HID).astype(np.float32)
    v_thr = np.full(HID, 0.9, dtype=np.float32)
    graph = nir.NIRGraph(
        nodes={"in": nir.Input(np.array([IN])), "fc": nir.Affine(weight=w, bias=b),
               "lif": nir.LIF(tau=tau, r=r, v_leak=v_leak, v_threshold=v_thr),
               "out": nir.Output(np.array([HID]))},
        edges=[("in", "fc"), ("fc", "lif"), ("lif", "out")])
    model = import_from_nir(graph, dt=dt)
    x = data(4).numpy().astype(np.float64)
    expected = euler_lif(x, w.astype(np.float64), b.astype(np.float64), tau.astype(np.float64),
                         r.astype(np.float64), v_leak.astype(np.float64), 0.9, dt)
    assert 0 < expected.mean() < 0.9
    with torch.no_grad():
        got = model(torch.from_numpy(x).float()).to_dense().numpy()
    assert (got != expected).mean() < 0.002  # float32 against float64 at threshold ties


def test_export_refuses_resets_nir_cannot_express():
    with pytest.raises(ValueError, match="resets by 'subtract'"):
        export_to_nir(nn.Sequential(LIFLayer(4, 3)))
    with pytest.raises(ValueError, match="beta = 1"):
        export_to_nir(nn.Sequential(ReadoutLayer(4, 3, beta=1.0)))
    with pytest.raises(ValueError, match="sample_data has 5 features"):
        export_to_nir(nn.Sequential(ReadoutLayer(4, 3)), torch.zeros(5))


def test_import_refuses_what_it_cannot_express():
    one = np.ones(3, dtype=np.float32)
    base = {"in": nir.Input(np.array([4])), "fc": nir.Linear(weight=np.ones((3, 4))),
            "out": nir.Output(np.array([3]))}
    edges = [("in", "fc"), ("fc", "n"), ("n", "out")]
    for node, match in [
        (nir.LIF(tau=one * 1e-3, r=one * 10, v_leak=one * 0, v_threshold=one,
                 v_reset=one * 0.5), "v_reset"),
        (nir.IF(r=one, v_threshold=one), "supported neurons"),
        (nir.CubaLIF(tau_syn=one * 1e-3, tau_mem=one * 1e-3, r=one * 10, v_leak=one,
                     v_threshold=one), "v_leak"),
        (nir.LIF(tau=one * 1e-5, r=one, v_leak=one * 0, v_threshold=one), "tau must be"),
    ]:
        graph = nir.NIRGraph(nodes={**base, "n": node}, edges=edges)
        with pytest.raises(ValueError, match=match):
            import_from_nir(graph, cubalif_as_synaptic=True)
