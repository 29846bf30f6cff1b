"""The reference backend, the ground truth of every other backend's tests, held to the
numerics contract itself (docs/numerics.md, docs/guide.md): a plain float64 loop over
steps, samples and neurons written from the documents alone, with nothing of snn_ipu's
but the layers under test. It covers what comparing backends with each other cannot:
the window's eligible set and its surrogate mask, the list order, overflow="drop" (which
entries are kept, that a dropped spike still resets its neuron and is neither passed on
nor fed back through V), carry_state over two chunks, input_delay, and the gradient of
``to_dense`` at eligible-only entries."""

import itertools
import math
import random
import warnings

import pytest
import torch

from snn_ipu import LIFLayer, SparseSpikes, SynapticLayer


def _heaviside(x, near):
    """H(x), with ATan(2)'s derivative 1 / (1 + (pi x)^2) where ``near`` and 0 elsewhere
    (the derivative of atan(pi x) / pi, added as a zero-valued term)."""
    p = torch.atan(math.pi * x) / math.pi
    return (x > 0).to(x.dtype) + (p - p.detach()) * near.to(x.dtype)


def _listed(spiking, eligible, capacity):
    """One (t, b)'s list: (neuron, is_spike), spikes first, then eligible-only neurons,
    each by ascending id; the first ``capacity`` kept (overflow="drop")."""
    entries = [(n, True) for n, s in enumerate(spiking) if s]
    entries += [(n, False) for n, (s, e) in enumerate(zip(spiking, eligible)) if e and not s]
    return entries if capacity is None else entries[:capacity]


def _loop(x, listed_in, p, opt, state=None):
    """The layer's steps as the documents write them. x: [T, B, in] input values (0 at
    eligible-only input entries), their gradient only where ``listed_in``; p: the
    parameters (float64); state: (U, syn, S) of the previous chunk, constants."""
    T, B, _ = x.shape
    N = p["weight"].shape[0]
    d = opt["delay"]
    x = x * listed_in.to(x.dtype)
    x = torch.cat([x.new_zeros((d,) + x.shape[1:]), x[:T - d]]) if d else x
    beta, thr = p["beta"].clamp(0, 1), p["threshold"]
    U, syn, s_prev = (x.new_zeros(B, N),) * 3 if state is None else state
    r_prev = x.new_zeros(B, N)  # the previous step's list: what V reads
    if state is not None:
        for b in range(B):
            for n, _ in _listed(s_prev[b].tolist(), [False] * N, opt["capacity"]):
                r_prev[b, n] = s_prev[b, n]
    spikes, membrane, lists = [], [], {}
    for t in range(T):
        current = x[t] @ p["weight"].t() + p["bias"]
        if opt["recurrent"]:
            current = current + r_prev @ p["rec_weight"].t()
        if opt["model"] == "synaptic":
            syn = p["alpha"].clamp(0, 1) * syn + current
            current = syn
        if opt["reset"] == "subtract":
            U = beta * U + current - s_prev * thr
        elif opt["reset"] == "zero" and opt["model"] == "synaptic":
            U = (1 - s_prev) * (beta * U + current)
        elif opt["reset"] == "zero":
            U = beta * (1 - s_prev) * U + current
        else:
            U = beta * U + current
        u = U.detach()
        spiking = u > thr.detach()
        near = torch.ones_like(spiking) if opt["window"] is None else \
            u > thr.detach() - opt["window"]
        S = _heaviside(U - thr, near)
        keep = torch.zeros(B, N)
        for b in range(B):
            lists[t, b] = _listed(spiking[b].tolist(), near[b].tolist(), opt["capacity"])
            for n, _ in lists[t, b]:
                keep[b, n] = 1
        r_prev = S * keep.to(S.dtype)
        s_prev = S.detach()  # every spike resets, listed or dropped
        spikes.append(S)
        membrane.append(u)
    return torch.stack(spikes), torch.stack(membrane), lists, (U.detach(), syn.detach(), s_prev)


def _layer(seed, model, reset, recurrent, window, capacity, learn):
    rnd = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    n_in, n = rnd.randint(2, 8), rnd.randint(3, 10)
    kw = dict(reset=reset, recurrent=recurrent, grad_window=window, max_spikes=capacity,
              overflow="drop", learn_beta=learn, learn_threshold=learn, backend="reference",
              beta=torch.rand(n, generator=g) * 0.8 + 0.1,
              threshold=torch.rand(n, generator=g) * 0.8 + 0.6)
    layer = (SynapticLayer(n_in, n, alpha=torch.rand(n, generator=g) * 0.8 + 0.1,
                           learn_alpha=learn, **kw) if model == "synaptic"
             else LIFLayer(n_in, n, **kw))
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, n_in, generator=g) * rnd.uniform(0.6, 1.5))
        layer.bias.copy_(torch.randn(n, generator=g) * 0.2)
        if recurrent:
            layer.rec_weight.copy_(torch.randn(n, n, generator=g) * 0.5)
    return layer.double(), g


NAMES = ("weight", "bias", "rec_weight", "beta", "threshold", "alpha")


def _compare(seed, model, reset, recurrent, window, capacity, mode):
    """None where a membrane lies within 1e-6 of a decision line (a tie), else asserts."""
    layer, g = _layer(seed, model, reset, recurrent, window, capacity, learn=seed % 2 == 1)
    T, B = 8, random.Random(seed).randint(1, 3)
    layer.carry_state = mode == "carry"
    layer.input_delay = 2 if mode == "delay" else 0
    layer.record_membrane = True
    x = (torch.rand(T, B, layer.in_features, generator=g) < 0.35).double()
    eligible_in = (torch.rand(x.shape, generator=g) < 0.3) & (x == 0)
    weights = torch.randn(T, B, layer.out_features, generator=g, dtype=torch.float64)
    chunks = [(0, 4), (4, T)] if mode == "carry" else [(0, T)]
    p = {k: getattr(layer, k).detach().clone().requires_grad_()
         for k in NAMES if getattr(layer, k, None) is not None}
    opt = dict(model=model, reset=reset, recurrent=recurrent, window=window,
               capacity=None if capacity is None else min(capacity, layer.out_features),
               delay=layer.input_delay)
    x_loop = x.clone().requires_grad_()
    loss, state, expected = 0, None, []
    for a, b in chunks:
        S, U, lists, state = _loop(x_loop[a:b], ((x > 0) | eligible_in)[a:b], p, opt, state)
        state = tuple(s.float().double() for s in state)  # a carried state is float32
        if min(float((U - p["threshold"].detach()).abs().min()), math.inf if window is None
               else float((U - (p["threshold"].detach() - window)).abs().min())) < 1e-6:
            return None
        loss = loss + sum(S[t, b_, n] * weights[a + t, b_, n]
                          for (t, b_), entries in lists.items() for n, _ in entries)
        expected.append((U, lists))
    x_ref = x.clone().requires_grad_()
    loss_ref = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # drop's warning
        for (a, b), (U, lists) in zip(chunks, expected):
            out = layer(SparseSpikes.from_dense(x_ref[a:b], eligible=eligible_in[a:b]))
            torch.testing.assert_close(layer.last_membrane, U, rtol=1e-9, atol=1e-9)
            for (t, b_), entries in lists.items():
                k = int(out.counts[t, b_, 1])
                assert out.ids[t, b_, :k].tolist() == [n for n, _ in entries], (t, b_)
                assert int(out.counts[t, b_, 0]) == sum(s for _, s in entries), (t, b_)
                assert out.values[t, b_, :k].tolist() == [float(s) for _, s in entries]
            loss_ref = loss_ref + (out.to_dense() * weights[a:b]).sum()
    if not torch.is_tensor(loss) or not loss.requires_grad:
        return True
    loss.backward()
    loss_ref.backward()
    got = {"x": x_ref.grad, **{k: getattr(layer, k).grad for k in p}}
    want = {"x": x_loop.grad, **{k: v.grad for k, v in p.items()}}
    for k, v in want.items():
        if isinstance(getattr(layer, k, None), torch.Tensor) and \
                not getattr(layer, k).requires_grad:
            continue  # a fixed constant
        have = got[k] if got[k] is not None else torch.zeros_like(v)
        torch.testing.assert_close(have.reshape(v.shape), v, rtol=1e-7, atol=1e-9 * (
            1 + float(v.abs().max())), msg=lambda m, k=k: f"{k}: {m}")
    return True


@pytest.mark.parametrize("model,reset,recurrent,window", list(itertools.product(
    ["leaky", "synaptic"], ["subtract", "zero", "none"], [False, True], [0.0, 0.3, None])))
def test_reference_follows_the_documented_loop(model, reset, recurrent, window):
    compared = 0
    for i, (capacity, mode) in enumerate(itertools.product([None, 1, 3],
                                                           ["plain", "carry", "delay"])):
        for seed in range(100 * i, 100 * i + 5):  # the first tie-free seed
            if _compare(seed, model, reset, recurrent, window, capacity, mode):
                compared += 1
                break
    assert compared == 9


def test_a_dropped_spike_resets_but_is_neither_passed_on_nor_fed_back():
    """By hand: two spikes at t=0 and room for one. Neuron 1's spike is dropped: it still
    resets (U1[1] = 0.5 * 2.4 - 1 = 0.2, not 1.2), reaches neither the list nor V (U2[1] =
    0.6 from neuron 0 alone, not 1.2) and gets no gradient; at t=1 the one entry is the
    lowest eligible-only neuron, whose value 0 carries dL/dS (to_dense's gradient)."""
    layer = LIFLayer(2, 3, beta=0.5, threshold=1.0, bias=False, recurrent=True, max_spikes=1,
                     overflow="drop", grad_window=None, backend="reference").double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[2.0, 0], [2.4, 0], [0, 0]]))
        layer.rec_weight.copy_(torch.tensor([[0.0, 0, 0], [0, 0, 0], [0.6, 0.6, 0]]))
    layer.record_membrane = True
    x = torch.tensor([[[1.0, 0]], [[0.0, 0]]], dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="dropped 1 spikes"):
        out = layer(x)
    torch.testing.assert_close(layer.last_membrane, torch.tensor(
        [[[2.0, 2.4, 0.0]], [[0.0, 0.2, 0.6]]], dtype=torch.float64))
    assert out.ids[:, 0, 0].tolist() == [0, 0] and out.counts[:, 0].tolist() == [[1, 1], [0, 1]]
    assert out.values[:, 0, 0].tolist() == [1.0, 0.0]
    out.to_dense().sum().backward()
    # dL/dU0[0] = sg(2 - 1) + beta * sg(0 - 1), sg(x) = 1 / (1 + (pi x)^2)
    sg = 1 / (1 + math.pi ** 2)
    torch.testing.assert_close(layer.weight.grad, torch.tensor(
        [[1.5 * sg, 0], [0, 0], [0, 0]], dtype=torch.float64))
    # V's row 0 gets dL/dU0[1] R[0] = sg(-1) at the kept spike of neuron 0, none at 1
    torch.testing.assert_close(layer.rec_weight.grad, torch.tensor(
        [[sg, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.float64))
