"""carry_state: a sequence run in chunks, each call starting where the last one ended.

Forward: the chunks give the spikes and the final state of one call over the whole
sequence. Backward: the carried state is a constant (truncated BPTT); the gradients
of the second chunk match snnTorch's with the membrane detached at the boundary, and
the emulator's (whose step 0 reads the state in C++) match the reference's.
"""

import copy

import conftest
import pytest
import snntorch as snn
import torch
from conftest import assert_rel_close, binary, margin

from snn_ipu import LayerState, LIFLayer, ReadoutLayer, SynapticLayer
from snn_ipu.backends import ipu

T, B, IN, N = 14, 3, 30, 12
SPLIT = 6


def layer_for(model, reset, recurrent, backend, seed, **kw):
    torch.manual_seed(seed)
    cls = SynapticLayer if model == "synaptic" else LIFLayer
    layer = cls(IN, N, reset=reset, recurrent=recurrent, backend=backend, **kw)
    with torch.no_grad():
        layer.weight.mul_(4.0)
        if recurrent:
            layer.rec_weight.mul_(2.0)
    return layer


def tie_free(model, reset, recurrent, window=None, **kw):
    return conftest.tie_free(
        lambda seed: layer_for(model, reset, recurrent, "reference", seed, grad_window=window,
                               **kw),
        (T, B, IN), window, seeds=30)


def chunked(layer, x):
    layer.carry_state = True
    layer.reset_state()
    outs = [layer(x[:SPLIT]).to_dense(), layer(x[SPLIT:]).to_dense()]
    return torch.cat(outs), layer.state


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("recurrent", [False, True])
def test_chunks_equal_one_call(backend, model, reset, recurrent):
    ref, x = tie_free(model, reset, recurrent)
    layer = copy.deepcopy(ref)
    layer.backend = backend
    layer.carry_state = True
    with torch.no_grad():
        whole = layer(x).to_dense()
        final = layer.state
        parts, state = chunked(layer, x)
    assert whole.sum() > 0 and torch.equal(parts, whole)
    torch.testing.assert_close(state.membrane, final.membrane, atol=1e-5, rtol=0)
    assert torch.equal(state.spikes, whole[-1])
    assert (state.synaptic is not None) == (model == "synaptic")
    if model == "synaptic":
        torch.testing.assert_close(state.synaptic, final.synaptic, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("reset", ["subtract", "zero"])
def test_second_chunk_gradients_are_snntorchs_truncated_bptt(backend, reset):
    """snnTorch: nn.Linear + Leaky over all steps, mem detached after the first chunk,
    loss on the second chunk's spikes."""
    ours, x = tie_free("leaky", reset, False)
    ours.backend = backend
    fc = torch.nn.Linear(IN, N)
    with torch.no_grad():
        fc.weight.copy_(ours.weight)
        fc.bias.copy_(ours.bias)
    lif = snn.Leaky(beta=0.9, threshold=1.0, reset_mechanism=reset)
    weights = torch.randn(T - SPLIT, B, N, generator=torch.Generator().manual_seed(5))
    mem = lif.init_leaky()
    spikes = []
    for t in range(T):
        if t == SPLIT:
            mem = mem.detach()
        spk, mem = lif(fc(x[t]), mem)
        spikes.append(spk)
    (torch.stack(spikes[SPLIT:]) * weights).sum().backward()

    ours.carry_state = True
    with torch.no_grad():
        ours(x[:SPLIT])
    (ours(x[SPLIT:]).to_dense() * weights).sum().backward()
    assert float(fc.weight.grad.abs().max()) > 0
    assert_rel_close(ours.weight.grad, fc.weight.grad, 1e-4, "weight")
    assert_rel_close(ours.bias.grad, fc.bias.grad, 1e-4, "bias")


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("learn_decays", [True, False])
def test_emulator_gradients_from_a_carried_state_equal_the_reference(model, reset, recurrent,
                                                                    learn_decays):
    """Every parameter, learned decays and threshold included: step 0's terms use the
    state's membrane, synaptic current and spikes (and V meets its spikes). Learned
    decays keep the dense state history, whose backward differs from the one that reads
    the lists: both are run."""
    extra = dict(learn_beta=learn_decays, learn_threshold=True,
                 beta=torch.linspace(0.6, 0.95, N))
    if model == "synaptic":  # per neuron: a scalar's gradient is a sum that cancels
        extra.update(learn_alpha=learn_decays, alpha=torch.linspace(0.5, 0.85, N))
    ref, x = tie_free(model, reset, recurrent, window=0.4, **extra)
    assert_second_chunk_gradients_equal(ref, x, more_state_spikes_than=0)


def assert_second_chunk_gradients_equal(ref, x, more_state_spikes_than):
    """The emulator's gradients of a loss on the second chunk equal the reference's on
    every parameter and the input, from a state with more spikes in some sample than
    more_state_spikes_than."""
    emu = copy.deepcopy(ref)
    emu.backend = "emulator"
    readout = torch.randn(T - SPLIT, B, N, generator=torch.Generator().manual_seed(3))
    for layer in (ref, emu):
        layer.carry_state = True
        with torch.no_grad():
            layer(x[:SPLIT])
        assert int(layer.state.spikes.sum(-1).max()) > more_state_spikes_than
        xg = x[SPLIT:].clone().requires_grad_()
        (layer(xg).to_dense() * readout).sum().backward()
        layer.input_grad = xg.grad
    for (name, p_ref), (_, p_emu) in zip(ref.named_parameters(), emu.named_parameters()):
        assert p_ref.grad is not None and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_emu.grad, p_ref.grad, 1e-4, name)
    assert_rel_close(emu.input_grad, ref.input_grad, 1e-4, "input grad")


def test_beta_and_threshold_gradients_see_the_carried_state():
    """By hand, one neuron, one step from U[-1] = 0.5 with S[-1] = 1 (subtract reset):
    U[0] = beta U[-1] + I - thr; the gradients of beta and thr at step 0 need the state."""
    layer = LIFLayer(1, 1, beta=0.8, threshold=1.0, learn_beta=True, learn_threshold=True,
                     bias=False, backend="emulator", grad_window=None)
    with torch.no_grad():
        layer.weight.fill_(2.0)
    layer.carry_state = True
    layer.state = LayerState(torch.tensor([[0.5]]), None, torch.tensor([[1.0]]))
    out = layer(torch.ones(1, 1, 1))  # U[0] = 0.8 * 0.5 + 2 - 1 = 1.4 > 1: a spike
    out.to_dense().sum().backward()
    # dS/dU at U - thr = 0.4 with ATan(2): 1 / (1 + (pi * 0.4)^2)
    d = 1.0 / (1.0 + (torch.pi * 0.4) ** 2)
    assert float(layer.beta.grad) == pytest.approx(d * 0.5, rel=1e-5)
    # dU/dthr = -S[-1] = -1, and dS/dthr = -dS/dU directly
    assert float(layer.threshold.grad) == pytest.approx(-2 * d, rel=1e-5)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_readout_chunks_equal_one_call(backend):
    torch.manual_seed(1)
    ref = ReadoutLayer(IN, 5, beta=torch.linspace(0.5, 0.9, 5), learn_beta=True,
                       backend=backend)
    x = binary((T, B, IN), 0.3, 1)
    whole = ref(x).detach()
    ref.carry_state = True
    parts = torch.cat([ref(x[:SPLIT]).detach(), ref(x[SPLIT:])])
    torch.testing.assert_close(parts.detach(), whole, atol=1e-5, rtol=0)
    torch.testing.assert_close(ref.state.membrane, whole[-1], atol=1e-5, rtol=0)


def test_readout_beta_gradient_from_a_carried_state_equals_the_reference():
    torch.manual_seed(2)
    ref = ReadoutLayer(IN, 5, beta=torch.linspace(0.5, 0.9, 5), learn_beta=True,
                       backend="reference")
    emu = copy.deepcopy(ref)
    emu.backend = "emulator"
    x = binary((T, B, IN), 0.3, 2)
    for layer in (ref, emu):
        layer.carry_state = True
        with torch.no_grad():
            layer(x[:SPLIT])
        (layer(x[SPLIT:]) ** 2).sum().backward()
    for (name, p_ref), (_, p_emu) in zip(ref.named_parameters(), emu.named_parameters()):
        assert_rel_close(p_emu.grad, p_ref.grad, 1e-4, name)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_a_state_for_another_batch_is_refused_until_reset(backend):
    layer = LIFLayer(IN, N, backend=backend)
    layer.carry_state = True
    layer(binary((4, 3, IN), 0.3, 0))
    with pytest.raises(ValueError, match=r"is \(3, 12\), this call needs \(2, 12\).*reset_state"):
        layer(binary((4, 2, IN), 0.3, 0))
    layer.reset_state()
    layer(binary((4, 2, IN), 0.3, 0))
    assert layer.state.membrane.shape == (2, N)


def test_without_carry_state_every_call_starts_from_zero():
    layer = LIFLayer(IN, N, backend="emulator")
    x = binary((T, B, IN), 0.3, 4)
    first = layer(x).to_dense()
    assert torch.equal(layer(x).to_dense(), first) and layer.state is None


CAP = 3  # below the spikes of a sample at the chunks' boundary: the list drops some


def dropping_at_the_boundary(model, window=None, **kw):
    """A recurrent layer whose list (capacity CAP, overflow "drop") drops spikes of
    some sample at step SPLIT - 1, the first chunk's last step."""
    for seed in range(40):
        layer = layer_for(model, "subtract", True, "reference", seed, grad_window=window,
                          max_spikes=CAP, overflow="drop", **kw)
        layer.overflow_warned = True  # the drops are the point here
        x = binary((T, B, IN), 0.25, seed)
        layer.record_membrane = True
        with torch.no_grad():
            layer(x)
        layer.record_membrane = False
        U = layer.last_membrane
        if margin(U, 1.0, window) > 1e-4 and int((U[SPLIT - 1] > 1.0).sum(-1).max()) > CAP:
            return layer, x
    pytest.fail("no tie-free seed that drops at the boundary")


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("model", ["leaky", "synaptic"])
def test_recurrent_chunks_with_drop_equal_one_call(backend, model):
    """Step 0 of the second chunk takes the state's lowest-numbered CAP spikes as its
    recurrent input, as the one call's step SPLIT takes its list, and all of them reset."""
    ref, x = dropping_at_the_boundary(model)
    layer = copy.deepcopy(ref)
    layer.backend = backend
    layer.carry_state = True
    with torch.no_grad():
        whole = layer(x).to_dense()
        parts, _ = chunked(layer, x)
    assert layer.stats["spikes_dropped"] > 0
    assert torch.equal(parts, whole)
    # the state keeps every spike of the last step (they reset), not just the listed ones
    assert int(layer.state.spikes.sum(-1).max()) >= int(whole[-1].sum(-1).max())


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("learn_beta", [True, False])
def test_emulator_gradients_from_a_dropped_carried_state_equal_the_reference(model,
                                                                            learn_beta):
    """V's gradient at step 0 meets the recurrent input the list kept (CAP of the
    state's spikes); the reset terms meet all of them (with the dense state history a
    learned beta keeps, and without it)."""
    ref, x = dropping_at_the_boundary(model, window=0.4, learn_beta=learn_beta,
                                      learn_threshold=True)
    assert_second_chunk_gradients_equal(ref, x, more_state_spikes_than=CAP)


def test_what_carry_state_cannot_do_is_refused():
    recurrent = LIFLayer(IN, N, recurrent=True, max_spikes=2, overflow="error")
    recurrent.carry_state = True
    recurrent.state = LayerState(torch.zeros(B, N), None, torch.ones(B, N))
    with pytest.raises(ValueError, match="the carried state has 12 spikes in a sample"):
        recurrent(binary((4, B, IN), 0.0, 0))
    layer = LIFLayer(IN, N)
    layer.carry_state = True
    with pytest.raises(ValueError, match="not supported on the ipu backend"):
        ipu.spiking_layer(layer.config(), None, None, None)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
@pytest.mark.parametrize("reentrant", [True, False])
def test_a_carried_state_is_not_moved_on_by_a_checkpoints_recomputation(backend, reentrant):
    """torch.utils.checkpoint runs the call again in the backward pass, which started
    from the state the call had ended in and moved it on a second time: the gradients
    and every later chunk were silently another sequence's. The recomputation is
    refused, and the state stays where the chunk's one call ended."""
    from torch.utils.checkpoint import checkpoint

    x = binary((T, B, IN), 0.3, 5)
    layer = layer_for("leaky", "subtract", False, backend, 0)
    expected = layer_for("leaky", "subtract", False, "reference", 0)
    for each in (layer, expected):
        each.carry_state = True
    expected(x[:SPLIT])
    assert 0 < expected.stats["activity"] < 1
    inputs = x[:SPLIT].clone().requires_grad_()  # the reentrant form needs one
    out = checkpoint(lambda spikes: layer(spikes).to_dense(), inputs, use_reentrant=reentrant)
    with pytest.raises(RuntimeError, match=r"carry_state.*recomputed.*checkpoint"):
        out.sum().backward()
    torch.testing.assert_close(layer.state.membrane, expected.state.membrane)
    torch.testing.assert_close(layer.state.spikes, expected.state.spikes)


@pytest.mark.parametrize("reset", ["subtract", "zero"])
def test_snntorchs_reset_after_the_threshold_moved_between_chunks(backend, reset):
    """docs/numerics.md, "Time and state": where a learned threshold moved between two
    chunks, snnTorch resets step 0 by H(U[-1] - new threshold); the state's spikes
    recomputed so, as the docs say, give snnTorch's second chunk: spikes, membranes and
    gradients (the weight, the bias and the threshold)."""
    ours, x = tie_free("leaky", reset, False, learn_threshold=True)
    ours.backend = backend
    fc = torch.nn.Linear(IN, N)
    with torch.no_grad():
        fc.weight.copy_(ours.weight)
        fc.bias.copy_(ours.bias)
    lif = snn.Leaky(beta=0.9, threshold=torch.tensor(1.0), learn_threshold=True,
                    reset_mechanism=reset)
    mem = lif.reset_mem()
    with torch.no_grad():
        for t in range(SPLIT):
            _, mem = lif(fc(x[t]), mem)
    ours.carry_state = True
    with torch.no_grad():
        ours(x[:SPLIT])
    # the step an optimizer could take: the threshold just below the highest membrane
    # that spiked, so that this neuron spiked but snnTorch does not reset it
    state = ours.state
    moved = float(state.membrane[state.spikes > 0].max()) + 1e-3
    with torch.no_grad():
        ours.threshold.fill_(moved)
        lif.threshold.fill_(moved)
    assert bool(((state.membrane > moved).float() != state.spikes).any())
    ours.state = state._replace(spikes=(state.membrane > ours.threshold.detach()).float())

    weights = torch.randn(T - SPLIT, B, N, generator=torch.Generator().manual_seed(5))
    spikes, mems = [], []
    mem = mem.detach()
    for t in range(SPLIT, T):
        spk, mem = lif(fc(x[t]), mem)
        spikes.append(spk)
        mems.append(mem)
    (torch.stack(spikes) * weights).sum().backward()
    ours.record_membrane = True
    out = ours(x[SPLIT:]).to_dense()
    (out * weights).sum().backward()
    assert torch.equal(out.detach(), torch.stack(spikes).detach())
    assert_rel_close(ours.last_membrane, torch.stack(mems).detach(), 1e-6, "membrane")
    assert_rel_close(ours.weight.grad, fc.weight.grad, 1e-4, "weight")
    assert_rel_close(ours.bias.grad, fc.bias.grad, 1e-4, "bias")
    assert_rel_close(ours.threshold.grad, lif.threshold.grad, 1e-4, "threshold")
