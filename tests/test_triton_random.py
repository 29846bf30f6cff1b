"""The triton backend (its kernels run by Triton's interpreter, with the small tiles of
INTERPRETER_TILES) against the dense reference on seeded random networks, as
tests/test_random_configs.py holds the emulator to it.

tests/test_triton_backend.py varies one option at a time on fixed sizes; here each
seed draws the whole configuration: 1 to 3 layers of 1 to 17 neurons (across the
interpreter's tiles of 8 neurons and 4 list entries), T and B down to 1, neuron model,
reset, recurrence, each layer's window, capacity and overflow policy (error, drop,
grow), bias and a recurrent layer's separate rec_bias, scalar or per-neuron beta,
threshold and alpha, learned or fixed, a readout layer, float32, float16 or bfloat16
weights, the surrogate, an input with no spikes at all, an input list with
eligible-only entries (float16 or float64 values too, each part in any order, with
padding), a dense input with or without a gradient, a call autograd does not record,
carry_state over up to three chunks, and the dense and sparse paths of the backward's
input side. Lists, stats, warnings, errors, recorded membranes and carried states must
be the float32 reference's; gradients (every parameter's and the input's) are held
against a float64 run of the reference, as the emulator's are.

``SNN_IPU_TRITON_RANDOM_SEEDS=N`` runs N seeds (default 120, ~30 s on 2 cores). When this
was written 1,500 seeds passed (4.5 min), and 3,500 of a similar draw that also ran T up
to 11, B up to 5 and layers of 33 neurons: the interpreted kernels found no difference
from the reference.
"""

import copy
import os
import random
import warnings

import pytest
import torch
from conftest import binary

pytest.importorskip("triton")

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer  # noqa: E402
from snn_ipu import surrogate as sg  # noqa: E402
from snn_ipu.backends import triton as tbackend  # noqa: E402

SEEDS = int(os.environ.get("SNN_IPU_TRITON_RANDOM_SEEDS", "120"))
SURROGATES = [sg.ATan(2.0), sg.FastSigmoid(5.0), sg.Sigmoid(4.0), sg.Triangle(0.8, 1.0),
              sg.StraightThrough()]
# the backend's choices, not the call's results
PATH_KEYS = ("backend", "path", "input_grad_path", "weight_grad_path")


def draw(seed: int) -> dict:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 2, 3])
    return dict(
        T=rng.choice([1, 2, 3, 6]), B=rng.choice([1, 2, 3]),
        sizes=[rng.choice([1, 2, 5, 8, 9, 13, 17]) for _ in range(n + 1)],
        model=rng.choice(["leaky", "synaptic"]), reset=rng.choice(["subtract", "zero", "none"]),
        recurrent=[rng.random() < 0.4 for _ in range(n)],
        windows=[rng.choice([None, 0.0, 0.1, 0.5]) for _ in range(n)],
        max_spikes=[rng.choice([None, None, 1, 2, 4, 100]) for _ in range(n)],
        overflow=[rng.choice(["grow", "drop", "drop", "error"]) for _ in range(n)],
        alpha=rng.choice([0.6, 0.95, "vector"]), beta=rng.choice([0.5, 0.9, "vector"]),
        threshold=rng.choice([0.5, 1.0, "vector"]), learn_alpha=rng.random() < 0.3,
        learn_beta=rng.random() < 0.3, learn_threshold=rng.random() < 0.3,
        bias=rng.random() < 0.5, rec_bias=rng.random() < 0.3, readout=rng.random() < 0.4,
        dtype=rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16]),
        surrogate=SURROGATES[rng.randrange(len(SURROGATES))],
        density=rng.choice([0.0, 0.1, 0.3, 0.3, 0.6]), gain=rng.choice([2.0, 5.0, 10.0]),
        input=rng.choice(["dense", "dense_grad", "list", "list_shuffled"]),
        values_dtype=rng.choice([torch.float32, torch.float32, torch.float16, torch.float64]),
        chunks=rng.choice([1, 1, 2, 3]), records_grad=rng.random() < 0.8,
        record_membrane=rng.random() < 0.7, dense_fraction=rng.choice([0.0, 0.2, 2.0]),
    )


def constant(value, n: int, low: float, high: float, seed: int):
    if value != "vector":
        return value
    return low + (high - low) * torch.rand(n, generator=torch.Generator().manual_seed(seed))


def build(c: dict, seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    sizes, layers = c["sizes"], []
    num_spiking = len(sizes) - 1 - int(c["readout"])
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        beta = constant(c["beta"], n_out, 0.4, 0.95, seed + i)
        if i >= num_spiking:
            layer = ReadoutLayer(n_in, n_out, beta=beta, bias=c["bias"],
                                 learn_beta=c["learn_beta"], backend="reference",
                                 dtype=c["dtype"])
        else:
            synaptic = c["model"] == "synaptic"
            extra = dict(alpha=constant(c["alpha"], n_out, 0.5, 0.95, seed + 7 + i),
                         learn_alpha=c["learn_alpha"]) if synaptic else {}
            layer = (SynapticLayer if synaptic else LIFLayer)(
                n_in, n_out, beta=beta,
                threshold=constant(c["threshold"], n_out, 0.5, 1.5, seed + 3 + i),
                bias=c["bias"], reset=c["reset"], surrogate=c["surrogate"],
                grad_window=c["windows"][i], recurrent=c["recurrent"][i],
                rec_bias=c["rec_bias"] and c["recurrent"][i], max_spikes=c["max_spikes"][i],
                overflow=c["overflow"][i], learn_beta=c["learn_beta"],
                learn_threshold=c["learn_threshold"], backend="reference", dtype=c["dtype"],
                **extra)
            if c["recurrent"][i]:
                with torch.no_grad():
                    layer.rec_weight.mul_(2.0)
        with torch.no_grad():
            layer.weight.mul_(c["gain"])
            if layer.bias is not None:
                layer.bias.normal_(0, 0.3)
        layer.record_membrane = True  # for tie_free_input; the test sets the draw's
        layer.carry_state = c["chunks"] > 1
        layers.append(layer)
    return torch.nn.Sequential(*layers)


def layer_input(c: dict, x: torch.Tensor, seed: int):
    """(the input, the leaf whose gradient is the input's) of one chunk ``x``."""
    if c["input"] == "dense":
        return x.clone(), None
    if c["input"] == "dense_grad":
        leaf = x.clone().requires_grad_()
        return leaf, leaf
    g = torch.Generator().manual_seed(seed)
    eligible = (torch.rand(x.shape, generator=g) < 0.3) & (x == 0)
    s = SparseSpikes.from_dense(x, eligible=eligible)
    ids, counts, values = s.ids.clone(), s.counts, s.values.detach().clone()
    if c["input"] == "list_shuffled":  # padding, and each part in another order
        T, B, K = ids.shape
        ids = torch.cat([ids, torch.zeros(T, B, 3, dtype=torch.int32)], -1)
        values = torch.cat([values, torch.zeros(T, B, 3)], -1)
        for t in range(T):
            for b in range(B):
                n0, n1 = int(counts[t, b, 0]), int(counts[t, b, 1])
                ids[t, b, :n0] = ids[t, b, :n0][torch.randperm(n0, generator=g)]
                ids[t, b, n0:n1] = ids[t, b, n0:n1][torch.randperm(n1 - n0, generator=g)]
    leaf = values.to(c["values_dtype"]).requires_grad_()
    return SparseSpikes(ids, counts.clone(), x.shape[-1], leaf), leaf


def record_as_drawn(net: torch.nn.Sequential, c: dict) -> torch.nn.Sequential:
    """``net`` recording its membranes as drawn: recording keeps the dense state history,
    which the backward then reads instead of the lists."""
    for layer in net:
        layer.record_membrane = c["record_membrane"]
    return net


def tie_free_input(c: dict, seed: int):
    """An input whose membranes keep clear of every layer's threshold and window lines
    (where another order of a float32 sum could flip a spike), or None."""
    for attempt in range(10):
        net = build(c, seed)
        x = binary((c["T"], c["B"], c["sizes"][0]), c["density"], 1000 * seed + attempt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with torch.no_grad():
                    net(x)
            except Exception:  # (an overflow error: compared as it is)
                return x
        clear = True
        for layer in net:
            if isinstance(layer, ReadoutLayer):
                continue
            threshold = layer.threshold.detach()
            gap = (layer.last_membrane - threshold).abs().min()
            if layer.grad_window is not None:
                gap = torch.minimum(gap, (layer.last_membrane - (threshold - layer.grad_window))
                                    .abs().min())
            clear = clear and float(gap) > 1e-4
        if clear:
            return x
    return None


def run(net: torch.nn.Sequential, c: dict, x: torch.Tensor, seed: int) -> dict:
    """Every chunk's outputs, stats, membranes and state, the input's gradient, the
    warnings; or the error the run raised."""
    got = {"chunks": [], "input_grads": []}
    chunks = torch.tensor_split(x, min(c["chunks"], x.shape[0]))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i, chunk in enumerate(chunks):
                h, leaf = layer_input(c, chunk, seed + i)
                outs = []
                with torch.set_grad_enabled(c["records_grad"]):
                    for layer in net:
                        h = layer(h)
                        outs.append(h)
                if c["records_grad"]:
                    dense = h if isinstance(h, torch.Tensor) else h.to_dense()
                    probe = torch.randn(dense.shape, dtype=torch.float64,
                                        generator=torch.Generator().manual_seed(seed + i))
                    (dense * probe.to(dense.dtype)).sum().backward()
                    got["input_grads"].append(None if leaf is None else leaf.grad)
                got["chunks"].append(dict(
                    outs=[o.detach() if isinstance(o, torch.Tensor) else o for o in outs],
                    stats=[{k: v for k, v in layer.stats.items() if k not in PATH_KEYS}
                           for layer in net],
                    membranes=[layer.last_membrane for layer in net],
                    states=[layer.state for layer in net]))
        got["warnings"] = sorted({str(w.message).replace(net[0].backend, "<backend>")
                                  for w in caught})
    except Exception as exc:  # noqa: BLE001 (the backends must raise alike)
        got["error"] = (type(exc), str(exc))
    return got


def absmax(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def assert_close_to_scale(actual, expected, rtol, what):
    assert actual.shape == expected.shape, what
    err = absmax(actual.double() - expected.double())
    assert err <= rtol * max(1.0, absmax(expected)), f"{what}: error {err:.3e}"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_network_matches_reference(seed, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    c = draw(seed)
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", c["dense_fraction"])
    x = tie_free_input(c, seed)
    if x is None:
        pytest.skip("no tie-free input in 10 draws")
    ref = record_as_drawn(build(c, seed), c)
    tri = copy.deepcopy(ref)
    for layer in tri:
        layer.backend = "triton"
    got_ref, got_tri = run(ref, c, x, seed), run(tri, c, x, seed)
    assert got_tri.get("error") == got_ref.get("error"), c
    if "error" in got_ref:
        return
    assert got_tri["warnings"] == got_ref["warnings"], c
    for chunk, (r, e) in enumerate(zip(got_ref["chunks"], got_tri["chunks"])):
        for i, (out_r, out_e) in enumerate(zip(r["outs"], e["outs"])):
            where = f"chunk {chunk}, layer {i} ({c})"
            if isinstance(out_r, torch.Tensor):
                assert_close_to_scale(out_e, out_r, 1e-5, f"readout, {where}")
                continue
            assert torch.equal(out_e.counts, out_r.counts), f"counts, {where}"
            assert torch.equal(out_e.ids, out_r.ids), f"ids, {where}"
            assert torch.equal(out_e.values.detach(), out_r.values.detach()), f"values, {where}"
        assert e["stats"] == r["stats"], f"chunk {chunk} ({c})"
        for i, (m_r, m_e) in enumerate(zip(r["membranes"], e["membranes"])):
            assert (m_r is None) == (m_e is None) == (not c["record_membrane"]), c
            if m_r is not None:
                assert_close_to_scale(m_e, m_r, 1e-5,
                                      f"membrane, chunk {chunk}, layer {i} ({c})")
        for i, (s_r, s_e) in enumerate(zip(r["states"], e["states"])):
            assert (s_r is None) == (s_e is None), f"state, layer {i} ({c})"
            for field, v_r, v_e in zip(("membrane", "synaptic", "spikes"), s_r or (),
                                       s_e or ()):
                assert (v_r is None) == (v_e is None), f"state {field}, layer {i} ({c})"
                if v_r is not None:
                    assert_close_to_scale(v_e, v_r, 1e-5, f"state {field}, layer {i} ({c})")
    if not c["records_grad"]:
        return
    # Gradients against a float64 run of the reference: the triton backend must be about
    # as close to it as the float32 reference is (tests/test_random_configs.py says why).
    f64 = record_as_drawn(build(c, seed), c).double()
    got_64 = run(f64, c, x.double(), seed)
    grads = [(name, p64.grad, p_ref.grad, p_tri.grad, p_ref.dtype)
             for (name, p64), (_, p_ref), (_, p_tri)
             in zip(f64.named_parameters(), ref.named_parameters(), tri.named_parameters())]
    for chunk, g64 in enumerate(got_64["input_grads"]):
        g_ref = got_ref["input_grads"][chunk]
        grads.append((f"input {chunk}", g64, g_ref, got_tri["input_grads"][chunk],
                      None if g_ref is None else g_ref.dtype))
    floor = 1e-7 * max([absmax(g) for _, g, _, _, _ in grads if g is not None] + [0.0])
    for name, g64, g_ref, g_tri, dtype in grads:
        if g64 is None:
            assert g_tri is None or absmax(g_tri) <= floor, f"{name} ({c})"
            continue
        assert g_tri is not None, f"{name}: no gradient ({c})"
        assert g_tri.dtype == g_ref.dtype and g_tri.shape == g_ref.shape, f"{name} ({c})"
        finite = torch.isfinite(g_ref)  # half weights' gradients overflow alike
        assert torch.equal(torch.isfinite(g_tri), finite), f"{name}: overflow ({c})"
        g64, g_ref, g_tri = g64[finite], g_ref.double()[finite], g_tri.double()[finite]
        # a half gradient is rounded once to its dtype, from float32 on either backend
        rtol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-4)
        err, ref_err, scale = absmax(g_tri - g64), absmax(g_ref - g64), absmax(g64)
        assert err <= rtol * scale + 10 * ref_err + floor, (
            f"{name}: error {err:.3e} (float32 reference {ref_err:.3e}), scale {scale:.3e} "
            f"({c})")
