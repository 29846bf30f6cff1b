"""Layer pipelining (snn_ipu.pipelining): a delayed layer reads its input of step t-1.

The yardstick is an independent dense loop written here from the equations of
docs/numerics.md with the delay (LIF subtract reset, ATan surrogate, exact
gradients), not the layers' own code: every backend's pipelined network must give
its spikes, readout membrane and every gradient.
"""

import math

import pytest
import torch
from conftest import assert_rel_close, binary, margin

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, pipeline
from snn_ipu.pipelining import delayed

T, B, IN, H1, H2, OUT = 10, 3, 24, 16, 12, 5
BETA, THR, ALPHA = 0.9, 1.0, 2.0


class _Spike(torch.autograd.Function):
    """H(U - threshold) with snnTorch's ATan surrogate (alpha = 2)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).float()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (ALPHA / 2) / (1 + (math.pi / 2 * ALPHA * x) ** 2)


def _late(x):
    """x[t - 1] at step t, zeros at step 0."""
    return torch.cat([torch.zeros_like(x[:1]), x[:-1]], 0)


def dense_pipelined(x, w1, b1, w2, b2, w3, b3, delay=True):
    """The pipelined network as a plain loop; also returns every membrane."""
    shift = _late if delay else (lambda v: v)
    mems = []

    def lif(inp, w, b):
        u, s, out, us = torch.zeros(B, w.shape[0]), torch.zeros(B, w.shape[0]), [], []
        for t in range(T):
            u = BETA * u + inp[t] @ w.t() + b - s.detach() * THR
            s = _Spike.apply(u - THR)
            out.append(s)
            us.append(u)
        mems.append(torch.stack(us))
        return torch.stack(out)

    s1 = lif(x, w1, b1)
    s2 = lif(shift(s1), w2, b2)
    u, us = torch.zeros(B, OUT), []
    inp = shift(s2)
    for t in range(T):
        u = BETA * u + inp[t] @ w3.t() + b3
        us.append(u)
    return s1, s2, torch.stack(us), mems


def network(backend):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        LIFLayer(IN, H1, beta=BETA, backend=backend),
        LIFLayer(H1, H2, beta=BETA, backend=backend),
        ReadoutLayer(H2, OUT, beta=BETA, backend=backend),
    )
    with torch.no_grad():
        net[0].weight.mul_(5.0)
        net[1].weight.mul_(5.0)
    return net


def tie_free_input(net):
    """An input whose dense-loop membranes keep clear of the threshold."""
    params = [p.detach() for p in net.parameters()]
    for seed in range(60):
        x = binary((T, B, IN), 0.3, seed)
        _, s2, _, mems = dense_pipelined(x, *params)
        if min(margin(m, THR) for m in mems) > 1e-4 and s2.sum() > 0:
            return x
    pytest.fail("no tie-free seed")


def delayed_reference(net, x):
    """The delayed equations on ``net``'s parameters (copies) and ``x``, differentiated
    through a weighted sum of the readout membrane: (s1, s2, u, the loss's weights,
    the parameter copies, the input copy), the copies holding their gradients."""
    xd = x.clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in net.parameters()]
    s1, s2, u, _ = dense_pipelined(xd, *params)
    weights = torch.linspace(0.5, 1.5, u.numel()).reshape(u.shape)
    (u * weights).sum().backward()
    return s1, s2, u, weights, params, xd


def check_against_reference(net, out, xn, u, params, xd):
    """``net``'s readout membrane ``out`` and the gradients its backward pass left
    (parameters, the input ``xn``) against :func:`delayed_reference`'s."""
    assert_rel_close(out.detach(), u.detach(), 1e-5, "readout membrane")
    for (name, p), q in zip(net.named_parameters(), params):
        assert_rel_close(p.grad, q.grad, 1e-4, name)
    assert_rel_close(xn.grad, xd.grad, 1e-4, "input")


# "ipu": the custom ops as PopTorch would emit them, run by the stand-in PopTorch's
# device (tests/poptorch_standin.py), which executes them on the emulator.
BACKENDS = ["reference", "emulator", "ipu_graph", "ipu"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_network_equals_the_delayed_equations(backend, monkeypatch):
    if backend == "ipu":
        from poptorch_standin import install

        install(monkeypatch)._phase = "run"
    net = network(backend)
    assert pipeline(net) == [net[1].name, net[2].name]
    assert [m.input_delay for m in net] == [0, 1, 1]
    x = tie_free_input(net)

    s1, s2, u, weights, params, xd = delayed_reference(net, x)

    xn = x.clone().requires_grad_()
    h1 = net[0](xn)
    h2 = net[1](h1)
    out = net[2](h2)
    (out * weights).sum().backward()

    assert torch.equal(h1.to_dense().detach(), s1.detach())
    assert torch.equal(h2.to_dense().detach(), s2.detach())
    check_against_reference(net, out, xn, u, params, xd)


def test_the_delay_changes_the_result_and_undoing_it_restores_it():
    net = network("reference")
    x = tie_free_input(net)
    params = [p.detach() for p in net.parameters()]
    pipeline(net)
    delayed_out = net(x).detach()
    pipeline(net, enabled=False)
    assert [m.input_delay for m in net] == [0, 0, 0]
    plain_out = net(x).detach()
    # without the delay, exactly the loop without it; with it, something else
    assert_rel_close(plain_out, dense_pipelined(x, *params, delay=False)[2], 1e-5, "plain")
    assert not torch.allclose(plain_out, delayed_out)


def test_delayed_list_moves_every_step_and_drops_the_tail():
    x = binary((5, 2, 7), 0.5, 3)
    s = SparseSpikes.from_dense(x)
    d = delayed(s, 2)
    assert d.ids.shape == s.ids.shape
    assert torch.equal(d.to_dense()[2:], x[:3])
    assert d.to_dense()[:2].sum() == 0
    assert delayed(s, 9).to_dense().sum() == 0
    assert delayed(s, 0) is s


def test_bad_delays_and_carried_state_are_refused():
    layer = LIFLayer(4, 4, backend="reference")
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="input_delay"):
            layer.input_delay = bad
    layer.input_delay = 1
    layer.carry_state = True
    with pytest.raises(ValueError, match="input_delay=1 with carry_state"):
        layer(torch.zeros(3, 1, 4))
    with pytest.raises(ValueError, match="no snn_ipu layers"):
        pipeline(torch.nn.Linear(2, 2))


# The fused time loop (snn_ipu.pipelining.run_fused): the pipelined network as one
# program on ipu_graph, one Repeat forward and one backward holding every layer.


def test_fused_network_equals_the_delayed_equations():
    from snn_ipu.pipelining import run_fused

    net = network("ipu_graph")
    pipeline(net)
    x = tie_free_input(net)
    s1, s2, u, weights, params, xd = delayed_reference(net, x)

    xn = x.clone().requires_grad_()
    out = run_fused(net, xn)
    (out * weights).sum().backward()

    check_against_reference(net, out, xn, u, params, xd)
    # the hidden lists stay in the program; the layers' records still count them
    assert net[0].last_call.total_spikes == int(s1.sum())
    assert net[1].last_call.total_spikes == int(s2.sum())
    assert net[1].last_call.backend == "ipu_graph"


def _recurrent_synaptic(backend):
    from snn_ipu import SynapticLayer

    torch.manual_seed(1)
    net = torch.nn.Sequential(
        LIFLayer(IN, H1, beta=BETA, recurrent=True, grad_window=0.6, max_spikes=12,
                 backend=backend),
        SynapticLayer(H1, H2, alpha=0.7, beta=0.8, grad_window=0.6, max_spikes=9,
                      learn_beta=True, backend=backend),
        ReadoutLayer(H2, OUT, beta=BETA, backend=backend),
    )
    with torch.no_grad():
        net[0].weight.mul_(5.0)
        net[1].weight.mul_(6.0)
    pipeline(net)
    return net


def test_fused_recurrent_synaptic_windowed_network_equals_the_reference():
    """Recurrence, a synaptic layer with a learned decay, windowed gradients and
    capacities under N, on tiles of their own (place): against the reference backend
    running the same pipelined layers one by one."""
    from snn_ipu import place
    from snn_ipu.pipelining import run_fused

    ref, fused = _recurrent_synaptic("reference"), _recurrent_synaptic("ipu_graph")
    fused.load_state_dict(ref.state_dict())
    report = place(fused, B, T)
    assert report.disjoint  # each layer on tiles of its own: the phases run side by side
    x = binary((T, B, IN), 0.3, 5)
    weights = torch.linspace(-1.0, 1.5, T * B * OUT).reshape(T, B, OUT)

    xr = x.clone().requires_grad_()
    ref_out = ref(xr)
    (ref_out * weights).sum().backward()
    xf = x.clone().requires_grad_()
    out = run_fused(fused, xf)
    (out * weights).sum().backward()

    assert ref[0].last_call.total_spikes > 0 and ref[1].last_call.total_spikes > 0
    assert_rel_close(out.detach(), ref_out.detach(), 1e-5, "readout membrane")
    for (name, p), (_, q) in zip(fused.named_parameters(), ref.named_parameters()):
        assert_rel_close(p.grad, q.grad, 1e-4, name)
    assert_rel_close(xf.grad, xr.grad, 1e-4, "input")
    for f, r in zip(fused, ref):
        assert f.last_call.total_spikes == r.last_call.total_spikes


def test_run_fused_refuses_what_it_cannot_fuse():
    from snn_ipu.pipelining import run_fused

    net = network("ipu_graph")
    x = torch.zeros(T, B, IN)
    with pytest.raises(ValueError, match="input_delay=0.*snn_ipu.pipeline"):
        run_fused(net, x)
    pipeline(net)
    net[2].backend = "reference"
    with pytest.raises(ValueError, match="backend='reference'.*ipu_graph"):
        run_fused(net, x)
    with pytest.raises(TypeError, match="nn.Sequential"):
        run_fused(net[0], x)
    reordered = torch.nn.Sequential(net[2], net[0])
    net[2].backend = "ipu_graph"
    net[2].input_delay, net[0].input_delay = 0, 1
    with pytest.raises(ValueError, match="readout before the last layer"):
        run_fused(reordered, torch.zeros(T, B, H2))


def _dropping(backend, overflow):
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        LIFLayer(IN, H1, max_spikes=2, overflow=overflow, grad_window=0.5, backend=backend),
        LIFLayer(H1, H2, max_spikes=2, overflow=overflow, grad_window=0.5, backend=backend),
        ReadoutLayer(H2, OUT, backend=backend),
    )
    with torch.no_grad():
        net[0].weight.mul_(5.0)
        net[1].weight.mul_(5.0)
    pipeline(net)
    return net


def test_fused_network_keeps_the_overflow_policies():
    """Lists cut at their capacity: the fused program's output, gradients and drop
    counts are the reference's; overflow='error' raises as a layer call does."""
    from snn_ipu.overflow import SpikeOverflowError
    from snn_ipu.pipelining import run_fused

    ref, fused = _dropping("reference", "drop"), _dropping("ipu_graph", "drop")
    fused.load_state_dict(ref.state_dict())
    x = binary((T, B, IN), 0.4, 2)
    weights = torch.linspace(-1.0, 1.0, T * B * OUT).reshape(T, B, OUT)
    with pytest.warns(RuntimeWarning, match="capacity max_spikes=2 exceeded"):
        (ref(x) * weights).sum().backward()
    with pytest.warns(RuntimeWarning, match="capacity max_spikes=2 exceeded"):
        out = run_fused(fused, x)
    (out * weights).sum().backward()
    for f, r in zip(fused[:2], ref[:2]):
        assert r.stats["spikes_dropped"] > 0
        for key in ("spikes", "spikes_dropped", "eligible_dropped", "needed_capacity"):
            assert f.stats[key] == r.stats[key], key
    for (name, p), (_, q) in zip(fused.named_parameters(), ref.named_parameters()):
        assert_rel_close(p.grad, q.grad, 1e-4, name)
    with pytest.raises(SpikeOverflowError, match="max_spikes=2 exceeded"):
        run_fused(_dropping("ipu_graph", "error"), x)
