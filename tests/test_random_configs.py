"""The emulator against the dense reference on seeded random networks.

The other comparison tests fix one shape and vary one option at a time; here
each seed draws the whole configuration: sizes from 1 to 300 neurons, T and B
down to 1, neuron model, reset, recurrence, each layer's window, capacity and
overflow policy, bias, learned decays and thresholds, a readout layer, half
weights, tile plan and threads; then whether the layers record their membranes
(recording keeps the dense state history, and the backward then reads it
instead of the lists), each layer's input delay, and whether the input runs as
two chunks in time with the state carried between them. Spike lists must equal
the float32 reference's and membranes match it; gradients are held against a
float64 run of the reference. Once capacity and overflow were drawn too, this
found that the backward pass missed the resets of spikes a full list had
dropped (19 of 1000 seeds; fixed), and that where a gradient is far smaller
than its terms the float32 reference can be the less accurate of the two.
"""

import copy
import random

import pytest
import torch
from conftest import binary, margin

from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer
from snn_ipu import surrogate as sg
from snn_ipu.backends import emulator

# Small random networks often have a windowed layer that passes no gradient: what the
# tests compare then is zero on both backends, and the layer's warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore:.*no neuron spiked or came within")

SURROGATES = [sg.ATan(2.0), sg.FastSigmoid(5.0), sg.Sigmoid(4.0), sg.Triangle(0.8, 1.0),
              sg.StraightThrough()]


def draw(seed: int) -> dict:
    rng = random.Random(seed)
    return dict(
        T=rng.choice([1, 2, 5, 17, 40]), B=rng.choice([1, 2, 3, 7]),
        sizes=[rng.choice([1, 3, 8, 9, 33, 130, 300]) for _ in range(rng.choice([2, 3]))],
        model=rng.choice(["leaky", "synaptic"]), reset=rng.choice(["subtract", "zero", "none"]),
        recurrent=rng.random() < 0.4,
        windows=[rng.choice([None, 0.0, 0.1, 0.5]) for _ in range(3)],
        max_spikes=rng.choice([None, None, None, 1, 4]), overflow=rng.choice(["grow", "drop"]),
        alpha=rng.choice([0.6, 0.95]), learn_alpha=rng.random() < 0.3,
        bias=rng.random() < 0.5, learn_beta=rng.random() < 0.3,
        learn_threshold=rng.random() < 0.3, readout=rng.random() < 0.4,
        half=rng.random() < 0.2, target=rng.choice(["host", "host", "ipu2"]),
        surrogate=SURROGATES[rng.randrange(len(SURROGATES))],
        density=rng.choice([0.02, 0.1, 0.3, 0.7]), gain=rng.choice([1.0, 3.0, 6.0]),
        beta=rng.choice([0.5, 0.9, 0.99]), threshold=rng.choice([0.5, 1.0, 2.0]),
        threads=rng.choice([1, 2]),
        # drawn after the rest, so that each seed's earlier draws stay what they were
        record_membrane=rng.random() < 0.5,
        delays=[rng.choice([0, 0, 0, 1, 2]) for _ in range(3)],
        split=rng.choice([None, None, 0.3, 0.7]),  # where carry_state cuts T in two
    )


def build(c: dict, seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    sizes, layers = c["sizes"], []
    dtype = torch.float16 if c["half"] else torch.float32
    num_spiking = len(sizes) - 1 - int(c["readout"])
    for i in range(len(sizes) - 1):
        if i >= num_spiking:
            layer = ReadoutLayer(sizes[i], sizes[i + 1], beta=c["beta"], bias=c["bias"],
                                 learn_beta=c["learn_beta"], backend="reference", dtype=dtype,
                                 plan_target=c["target"])
        else:
            synaptic = c["model"] == "synaptic"
            cls = SynapticLayer if synaptic else LIFLayer
            extra = dict(alpha=c["alpha"], learn_alpha=c["learn_alpha"]) if synaptic else {}
            layer = cls(sizes[i], sizes[i + 1], beta=c["beta"], threshold=c["threshold"],
                        bias=c["bias"], reset=c["reset"], surrogate=c["surrogate"],
                        grad_window=c["windows"][i], recurrent=c["recurrent"] and i == 0,
                        max_spikes=c["max_spikes"], overflow=c["overflow"],
                        learn_beta=c["learn_beta"], learn_threshold=c["learn_threshold"],
                        backend="reference", dtype=dtype, plan_target=c["target"], **extra)
        with torch.no_grad():
            layer.weight.mul_(c["gain"])
        layer.record_membrane = True  # for tie_free; run() then sets the draw's
        # a delayed input cannot carry state across chunks (the layer refuses it)
        layer.input_delay = 0 if chunks(c) else c["delays"][i]
        layers.append(layer)
    return torch.nn.Sequential(*layers)


def chunks(c: dict) -> list:
    """The step ranges the input runs in: one call, or two with the state carried."""
    T = c["T"]
    if c["split"] is None or T < 2:
        return []
    cut = min(max(1, round(T * c["split"])), T - 1)
    return [slice(0, cut), slice(cut, T)]


def absmax(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def run(net, x, readout, c):
    """Input gradient, and per call (chunk) each layer's output and recorded membrane."""
    parts = chunks(c) or [slice(None)]
    for layer in net:
        layer.record_membrane = c["record_membrane"]
        layer.carry_state = len(parts) > 1
        layer.reset_state()
    xg = x.clone().requires_grad_()
    calls, loss = [], 0
    for part in parts:
        outs, h = [], xg[part]
        for layer in net:
            h = layer(h)
            outs.append((h, layer.last_membrane))
        calls.append(outs)
        dense = h if isinstance(h, torch.Tensor) else h.to_dense()
        loss = loss + (dense * readout[part][..., : dense.shape[-1]]).sum()
    loss.backward()
    return xg.grad, calls


def tie_free(c: dict, seed: int):
    """Network and input whose membranes keep clear of the threshold and window lines
    (where float32 rounding order could flip a spike either way)."""
    for attempt in range(10):
        net = build(c, seed)
        x = binary((c["T"], c["B"], c["sizes"][0]), c["density"], 1000 * seed + attempt)
        with torch.no_grad():
            net(x)
        spiking = [layer for layer in net if not isinstance(layer, ReadoutLayer)]
        if all(margin(layer.last_membrane, c["threshold"], layer.grad_window) > 1e-4
               for layer in spiking):
            return net, x
    pytest.skip("no tie-free input in 10 draws")


@pytest.mark.filterwarnings("ignore:.*spike list capacity:RuntimeWarning")
@pytest.mark.parametrize("walk", ["auto", "outputs"])
@pytest.mark.parametrize("seed", range(400))
def test_random_network_matches_reference(seed, walk, monkeypatch):
    """``walk``: the input gradient's (SNN_IPU_INPUT_GRAD): by default, or over the
    output list's entries wherever that applies (test_input_grad_walk.py)."""
    monkeypatch.setenv("SNN_IPU_INPUT_GRAD", walk)
    c = draw(seed)
    ref, x = tie_free(c, seed)
    emu = copy.deepcopy(ref)
    for layer in emu:
        layer.backend = "emulator"
    readout = torch.randn(c["T"], c["B"], max(c["sizes"]),
                          generator=torch.Generator().manual_seed(seed))
    threads = emulator.get_num_threads()
    emulator.set_num_threads(c["threads"])
    try:
        gx_ref, calls_ref = run(ref, x, readout, c)
        gx_emu, calls_emu = run(emu, x, readout, c)
    finally:
        emulator.set_num_threads(threads)

    assert len(calls_ref) == len(calls_emu)
    for outs_ref, outs_emu in zip(calls_ref, calls_emu):
        for i, ((r, mem_r), (e, mem_e)) in enumerate(zip(outs_ref, outs_emu)):
            if isinstance(r, torch.Tensor):
                torch.testing.assert_close(e, r, atol=1e-5, rtol=1e-5, msg=f"readout {i}")
                continue
            assert torch.equal(e.counts, r.counts), f"layer {i} counts ({c})"
            assert torch.equal(e.ids, r.ids), f"layer {i} ids ({c})"
            assert torch.equal(e.values.detach(), r.values.detach()), f"layer {i} values ({c})"
            assert (mem_e is None) == (mem_r is None) == (not c["record_membrane"])
            if mem_r is not None:
                torch.testing.assert_close(mem_e, mem_r, atol=1e-4, rtol=1e-5,
                                           msg=f"layer {i} membrane ({c})")
    # Gradients against a float64 run of the reference (the same network, .double()):
    # the emulator must be about as close to it as the float32 reference is. Plain
    # float32 agreement is too strict where a gradient is much smaller than its terms
    # (they cancel): seeds 405, 760, 974 of 1000 left the float32 reference up to 3e-7
    # off there, while the emulator was within 1e-12 of float64.
    f64 = copy.deepcopy(ref).double()
    for p in f64.parameters():
        p.grad = None
    gx_64, _ = run(f64, x.double(), readout.double(), c)
    grads = [(name, p64.grad, p_ref.grad, p_emu.grad) for (name, p64), (_, p_ref), (_, p_emu)
             in zip(f64.named_parameters(), ref.named_parameters(), emu.named_parameters())]
    grads.append(("input", gx_64, gx_ref, gx_emu))
    floor = 1e-7 * max(absmax(g) for _, g, _, _ in grads if g is not None)
    for name, g64, g_ref, g_emu in grads:
        if g64 is None:
            assert g_emu is None or absmax(g_emu) <= floor, f"{name} ({c})"
            continue
        assert g_emu is not None, f"{name}: no gradient ({c})"
        # Half weights' gradients overflow to inf beyond 65504, in both alike.
        finite = torch.isfinite(g_ref)
        assert torch.equal(torch.isfinite(g_emu), finite), f"{name}: overflow ({c})"
        g64, g_ref, g_emu = g64[finite], g_ref.double()[finite], g_emu.double()[finite]
        rtol = 1e-3 if p_is_half(name, ref) else 1e-4
        err, ref_err, scale = absmax(g_emu - g64), absmax(g_ref - g64), absmax(g64)
        assert err <= rtol * scale + 10 * ref_err + floor, (
            f"{name}: error {err:.3e} (float32 reference {ref_err:.3e}), scale {scale:.3e} ({c})")


def p_is_half(name: str, net: torch.nn.Module) -> bool:
    """Whether the named gradient is stored in half (rounded to ~5e-4 of itself)."""
    params = dict(net.named_parameters())
    return name in params and params[name].dtype == torch.float16
