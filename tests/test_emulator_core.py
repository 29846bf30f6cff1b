"""The host executor (snn_ipu._C) against an independent dense float64
PyTorch implementation of the numerics contract, with autograd gradients."""

import math

import numpy as np
import pytest
import torch

from snn_ipu import SparseSpikes
from snn_ipu._codes import MODELS, OVERFLOWS, RESETS
from snn_ipu._codes import SURROGATES as KINDS
from snn_ipu._native import _C
from snn_ipu.backends.emulator import spike_matmul

LEAKY, SYNAPTIC, READOUT = MODELS["leaky"], MODELS["synaptic"], MODELS["readout"]
SUBTRACT, ZERO, NONE = RESETS["subtract"], RESETS["zero"], RESETS["none"]
ERROR, DROP, GROW = OVERFLOWS["error"], OVERFLOWS["drop"], OVERFLOWS["grow"]
INF = float("inf")
SURROGATES = [(KINDS["atan"], 2.0, 0.0), (KINDS["fast_sigmoid"], 5.0, 0.0),
              (KINDS["sigmoid"], 4.0, 0.0), (KINDS["triangle"], 1.5, 0.7),
              (KINDS["straight_through"], 0.0, 0.0)]
MARGIN = 1e-4


# ---------------------------------------------------------------- reference


def surrogate_derivative(kind, p0, p1, x):
    if kind == 0:
        return (p0 / 2) / (1 + (math.pi / 2 * p0 * x) ** 2)
    if kind == 1:
        return 1 / (p0 * x.abs() + 1) ** 2
    if kind == 2:
        e = torch.exp(-p0 * x)
        return p0 * e / (e + 1) ** 2
    if kind == 3:
        return p1 * torch.clamp(1 - x.abs() / p0, min=0)
    return torch.ones_like(x)


class Spike(torch.autograd.Function):
    """Heaviside forward; surrogate derivative only inside the grad window."""

    @staticmethod
    def forward(ctx, x, kind, p0, p1, window):
        ctx.save_for_backward(x)
        ctx.params = (kind, p0, p1, window)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        kind, p0, p1, window = ctx.params
        eligible = (x > -window).to(x.dtype)
        return g * surrogate_derivative(kind, p0, p1, x) * eligible, None, None, None, None


def dense_input(ids, counts, values, in_features):
    T, B, _ = ids.shape
    x = torch.zeros(T, B, in_features, dtype=torch.float64)
    for t in range(T):
        for b in range(B):
            n = counts[t, b, 1]
            x[t, b].index_put_((torch.from_numpy(ids[t, b, :n]).long(),), values[t, b, :n])
    return x


def reference(p, values, cap=None, currents=None):
    """Dense float64 simulation; returns per-step U, S, syn and listed-spike masks.
    cap: truncate the recurrent (listed) spikes to the first `cap` ids.
    currents: a list that receives I[t] (with retain_grad) for dL/dI checks."""
    T, B, _ = p["in_ids"].shape
    x = dense_input(p["in_ids"], p["in_counts"], values, p["W"].shape[1])
    N = p["W"].shape[0]
    U = torch.zeros(B, N, dtype=torch.float64)
    syn = torch.zeros_like(U)
    S_prev = torch.zeros_like(U)  # the spikes that recur
    reset = torch.zeros_like(U)  # the spikes that fired (a dropped one still resets)
    kind, p0, p1 = p["surrogate"]
    Us, Ss, syns = [], [], []
    for t in range(T):
        current = x[t] @ p["W"].T
        if p["b"] is not None:
            current = current + p["b"]
        if p["V"] is not None:
            current = current + S_prev @ p["V"].T
        if currents is not None:
            current.retain_grad()
            currents.append(current)
        beta, thr = p["beta"], p["thr"]
        if p["model"] == READOUT:
            U = beta * U + current
            Us.append(U)
            continue
        if p["model"] == SYNAPTIC:
            syn = p["alpha"] * syn + current
            current = syn
            syns.append(syn)
        if p["reset"] == SUBTRACT:
            U = beta * U + current - reset * thr
        elif p["reset"] == ZERO:
            U = (1 - reset) * (beta * U + current) if p["model"] == SYNAPTIC else (
                beta * (1 - reset) * U + current)
        else:
            U = beta * U + current
        S = Spike.apply(U - thr, kind, p0, p1, p["window"])
        Us.append(U)
        Ss.append(S)
        reset = S.detach()
        if cap is not None:  # only the first `cap` spikes (ascending id) recur
            S = S * (torch.cumsum(S.detach(), dim=1) <= cap)
        S_prev = S
    stack = lambda xs: torch.stack(xs) if xs else None  # noqa: E731
    return stack(Us), stack(Ss), stack(syns)


def expected_lists(U, S, thr, window):
    """Per (t, b): spike ids ascending, then eligible-only ids ascending."""
    T, B, _ = U.shape
    lists = {}
    for t in range(T):
        for b in range(B):
            u = U[t, b].detach().numpy()
            s = S[t, b].detach().numpy() > 0
            e = (u > thr - window) & ~s
            lists[t, b] = (np.flatnonzero(s), np.flatnonzero(e))
    return lists


def margins_ok(U, thr, window):
    u = U.detach().numpy()
    ok = np.abs(u - thr).min() > MARGIN
    if math.isfinite(window):
        ok &= np.abs(u - (thr - window)).min() > MARGIN
    return ok


# ------------------------------------------------------------ problem setup


def random_list(rng, T, B, n_ids, p_spike, p_eligible):
    """A list of T*B rows; p_spike and p_eligible may be functions of the step."""
    rows = []
    for r in range(T * B):
        ps, pe = (p(r // B) if callable(p) else p for p in (p_spike, p_eligible))
        perm = rng.permutation(n_ids)
        n_s = rng.binomial(n_ids, ps)
        n_e = rng.binomial(n_ids - n_s, pe)
        rows.append((np.sort(perm[:n_s]), np.sort(perm[n_s:n_s + n_e])))
    K = max(1, max(len(s) + len(e) for s, e in rows)) + 2
    ids = np.zeros((T, B, K), np.int32)
    counts = np.zeros((T, B, 2), np.int32)
    for r, (s, e) in enumerate(rows):
        t, b = divmod(r, B)
        ids[t, b, :len(s) + len(e)] = np.concatenate([s, e])
        counts[t, b] = (len(s), len(s) + len(e))
    return ids, counts


def make_problem(seed, model, reset, recurrent, window, surrogate=SURROGATES[0],
                 T=10, B=3, n_in=20, n_out=13, bias=True, half=False, p_spike=0.3,
                 p_eligible=0.2):
    rng = np.random.default_rng(seed)
    in_ids, in_counts = random_list(rng, T, B, n_in, p_spike, p_eligible)
    W = rng.normal(0, 0.6, (n_out, n_in))
    V = rng.normal(0, 0.5, (n_out, n_out))
    if half:
        W = W.astype(np.float16).astype(np.float64)
        V = V.astype(np.float16).astype(np.float64)
    p = dict(
        model=model, reset=reset, window=window, surrogate=surrogate, half=half,
        in_ids=in_ids, in_counts=in_counts,
        W=torch.tensor(W, requires_grad=True),
        b=torch.tensor(rng.normal(0, 0.2, n_out), requires_grad=True) if bias else None,
        V=torch.tensor(V, requires_grad=True) if recurrent else None,
        beta=torch.tensor(rng.uniform(0.5, 0.95, n_out), requires_grad=True),
        thr=torch.tensor(rng.uniform(0.5, 1.5, n_out), requires_grad=True),
        alpha=torch.tensor(rng.uniform(0.3, 0.9, n_out), requires_grad=True),
    )
    return p


def in_values(p):
    c = p["in_counts"]
    k = np.arange(p["in_ids"].shape[2])
    v = (k[None, None, :] < c[..., :1]).astype(np.float64)
    return torch.tensor(v, requires_grad=True)


def f32(t):
    return np.ascontiguousarray(t.detach().numpy().astype(np.float32))


def weight_arg(p, name):
    w = p[name].detach().numpy()
    return w.astype(np.float16 if p["half"] else np.float32)


def layer_call(p, tile_starts, threads, sample_groups=1):
    """The executor's LayerCall of a problem."""
    c = _C.LayerCall()
    kind, param, height = p["surrogate"]
    c.neuron.model, c.neuron.reset, c.neuron.surrogate = p["model"], p["reset"], kind
    c.neuron.surrogate_param, c.neuron.surrogate_height = param, height
    c.neuron.grad_window = p["window"]
    c.tile_starts = np.asarray(tile_starts, np.int32)
    c.sample_groups, c.num_threads = sample_groups, threads
    c.in_ids, c.in_counts = p["in_ids"], p["in_counts"]
    c.weight = weight_arg(p, "W")
    c.bias = f32(p["b"]) if p["b"] is not None else None
    c.rec_weight = weight_arg(p, "V") if p["V"] is not None else None
    c.beta = f32(p["beta"])
    if p["model"] != READOUT:
        c.threshold = f32(p["thr"])
    if p["model"] == SYNAPTIC:
        c.alpha = f32(p["alpha"])
    return c


FORWARD_FIELDS = {"ids": "ids", "counts": "counts", "membrane": "membrane",
                  "values": "values", "dropped_ids": "dropped_ids",
                  "dropped_counts": "dropped_counts", "dense_membrane": "dense_membrane",
                  "dense_syn": "dense_synaptic", "spikes_dropped": "spikes_dropped",
                  "eligible_dropped": "eligible_dropped",
                  "needed_capacity": "needed_capacity", "total_spikes": "total_spikes",
                  "eligible_listed": "eligible_listed", "overflow_at": "overflow_at"}
NEEDS = ("input", "weight", "bias", "rec_weight", "beta", "threshold", "alpha")


def run_forward(p, tile_starts, threads=1, capacity=0, overflow=GROW, keep=True,
                sample_groups=1):
    c = _C.ForwardCall()
    c.layer = layer_call(p, tile_starts, threads, sample_groups)
    c.capacity, c.overflow, c.keep_dense_state = capacity, overflow, keep
    res = _C.layer_forward(c)
    if p["model"] == READOUT:  # the membrane alone: its arrays that are not None
        return {key: getattr(res, field) for key, field in FORWARD_FIELDS.items()
                if isinstance(getattr(res, field), np.ndarray)}
    return {key: getattr(res, field) for key, field in FORWARD_FIELDS.items()
            if getattr(res, field) is not None or key == "overflow_at"}


def run_backward(p, tile_starts, fwd, grad_out, threads=1, needs=(True,) * 7,
                 return_grad_current=False, sample_groups=1, **lists):
    c = _C.BackwardCall()
    c.layer = layer_call(p, tile_starts, threads, sample_groups)
    if p["model"] != READOUT:
        c.out_ids, c.out_counts = fwd["ids"], fwd["counts"]
    c.membrane, c.grad_out = fwd["membrane"], grad_out
    c.dense_membrane = fwd.get("dense_membrane")
    c.dense_synaptic = fwd.get("dense_syn")
    for name, value in zip(NEEDS, needs):
        setattr(c.needs, name, value)
    c.needs.current = return_grad_current
    for name, value in lists.items():
        setattr(c, name, value)
    res = _C.layer_backward(c)
    names = ["grad_in_values", "grad_weight", "grad_bias", "grad_rec_weight", "grad_beta",
             "grad_threshold", "grad_alpha", "grad_current"]
    return {n: getattr(res, n) for n in names if getattr(res, n) is not None}


def partitions(n, rng):
    small = [0]
    while small[-1] < n:
        small.append(min(n, small[-1] + int(rng.integers(1, 4))))
    return [[0, n], small, [0, 1, 9, n]]


def assert_grad(got, ref, name):
    ref = ref.detach().numpy()
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def assert_same(a, b):
    """Bit-identical results; the membrane list only at its listed entries (the
    executor leaves the padding unwritten, nothing reads it)."""
    assert a.keys() == b.keys()
    for k in a:
        if k == "membrane" and "counts" in a:
            listed = np.arange(a[k].shape[2])[None, None, :] < a["counts"][..., 1:]
            assert np.array_equal(a[k][listed], b[k][listed]), k
        elif isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


# -------------------------------------------------------------------- tests


def solvable_problem(seed, *args, **kwargs):
    """A problem whose reference membrane keeps clear of threshold and window
    edges, so float32 and float64 must agree on every spike."""
    for s in range(seed, seed + 50):
        p = make_problem(s, *args, **kwargs)
        U, S, syn = reference(p, in_values(p))
        if p["model"] == READOUT or margins_ok(U, p["thr"].detach().numpy(), p["window"]):
            return p
    raise AssertionError("no problem without threshold ties")


def check_spiking(p, tilings, seed):
    """Forward lists and all gradients for every tiling, 1 and 2 threads."""
    values = in_values(p)
    U, S, syn = reference(p, values)
    thr = p["thr"].detach().numpy()
    lists = expected_lists(U, S, thr, p["window"])
    needed = max(len(s) + len(e) for s, e in lists.values())
    Un = U.detach().numpy()
    T, B, _ = Un.shape
    ids = np.zeros((T, B, max(1, needed)), np.int32)
    counts = np.zeros((T, B, 2), np.int32)
    for (t, b), (s, e) in lists.items():
        ids[t, b, :len(s) + len(e)] = np.concatenate([s, e])
        counts[t, b] = (len(s), len(s) + len(e))
    listed = np.arange(ids.shape[2])[None, None, :] < counts[..., 1:]

    grad_out = np.random.default_rng(seed + 1).normal(0, 1, ids.shape).astype(np.float32)
    G = torch.zeros_like(U)
    for t, b in np.ndindex(T, B):
        n = counts[t, b, 1]
        G[t, b, ids[t, b, :n]] = torch.from_numpy(grad_out[t, b, :n]).double()
    (G * S).sum().backward()

    for tiles in tilings:
        fwd = run_forward(p, tiles)
        assert_same(fwd, run_forward(p, tiles, threads=2))
        # A sample's forward never meets another sample's: any grouping, same bits.
        for groups in (2, B):
            assert_same(fwd, run_forward(p, tiles, threads=2, sample_groups=groups))
        assert np.array_equal(fwd["ids"], ids) and np.array_equal(fwd["counts"], counts)
        assert fwd["needed_capacity"] == needed
        assert fwd["total_spikes"] == int(S.sum())
        assert fwd["spikes_dropped"] == 0 and fwd["eligible_dropped"] == 0
        assert fwd["overflow_at"] is None
        expect_membrane = np.take_along_axis(Un, ids, axis=2)
        np.testing.assert_allclose(fwd["membrane"][listed], expect_membrane[listed], atol=1e-5,
                                   rtol=0)
        np.testing.assert_allclose(fwd["dense_membrane"], Un, atol=1e-5, rtol=0)
        if p["model"] == SYNAPTIC:
            np.testing.assert_allclose(fwd["dense_syn"], syn.detach().numpy(), atol=1e-5,
                                       rtol=0)

        for groups in (1, 2, B):
            bwd = run_backward(p, tiles, fwd, grad_out, sample_groups=groups)
            assert_same(bwd, run_backward(p, tiles, fwd, grad_out, threads=2,
                                          sample_groups=groups))
            got_in = bwd["grad_in_values"]
            past = np.arange(got_in.shape[2])[None, None, :] >= p["in_counts"][..., 1:]
            assert not got_in[past].any()
            assert_grad(got_in, values.grad, "input")
            assert_grad(bwd["grad_weight"], p["W"].grad, "weight")
            assert_grad(bwd["grad_bias"], p["b"].grad, "bias")
            assert_grad(bwd["grad_beta"], p["beta"].grad, "beta")
            assert_grad(bwd["grad_threshold"], p["thr"].grad, "threshold")
            if p["V"] is not None:
                assert_grad(bwd["grad_rec_weight"], p["V"].grad, "rec_weight")
            else:
                assert "grad_rec_weight" not in bwd
            if p["model"] == SYNAPTIC:
                assert_grad(bwd["grad_alpha"], p["alpha"].grad, "alpha")
            else:
                assert "grad_alpha" not in bwd


CASES = [(m, r, rec, w) for m in (LEAKY, SYNAPTIC) for r in (SUBTRACT, ZERO, NONE)
         for rec in (False, True) for w in (INF, 0.3, 0.0)]


@pytest.mark.parametrize("model,reset,recurrent,window", CASES)
def test_spiking_layer_matches_reference(model, reset, recurrent, window):
    seed = CASES.index((model, reset, recurrent, window))
    surrogate = SURROGATES[seed % len(SURROGATES)]
    p = solvable_problem(100 * seed, model, reset, recurrent, window, surrogate)
    check_spiking(p, partitions(p["W"].shape[0], np.random.default_rng(seed)), seed)


@pytest.mark.parametrize("recurrent", [False, True])
def test_rows_of_unequal_cost_match_reference(recurrent):
    # The threads share a call's rows by their listed entries, not by number: here
    # the first half of the steps lists nothing and the rest ever more, as when a
    # layer's activity builds up from rest, so the shares' row ranges differ
    # from an even split. Any split must give the same bits as one thread.
    T = 12
    p = solvable_problem(1300, LEAKY, SUBTRACT, recurrent, 0.3, T=T, B=4, n_in=30, n_out=40,
                         p_spike=lambda t: 0.0 if t < T // 2 else 0.9 * (t + 1) / T,
                         p_eligible=lambda t: 0.0 if t < T // 2 else 0.05)
    assert not p["in_counts"][: T // 2].any() and p["in_counts"][-1, :, 0].min() > 20
    check_spiking(p, [[0, 40], [0, 16, 24, 40]], 13)


@pytest.mark.parametrize("recurrent,half", [(False, False), (True, False), (True, True)])
def test_wide_tiles_match_reference(recurrent, half):
    # Tile widths whose padded rows take the row kernels' chunk sizes: whole chunks
    # then a shorter one (19 vectors = 16 + 3 in the adds, 8 + 8 + 3 in the
    # scatters), single chunks of 15, 11, 8, 7, 5 and 4 vectors, and lists long
    # enough for the four-row dot product; half weights take the same chunks.
    p = solvable_problem(900, LEAKY, SUBTRACT, recurrent, 0.3, T=4, B=2, n_in=40, n_out=150,
                         half=half)
    check_spiking(p, [[0, 150], [0, 56, 113, 150], [0, 64, 150], [0, 120, 150]], 9)


@pytest.mark.parametrize("model,reset", [(LEAKY, SUBTRACT), (LEAKY, ZERO), (SYNAPTIC, NONE)])
def test_full_lists_read_in_place_give_the_tile_major_bits(model, reset):
    # A list of every neuron (exact gradients) is read in place by the tiles of a
    # backward call, any other list through a tile-major copy: the same list with
    # one padding column more takes the copy, and every gradient keeps its bits;
    # both give the dense reference's gradients.
    p = solvable_problem(1500 + 10 * model + reset, model, reset, False, INF, n_out=29)
    values = in_values(p)
    U, S, _ = reference(p, values)
    one_tile = run_forward(p, [0, 29])
    ids, counts = one_tile["ids"], one_tile["counts"]
    assert ids.shape[2] == 29 and (counts[..., 1] == 29).all()
    grad_out = np.random.default_rng(15).normal(0, 1, ids.shape).astype(np.float32)
    G = torch.zeros_like(U)
    for t, b in np.ndindex(*counts.shape[:2]):
        G[t, b, ids[t, b]] = torch.from_numpy(grad_out[t, b]).double()
    (G * S).sum().backward()
    pad = ((0, 0), (0, 0), (0, 1))
    for tiles in ([0, 8, 16, 29], [0, 1, 9, 10, 29]):
        fwd = run_forward(p, tiles)
        assert np.array_equal(fwd["ids"], ids)
        padded = {**fwd, "ids": np.pad(ids, pad), "membrane": np.pad(fwd["membrane"], pad)}
        for threads, groups in ((1, 1), (2, 1), (2, 3)):
            in_place = run_backward(p, tiles, fwd, grad_out, threads=threads,
                                    sample_groups=groups, return_grad_current=True)
            copied = run_backward(p, tiles, padded, np.pad(grad_out, pad), threads=threads,
                                  sample_groups=groups, return_grad_current=True)
            assert_same(in_place, copied)
            assert_grad(in_place["grad_in_values"], values.grad, "input")
            assert_grad(in_place["grad_weight"], p["W"].grad, "weight")
            assert_grad(in_place["grad_bias"], p["b"].grad, "bias")
            assert_grad(in_place["grad_beta"], p["beta"].grad, "beta")


@pytest.mark.parametrize("bias", [True, False])
def test_readout_matches_reference(bias):
    p = make_problem(7, READOUT, SUBTRACT, False, INF, bias=bias)
    values = in_values(p)
    U, _, _ = reference(p, values)
    rng = np.random.default_rng(8)
    grad_out = rng.normal(0, 1, U.shape).astype(np.float32)
    (torch.from_numpy(grad_out).double() * U).sum().backward()
    for tiles in partitions(p["W"].shape[0], rng):
        fwd = run_forward(p, tiles)
        assert list(fwd) == ["membrane"]
        np.testing.assert_allclose(fwd["membrane"], U.detach().numpy(), atol=1e-5, rtol=0)
        bwd = run_backward(p, tiles, fwd, grad_out)
        assert_same(bwd, run_backward(p, tiles, fwd, grad_out, threads=2))
        assert_grad(bwd["grad_in_values"], values.grad, "input")
        assert_grad(bwd["grad_weight"], p["W"].grad, "weight")
        assert_grad(bwd["grad_beta"], p["beta"].grad, "beta")
        assert ("grad_bias" in bwd) == bias
        if bias:
            assert_grad(bwd["grad_bias"], p["b"].grad, "bias")
        assert "grad_threshold" not in bwd and "grad_rec_weight" not in bwd


@pytest.mark.parametrize("model,recurrent", [(LEAKY, True), (SYNAPTIC, False)])
def test_half_weights_match_reference_with_rounded_weights(model, recurrent):
    # The reference uses the float16-rounded weights in float64; the executor
    # accumulates in float32, so the float tolerances hold unchanged.
    p = solvable_problem(300, model, SUBTRACT, recurrent, 0.3, half=True)
    check_spiking(p, [[0, 5, 8, 13]], 300)


def test_fixed_capacity_drop_keeps_first_entries():
    p = solvable_problem(400, LEAKY, SUBTRACT, False, INF)
    full = run_forward(p, [0, 4, 13])
    K = full["needed_capacity"] // 2
    got = run_forward(p, [0, 4, 13], capacity=K, overflow=DROP)
    assert got["ids"].shape[2] == K
    counts = full["counts"]
    spikes_dropped = eligible_dropped = 0
    for t, b in np.ndindex(*counts.shape[:2]):
        ns, n = counts[t, b]
        keep = min(n, K)
        assert np.array_equal(got["ids"][t, b, :keep], full["ids"][t, b, :keep])
        assert np.array_equal(got["membrane"][t, b, :keep], full["membrane"][t, b, :keep])
        assert tuple(got["counts"][t, b]) == (min(ns, K), keep)
        spikes_dropped += max(0, ns - K)
        eligible_dropped += (n - ns) - (keep - min(ns, K))
    assert got["spikes_dropped"] == spikes_dropped
    assert got["eligible_dropped"] == eligible_dropped
    assert got["needed_capacity"] == full["needed_capacity"]
    assert got["overflow_at"] is not None


def test_error_policy_reports_first_overflow():
    p = solvable_problem(410, LEAKY, ZERO, False, 0.3)
    full = run_forward(p, [0, 13])
    K = max(1, full["needed_capacity"] - 1)
    got = run_forward(p, [0, 13], capacity=K, overflow=ERROR)
    listed = full["counts"][..., 1].reshape(-1)
    first = int(np.flatnonzero(listed > K)[0])
    t, b = divmod(first, full["counts"].shape[1])
    assert got["overflow_at"] == (t, b, int(full["counts"][t, b, 0]), int(listed[first]))


def test_grow_and_auto_capacity():
    p = solvable_problem(420, SYNAPTIC, SUBTRACT, True, 0.3)
    auto = run_forward(p, [0, 7, 13])
    needed = auto["needed_capacity"]
    assert needed >= 2
    assert_same(auto, run_forward(p, [0, 7, 13], capacity=needed // 2, overflow=GROW))
    for overflow in (GROW, ERROR, DROP):
        big = run_forward(p, [0, 7, 13], capacity=needed + 5, overflow=overflow)
        assert big["ids"].shape[2] == needed + 5 and big["overflow_at"] is None
        assert np.array_equal(big["ids"][..., :needed], auto["ids"])
        assert not big["ids"][..., needed:].any()
        assert np.array_equal(big["counts"], auto["counts"])


def test_recurrent_drop_feeds_back_only_listed_spikes():
    for seed in range(500, 560):
        p = make_problem(seed, LEAKY, SUBTRACT, True, 0.0, n_in=30, n_out=16)
        full = run_forward(p, [0, 16])
        K = max(1, int(full["counts"][..., 0].max()) - 2)
        U, S, _ = reference(p, in_values(p), cap=K)
        if margins_ok(U, p["thr"].detach().numpy(), 0.0) and full["spikes_dropped"] == 0:
            break
    got = run_forward(p, [0, 3, 11, 16], capacity=K, overflow=DROP)
    assert got["spikes_dropped"] > 0
    Sn = S.detach().numpy() > 0
    np.testing.assert_allclose(got["dense_membrane"], U.detach().numpy(), atol=1e-5, rtol=0)
    for t, b in np.ndindex(*Sn.shape[:2]):
        expect = np.flatnonzero(Sn[t, b])[:K]
        assert np.array_equal(got["ids"][t, b, :got["counts"][t, b, 1]], expect)
    assert got["total_spikes"] == int(Sn.sum())


def test_threads_bit_identical_on_larger_layer():
    p = make_problem(600, SYNAPTIC, SUBTRACT, True, 0.5, T=16, B=4, n_in=64, n_out=150)
    tiles = list(range(0, 150, 7)) + [150]
    fwd = [run_forward(p, tiles, threads=n) for n in (1, 2, 2)]
    assert fwd[0]["total_spikes"] > 0
    assert_same(fwd[0], fwd[1])
    assert_same(fwd[1], fwd[2])
    grad_out = np.random.default_rng(1).normal(0, 1, fwd[0]["ids"].shape).astype(np.float32)
    bwd = [run_backward(p, tiles, fwd[0], grad_out, threads=n) for n in (1, 2, 2)]
    assert_same(bwd[0], bwd[1])
    assert_same(bwd[1], bwd[2])


@pytest.mark.parametrize("capacity", [3, 8, 17])
def test_input_rows_of_every_length_reach_the_currents(capacity):
    # The executor repacks the input list's spikes step by step (block copies of
    # 8 ids, then the rest, split between threads by step): rows from empty to
    # full, with eligible-only entries after the spikes that must add nothing,
    # compared with the dense float64 reference at every step and sample.
    T, B, n_in = 9, 5, 24
    p = make_problem(31, LEAKY, NONE, False, INF, T=T, B=B, n_in=n_in, n_out=40)
    rng = np.random.default_rng(capacity)
    ids = np.zeros((T, B, capacity), np.int32)
    counts = np.zeros((T, B, 2), np.int32)
    for r in range(T * B):
        t, b = divmod(r, B)
        listed = r % (capacity + 1)  # every length from 0 to capacity, all spikes
        spikes = listed if r < T * B // 2 else rng.integers(0, listed + 1)
        ids[t, b, :listed] = np.sort(rng.choice(n_in, listed, replace=False))
        counts[t, b] = (spikes, listed)
    p["in_ids"], p["in_counts"] = ids, counts
    U, _, _ = reference(p, in_values(p))
    for threads in (1, 2, 3):
        fwd = run_forward(p, [0, 16, 40], threads=threads)
        np.testing.assert_allclose(fwd["dense_membrane"], U.detach().numpy(), atol=1e-5, rtol=0)


def test_needs_select_outputs():
    p = solvable_problem(700, SYNAPTIC, ZERO, True, INF)
    fwd = run_forward(p, [0, 13])
    grad_out = np.ones(fwd["ids"].shape, np.float32)
    full = run_backward(p, [0, 13], fwd, grad_out)
    only = run_backward(p, [0, 13], fwd, grad_out, needs=(False, True) + (False,) * 5)
    assert list(only) == ["grad_weight"]
    assert np.array_equal(only["grad_weight"], full["grad_weight"])
    no_dense = dict(fwd, dense_membrane=np.zeros(0, np.float32))
    with pytest.raises(ValueError):
        run_backward(p, [0, 13], no_dense, grad_out)


def test_hostile_arguments_raise():
    p = make_problem(800, LEAKY, SUBTRACT, True, INF)
    good = run_forward(p, [0, 13])
    bad_id = dict(p, in_ids=p["in_ids"].copy())
    bad_id["in_ids"][0, 0, 0] = 20
    bad_id["in_counts"] = p["in_counts"].copy()
    bad_id["in_counts"][0, 0] = (1, 1)
    with pytest.raises(ValueError, match=r"id 20 at t=0, b=0, k=0 out of range \[0, 20\)"):
        run_forward(bad_id, [0, 13])
    neg = dict(bad_id, in_ids=bad_id["in_ids"].copy())
    neg["in_ids"][0, 0, 0] = -1
    with pytest.raises(ValueError, match="id -1 at t=0, b=0, k=0 out of range"):
        run_forward(neg, [0, 13])
    too_many = dict(p, in_counts=p["in_counts"].copy())
    too_many["in_counts"][1, 0] = (0, p["in_ids"].shape[2] + 1)
    with pytest.raises(ValueError, match="at t=1, b=0 are inconsistent or exceed capacity"):
        run_forward(too_many, [0, 13])
    inverted = dict(p, in_counts=p["in_counts"].copy())
    inverted["in_counts"][1, 0] = (2, 1)
    with pytest.raises(ValueError, match=r"counts \(2, 1\) at t=1, b=0"):
        run_forward(inverted, [0, 13])
    # the scan the emulator runs before every forward call: the same errors, and the
    # number of spikes listed
    assert _C.check_spike_list(p["in_ids"], p["in_counts"], 20) == int(p["in_counts"][..., 0].sum())
    with pytest.raises(ValueError, match="id -1 at t=0, b=0, k=0 out of range"):
        _C.check_spike_list(neg["in_ids"], neg["in_counts"], 20)
    for tiles in ([0, 5, 5, 13], [0, 8, 4, 13], [1, 13], [0, 12], [0, 14], [0]):
        with pytest.raises(ValueError):
            run_forward(p, tiles)
    grad_out = np.zeros(good["ids"].shape, np.float32)
    t, b = np.argwhere(good["counts"][..., 0] >= 2)[0]
    swapped = dict(good, ids=good["ids"].copy())
    swapped["ids"][t, b, :2] = swapped["ids"][t, b, 1::-1]
    with pytest.raises(ValueError):
        run_backward(p, [0, 13], swapped, grad_out)
    out_of_range = dict(good, ids=good["ids"].copy(), counts=good["counts"].copy())
    out_of_range["counts"][0, 0] = (0, 1)
    out_of_range["ids"][0, 0, 0] = 13
    with pytest.raises(ValueError, match="output list id 13 at t=0, b=0, k=0 out of range"):
        run_backward(p, [0, 13], out_of_range, grad_out)
    with pytest.raises(ValueError):
        run_backward(p, [0, 13], good, grad_out[:, :, :-1] if grad_out.shape[2] > 1
                     else np.zeros((1, 1, 1), np.float32))
    twice = dict(good, ids=good["ids"].copy(), counts=good["counts"].copy())
    twice["counts"][0, 0] = (1, 2)
    twice["ids"][0, 0, :2] = (4, 4)
    with pytest.raises(ValueError):
        run_backward(p, [0, 13], twice, grad_out)
    T, B = good["counts"].shape[:2]

    def first_row(n):
        counts = np.zeros((T, B), np.int32)
        counts[0, 0] = n
        return counts

    for ids, counts in [([3], first_row(0)),            # counts do not sum to the ids
                        ([13], first_row(1)),           # id out of range
                        ([5, 2], first_row(2)),         # not ascending
                        ([1], np.ones(T, np.int32))]:   # counts not [T, B]
        with pytest.raises(ValueError, match="dropped"):
            run_backward(p, [0, 13], good, grad_out, dropped_ids=np.array(ids, np.int32),
                         dropped_counts=counts)
    wrong_dtype = _C.ForwardCall()
    wrong_dtype.layer = layer_call(p, [0, 13], 1)
    wrong_dtype.layer.weight = np.zeros((13, 20), np.int64)
    with pytest.raises(ValueError, match="weight must be float32 or float16"):
        _C.layer_forward(wrong_dtype)
    no_threshold = _C.ForwardCall()
    no_threshold.layer = layer_call(p, [0, 13], 1)
    no_threshold.layer.threshold = None
    with pytest.raises(ValueError, match="a spiking layer needs a threshold"):
        _C.layer_forward(no_threshold)


@pytest.mark.parametrize("model,recurrent,window", [
    (LEAKY, False, INF), (LEAKY, False, 0.3), (SYNAPTIC, False, 0.3), (SYNAPTIC, False, INF),
    (LEAKY, True, 0.3), (SYNAPTIC, True, INF), (READOUT, False, INF)])
def test_grad_current_matches_reference(model, recurrent, window):
    """return_grad_current: dL/dI[t,b,n] of the dense reference (gsyn for the
    synaptic model, gU for the readout), also when the executor skips its
    input and weight gradients (needs[0] = needs[1] = False)."""
    seed = 900 + 10 * model + 5 * recurrent + (window == INF)
    p = solvable_problem(seed, model, SUBTRACT, recurrent, window, n_out=21)
    values = in_values(p)
    currents = []
    U, S, _ = reference(p, values, currents=currents)
    rng = np.random.default_rng(seed)
    tiles = [0, 5, 8, 21]
    fwd = run_forward(p, tiles)
    if model == READOUT:
        grad_out = rng.normal(0, 1, U.shape).astype(np.float32)
        (torch.from_numpy(grad_out).double() * U).sum().backward()
    else:
        ids, counts = fwd["ids"], fwd["counts"]
        grad_out = rng.normal(0, 1, ids.shape).astype(np.float32)
        G = torch.zeros_like(U)
        for t, b in np.ndindex(*counts.shape[:2]):
            n = counts[t, b, 1]
            G[t, b, ids[t, b, :n]] = torch.from_numpy(grad_out[t, b, :n]).double()
        (G * S).sum().backward()
    ref = torch.stack([c.grad for c in currents])
    full = run_backward(p, tiles, fwd, grad_out, return_grad_current=True)
    got = full["grad_current"]
    assert got.dtype == np.float32 and got.shape == tuple(ref.shape)
    assert_grad(got, ref, "grad_current")
    assert "grad_current" not in run_backward(p, tiles, fwd, grad_out)
    skip = (False, False) + (True,) * 5
    lean = run_backward(p, tiles, fwd, grad_out, needs=skip, return_grad_current=True)
    assert "grad_in_values" not in lean and "grad_weight" not in lean
    assert np.array_equal(lean["grad_current"], got)
    assert_same(lean, run_backward(p, tiles, fwd, grad_out, threads=2, needs=skip,
                                   return_grad_current=True))
    # The dense GEMMs the Python side does with it give the sparse results.
    x = dense_input(p["in_ids"], p["in_counts"], values.detach(), p["W"].shape[1])
    g = torch.from_numpy(got).double()
    W = torch.from_numpy(weight_arg(p, "W").astype(np.float64))
    np.testing.assert_allclose(torch.einsum("tbn,tbi->ni", g, x).numpy(),
                               full["grad_weight"], rtol=1e-4, atol=1e-4)
    gx = (g @ W).numpy()
    k = p["in_ids"].shape[2]
    listed = np.arange(k)[None, None, :] < p["in_counts"][..., 1:]
    np.testing.assert_allclose(np.where(listed, np.take_along_axis(gx, p["in_ids"], 2), 0),
                               full["grad_in_values"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("plan_target", ["host", "ipu2"])
def test_spike_matmul_kernel_matches_dense(dtype, plan_target):
    gen = torch.Generator().manual_seed(3)
    T, B, n_in, n_out = 7, 5, 90, 150
    x = (torch.rand(T, B, n_in, generator=gen) < 0.2).float()
    x[-1, 0] = 0  # no input at the last step: nothing of the earlier steps may remain
    only = (torch.rand(T, B, n_in, generator=gen) < 0.1) & (x == 0)
    spikes = SparseSpikes.from_dense(x, eligible=only)  # eligible-only entries add nothing
    w = torch.randn(n_out, n_in, generator=gen).to(dtype)
    currents, seconds, adds = spike_matmul(spikes, w, plan_target=plan_target)
    expect = x[-1].double() @ w.double().t()  # each step sets the currents
    np.testing.assert_allclose(currents.numpy(), expect.numpy(), rtol=1e-5, atol=1e-4)
    assert not currents[0].any()
    assert adds == int(x.sum()) * n_out
    assert seconds > 0


def test_spike_matmul_rejects_wrong_weight_shape():
    spikes = SparseSpikes.from_dense(torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match=r"weight must be \[out, 4\]"):
        spike_matmul(spikes, torch.zeros(3, 5))


def compact(ids, counts):
    """The listed ids of a [T, B, K] list, row after row (numpy's spelling)."""
    listed = np.arange(ids.shape[2])[None, None, :] < counts[..., 1:]
    return np.ascontiguousarray(ids[listed], dtype=np.int32)


@pytest.mark.parametrize("recurrent", [False, True])
def test_compact_lists_give_the_padded_lists_gradients(recurrent):
    """The emulator's backward reads compact private copies of its lists
    (_C.compact_list): bit for bit the gradients of the [T, B, K] lists, over tiles
    that split rows; the scan of a compact list finds what it finds in a padded one."""
    p = solvable_problem(1300, LEAKY, SUBTRACT, recurrent, 0.3)
    tiles = [0, 4, 9, 13]
    fwd = run_forward(p, tiles)
    grad_out = np.random.default_rng(1).normal(size=fwd["values"].shape).astype(np.float32)
    padded = run_backward(p, tiles, fwd, grad_out)
    in_ids, in_spikes = _C.compact_list(p["in_ids"], p["in_counts"])
    out_ids, out_spikes = _C.compact_list(fwd["ids"], fwd["counts"])
    assert np.array_equal(in_ids, compact(p["in_ids"], p["in_counts"]))
    assert np.array_equal(out_ids, compact(fwd["ids"], fwd["counts"]))
    assert in_spikes == int(p["in_counts"][..., 0].sum())
    assert out_spikes == int(fwd["counts"][..., 0].sum())
    for scan in (True, False):
        c = _C.BackwardCall()
        c.layer = layer_call(dict(p, in_ids=in_ids), tiles, 1)
        c.layer.in_capacity = p["in_ids"].shape[2]
        c.out_ids, c.out_counts = out_ids, fwd["counts"]
        c.membrane, c.grad_out = fwd["membrane"], grad_out
        c.dense_membrane = fwd["dense_membrane"]
        c.scan_lists = scan
        for name in NEEDS:
            setattr(c.needs, name, True)
        res = _C.layer_backward(c)
        for name, want in padded.items():
            assert np.array_equal(getattr(res, name), want), name


@pytest.mark.parametrize("model, recurrent, window", [
    (LEAKY, False, 0.3), (LEAKY, True, 0.3), (SYNAPTIC, False, INF)])
@pytest.mark.parametrize("tiles, groups, threads", [([0, 13], 1, 1), ([0, 4, 9, 13], 1, 2),
                                                    ([0, 5, 13], 2, 2)])
def test_forward_private_copy_is_the_compact_output_list(model, recurrent, window, tiles,
                                                         groups, threads):
    """The forward writes the backward's private copy of its output list as it combines
    the tiles' lists: numpy's compaction of the [T, B, K] list it returns, its counts in
    memory of their own, its listed spikes counted, with the capacity dropping entries
    and without."""
    p = solvable_problem(1310, model, SUBTRACT, recurrent, window)
    needed = run_forward(p, tiles)["needed_capacity"]
    for capacity, overflow in ((0, GROW), (max(1, needed // 2), DROP)):
        c = _C.ForwardCall()
        c.layer = layer_call(p, tiles, threads, groups)
        c.capacity, c.overflow = capacity, overflow
        res = _C.layer_forward(c)
        if overflow == DROP:
            assert res.eligible_dropped + res.spikes_dropped > 0  # the capacity cut rows
        assert np.array_equal(res.private_ids, compact(res.ids, res.counts))
        assert np.array_equal(res.private_counts, res.counts)
        assert not np.shares_memory(res.private_counts, res.counts)
        assert res.private_spikes == int(res.counts[..., 0].sum())


def test_compact_lists_are_checked():
    p = make_problem(1301, LEAKY, SUBTRACT, False, 0.3)
    fwd = run_forward(p, [0, 13])
    grad_out = np.zeros_like(fwd["values"])
    K = p["in_ids"].shape[2]

    def backward(in_ids, out_ids, capacity=K, in_counts=p["in_counts"], scan=True):
        c = _C.BackwardCall()
        c.scan_lists = scan
        c.layer = layer_call(dict(p, in_ids=in_ids, in_counts=in_counts), [0, 13], 1)
        c.layer.in_capacity = capacity
        c.out_ids, c.out_counts = out_ids, fwd["counts"]
        c.membrane, c.grad_out = fwd["membrane"], grad_out
        c.needs.input = c.needs.weight = True
        return _C.layer_backward(c)

    in_ids = compact(p["in_ids"], p["in_counts"])
    out_ids = compact(fwd["ids"], fwd["counts"])
    backward(in_ids, out_ids)  # as made: accepted
    with pytest.raises(ValueError, match="input list lists .* entries in its counts but has"):
        backward(in_ids[:-1], out_ids)
    with pytest.raises(ValueError, match="output list lists .* entries in its counts but has"):
        backward(in_ids, np.append(out_ids, 0).astype(np.int32))
    with pytest.raises(ValueError, match="exceed capacity"):
        backward(in_ids, out_ids, capacity=int(p["in_counts"][..., 1].max()) - 1)
    # each fault of a row's counts, at a row past the first, named by its step and sample,
    # with the entries scanned and without (the emulator's private copies)
    t, b = np.argwhere(p["in_counts"][..., 1] >= 1)[-1]
    listed = int(p["in_counts"][t, b, 1])
    for faulty in ((listed + 1, listed), (-1, listed), (0, -1), (0, K + 1)):
        counts = p["in_counts"].copy()
        counts[t, b] = faulty
        for scan in (True, False):
            with pytest.raises(ValueError, match=rf"input list counts \({faulty[0]}, "
                                                 rf"{faulty[1]}\) at t={t}, b={b} are "
                                                 "inconsistent"):
                backward(in_ids, out_ids, in_counts=counts, scan=scan)
    bad = in_ids.copy()
    bad[0] = 20
    with pytest.raises(ValueError, match=r"input list id 20 .* out of range \[0, 20\)"):
        backward(bad, out_ids)
    with pytest.raises(ValueError, match="in_ids must be"):  # the forward takes [T, B, K]
        run_forward(dict(p, in_ids=in_ids), [0, 13])
    counts = p["in_counts"].copy()
    counts[0, 0] = (0, K + 1)
    with pytest.raises(ValueError, match="exceed capacity"):
        _C.compact_list(p["in_ids"], counts)


@pytest.mark.parametrize("model, recurrent", [(LEAKY, False), (LEAKY, True), (READOUT, False)])
@pytest.mark.parametrize("tiles, groups, threads", [([0, 13], 1, 1), ([0, 4, 9, 13], 1, 2),
                                                    ([0, 5, 13], 2, 2), ([0, 13], 3, 3)])
def test_forward_copies_and_scans_its_input(model, recurrent, tiles, groups, threads):
    """``copy_input``: the sparse path takes the backward's private copy of its input list
    as it repacks it: numpy's compaction of the list and a copy of its counts, with its
    spike total, and the same results as a call that does not copy; it scans the list
    as it goes (the first faulty row named, the padding never read, nothing returned);
    and where the spikes are more than ``dense_above`` it runs nothing."""
    p = make_problem(1320, model, SUBTRACT, recurrent, 0.3, T=12, B=6)
    ids, counts = p["in_ids"], p["in_counts"]
    K = ids.shape[2]
    ids[np.arange(K)[None, None, :] >= counts[..., 1:]] = -7  # padding is never read

    def forward(dense_above=math.inf, in_ids=ids, in_counts=counts, copy=True):
        c = _C.ForwardCall()
        c.layer = layer_call(dict(p, in_ids=in_ids, in_counts=in_counts), tiles, threads,
                             groups)
        c.keep_dense_state = model != READOUT
        c.copy_input, c.dense_above = copy, dense_above
        return _C.layer_forward(c)

    plain, res = forward(copy=False), forward()
    assert plain.input_ids is None and plain.input_counts is None
    assert np.array_equal(res.input_ids, compact(ids, counts))
    assert np.array_equal(res.input_counts, counts)
    assert not np.shares_memory(res.input_counts, counts)
    spikes = int(counts[..., 0].sum())
    assert res.input_spikes == spikes and not res.wants_dense
    if model == READOUT:
        assert np.array_equal(res.membrane, plain.membrane)
    else:  # the listed entries (the rest is not written)
        assert np.array_equal(res.counts, plain.counts)
        listed = np.arange(res.ids.shape[2])[None, None, :] < res.counts[..., 1:]
        for field in ("ids", "membrane", "values"):
            assert np.array_equal(getattr(res, field)[listed], getattr(plain, field)[listed])
        assert np.array_equal(res.dense_membrane, plain.dense_membrane)
    assert not forward(dense_above=spikes).wants_dense
    dense = forward(dense_above=spikes - 1)
    assert dense.wants_dense and dense.input_spikes == spikes
    assert dense.input_ids is None and dense.ids is None and dense.membrane.size == 0

    rows = np.argwhere(counts[..., 1] > 0)
    bad = ids.copy()
    n_in = p["W"].shape[1]
    for t, b in (rows[-1], rows[len(rows) // 2], rows[0]):  # the first fault is named
        bad[t, b, counts[t, b, 1] - 1] = n_in
    t, b = rows[0]
    k = counts[t, b, 1] - 1
    with pytest.raises(ValueError, match=f"input list id {n_in} at t={t}, b={b}, k={k} out "
                       rf"of range \[0, {n_in}\)"):
        forward(in_ids=bad)
    bad[t, b, k] = -1
    with pytest.raises(ValueError, match=f"input list id -1 at t={t}, b={b}"):
        forward(in_ids=bad)
    bad_counts = counts.copy()
    bad_counts[t, b] = (2, 1)
    with pytest.raises(ValueError, match=rf"input list counts \(2, 1\) at t={t}, b={b} "
                       "are inconsistent"):
        forward(in_counts=bad_counts)
    bad_counts[t, b] = (0, K + 1)
    with pytest.raises(ValueError, match="exceed capacity"):
        forward(in_counts=bad_counts, dense_above=-1)  # checked before the path is chosen


def unsorted_list(rng, T, B, K, N):
    """A [T, B, K] list of random counts and of ids drawn from [0, N) in any order (padding
    included), for the passes that neither sort nor read the padding."""
    counts = np.zeros((T, B, 2), np.int32)
    counts[..., 1] = rng.integers(0, K + 1, size=(T, B))
    counts[..., 0] = rng.integers(0, counts[..., 1] + 1)
    return rng.integers(0, N, size=(T, B, K)).astype(np.int32), counts


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_compact_list_scans_the_ids_as_the_executor_does(threads):
    """With num_ids, compact_list is the forward's scan of its input list as well as
    the copy: check_spike_list's errors (the first faulty row, whichever thread copies
    it), its spike total, and the same copy on any number of threads."""
    rng = np.random.default_rng(7)
    T, B, K, N = 40, 64, 6, 50  # 2,560 rows: shared among the threads
    ids, counts = unsorted_list(rng, T, B, K, N)
    ids[np.arange(K)[None, None, :] >= counts[..., 1:]] = -7  # padding is never read
    got, spikes = _C.compact_list(ids, counts, N, threads)
    assert np.array_equal(got, compact(ids, counts))
    assert spikes == int(counts[..., 0].sum())
    rows = np.argwhere(counts[..., 1] > 0)
    for t, b in (rows[-1], rows[len(rows) // 2], rows[0]):  # the last fault stays
        ids[t, b, 0] = N
    t, b = rows[0]
    with pytest.raises(ValueError, match=f"input list id {N} at t={t}, b={b}, k=0 out of "
                       rf"range \[0, {N}\)"):
        _C.compact_list(ids, counts, N, threads)
    ids[t, b, 0] = -1
    with pytest.raises(ValueError, match=f"input list id -1 at t={t}, b={b}"):
        _C.compact_list(ids, counts, N, threads)
    _C.compact_list(ids, counts, 0, threads)  # num_ids 0: the ids are not scanned
    counts[t, b] = (2, 1)
    with pytest.raises(ValueError, match=rf"input list counts \(2, 1\) at t={t}, b={b} are "
                       "inconsistent"):
        _C.compact_list(ids, counts, N, threads)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gather_listed_takes_each_rows_listed_ids(threads):
    """_C.gather_listed (the dense input-gradient path's gather): each row's listed
    entries take the dense row's values at their ids, the padding 0, as numpy's
    fancy indexing gives them, on any number of threads; faulty lists raise."""
    rng = np.random.default_rng(11)
    T, B, K, N = 30, 70, 9, 40  # 2,100 rows: shared among the threads
    ids, counts = unsorted_list(rng, T, B, K, N)
    source = rng.normal(size=(T * B, N)).astype(np.float32)
    listed = np.arange(K)[None, None, :] < counts[..., 1:]
    want = np.where(listed, np.take_along_axis(source.reshape(T, B, N), ids, -1), 0.0)
    ids[~listed] = -3  # padding is never read
    flat = compact(ids, counts)
    got = _C.gather_listed(source, flat, counts, K, threads)
    assert got.shape == (T, B, K) and got.dtype == np.float32
    assert np.array_equal(got, want)
    # a wider capacity: more padding, the same entries
    wide = _C.gather_listed(source, flat, counts, K + 3, threads)
    assert np.array_equal(wide[..., :K], want) and not wide[..., K:].any()
    bad = flat.copy()
    bad[len(bad) // 2] = N
    with pytest.raises(ValueError, match=rf"outside \[0, {N}\)"):
        _C.gather_listed(source, bad, counts, K, threads)
    bad[len(bad) // 2] = -1
    with pytest.raises(ValueError, match=rf"outside \[0, {N}\)"):
        _C.gather_listed(source, bad, counts, K, threads)
    with pytest.raises(ValueError, match="lists .* entries in its counts but has"):
        _C.gather_listed(source, flat[:-1], counts, K, threads)
    with pytest.raises(ValueError, match="exceed capacity"):
        _C.gather_listed(source, flat, counts, int(counts[..., 1].max()) - 1, threads)
    with pytest.raises(ValueError, match=r"source must be \[T \* B, n\]"):
        _C.gather_listed(source[1:], flat, counts, K, threads)
    c = counts.copy()
    c[0, 0] = (2, 1)
    with pytest.raises(ValueError, match="inconsistent"):
        _C.gather_listed(source, flat, c, K, threads)
    # Rows further apart than n (an aligned GEMM output) are read in place; other
    # layouts (columns apart, rows backwards, another dtype) are taken as their values.
    padded = np.full((T * B, N + 5), np.nan, np.float32)
    padded[:, :N] = source
    assert np.array_equal(_C.gather_listed(padded[:, :N], flat, counts, K, threads), want)
    with pytest.raises(ValueError, match=rf"outside \[0, {N}\)"):
        _C.gather_listed(padded[:, :N], bad, counts, K, threads)
    for layout in (np.asfortranarray(source), source[::-1][::-1], source.astype(np.float64)):
        assert np.array_equal(_C.gather_listed(layout, flat, counts, K, threads), want)
    backwards = np.ascontiguousarray(source[::-1])[::-1]
    assert backwards.strides[0] < 0
    assert np.array_equal(_C.gather_listed(backwards, flat, counts, K, threads), want)


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_listed_of_rows_listing_every_neuron(threads):
    """Rows that list every neuron (spikes first, then the rest in order: the lists of
    exact gradients) give numpy's gather, and ids that run past n raise."""
    rng = np.random.default_rng(12)
    T, B, N = 4, 300, 150
    ids = np.empty((T, B, N), np.int32)
    counts = np.empty((T, B, 2), np.int32)
    for t, b in np.ndindex(T, B):
        fired = np.sort(rng.choice(N, rng.integers(0, 4), replace=False))
        rest = np.setdiff1d(np.arange(N), fired)
        ids[t, b] = np.concatenate([fired, rest])
        counts[t, b] = (len(fired), N)
    counts[0, 0, 1] = 100  # a row with padding
    source = rng.normal(size=(T * B, N)).astype(np.float32)
    listed = np.arange(N)[None, None, :] < counts[..., 1:]
    want = np.where(listed, np.take_along_axis(source.reshape(T, B, N), ids, -1), 0.0)
    flat = compact(ids, counts)
    assert np.array_equal(_C.gather_listed(source, flat, counts, N, threads), want)
    narrow = source[:, :N - 1].copy()
    with pytest.raises(ValueError, match=rf"outside \[0, {N - 1}\)"):
        _C.gather_listed(narrow, flat, counts, N, threads)
