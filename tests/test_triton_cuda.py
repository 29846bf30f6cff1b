"""The triton backend's compiled kernels on a CUDA GPU, against the dense reference on the
CPU: what Triton's interpreter cannot show (tests/test_triton_backend.py runs the same
kernels interpreted, with tiny tiles). Here the tiles are the GPU's own, and the layers
are sized to cross them: 1100 neurons span two blocks of a recurrent layer's per-sample
scan (1024), three of the list compaction (512) and nine neuron tiles (128); with warps,
barriers and float32 atomics in play. Skipped without a CUDA device (CI has none).

The recurrent layers' kernels, off on CUDA by default (``RECURRENT_ON_CUDA``), are
switched on here: these are their tests. On an H100 (2026-11-27, Triton 3.6, torch 2.11)
every feed-forward and readout case passed and four recurrent cases gave wrong gradients
at a few neurons; those are marked ``KNOWN_RECURRENT_BUG`` (docs/gpu.md)."""

import copy
import re
import warnings

import pytest
import torch
from conftest import (
    assert_rel_close,
    binary,
    check_learned_decays_and_threshold,
    check_out_of_range_ids_refused,
    check_readout,
    compare_triton,
    tie_free,
    tie_free_net,
    triton_configs,
)

pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SpikeOverflowError  # noqa: E402
from snn_ipu import surrogate as sg  # noqa: E402
from snn_ipu.backends import triton as tbackend  # noqa: E402

CUDA = torch.device("cuda")
T, B, IN, HID, OUT = 5, 2, 96, 1100, 300
SIZES = (T, B, IN, HID, OUT)
# Spikes decided by float32 sums in another order than the CPU's: a seed is kept only if
# every membrane is this far from a decision line (sums of ~100 terms differ by ~1e-6).
MIN_MARGIN = 2e-5
# Membranes, relative to their scale: a recurrent layer of 1100 neurons without reset
# sums hundreds of terms per step for T steps, in another order (~1e-6 measured).
MEMBRANE_RTOL = 1e-5


KNOWN_RECURRENT_BUG = pytest.mark.xfail(
    reason="recurrent kernels: gradients differ from the reference's at a few neurons on "
           "an H100 (docs/gpu.md)", strict=False)


@pytest.fixture(autouse=True)
def list_kernels(monkeypatch):
    """The list kernels on the backward's input side, whatever the list's density (the
    GEMM path that dense lists take has its own test); the recurrent kernels on."""
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 2.0)
    monkeypatch.setattr(tbackend, "RECURRENT_ON_CUDA", True)


def test_recurrent_layers_are_refused_by_default_and_auto_runs_reference(monkeypatch):
    monkeypatch.setattr(tbackend, "RECURRENT_ON_CUDA", False)
    layer = LIFLayer(IN, HID, recurrent=True, backend="triton", name="rec").to(CUDA)
    x = binary((T, B, IN), 0.3, 0).to(CUDA)
    with pytest.raises(NotImplementedError, match="rec: the triton backend's recurrent "
                                                  "kernels are off on CUDA"):
        layer(x)
    layer.backend = "auto"
    layer(x)
    assert layer.stats["backend"] == "reference"
    ff = LIFLayer(IN, HID, backend="auto").to(CUDA)
    ff(x)
    assert ff.stats["backend"] == "triton"


def on_cuda(net, backend="triton"):
    twin = copy.deepcopy(net).to(CUDA)
    for layer in twin:
        layer.backend = backend
    return twin


def compare(ref_net, tri_net, x, readout, path="sparse"):
    return compare_triton(ref_net, tri_net, x, readout, path, membrane_rtol=MEMBRANE_RTOL)


CONFIGS = triton_configs()


@pytest.mark.parametrize("model, reset, recurrent, window, surrogate", CONFIGS)
def test_layers_match_reference(model, reset, recurrent, window, surrogate):
    net, x, readout = tie_free_net(SIZES, model, reset, recurrent, window, surrogate,
                                   min_margin=MIN_MARGIN)
    outs = compare(net, on_cuda(net), x, readout)
    assert int(outs[0].counts[..., 0].sum()) > 0 and int(outs[1].counts[..., 0].sum()) > 0
    if window is not None:
        assert int(outs[0].counts[..., 1].sum()) < T * B * HID


@KNOWN_RECURRENT_BUG
def test_dense_backward_paths(monkeypatch):
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 0.0)
    net, x, readout = tie_free_net(SIZES, "leaky", "subtract", True, 0.3, sg.ATan(2.0),
                                   min_margin=MIN_MARGIN)
    tri = on_cuda(net)
    compare(net, tri, x, readout, path="dense")
    assert tri[1].stats["input_grad_path"] == "dense"


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
def test_learned_decays_and_threshold(model):
    check_learned_decays_and_threshold("triton", model, (T, B, IN, HID),
                                       recurrent=model == "synaptic", device=CUDA)


@pytest.mark.parametrize("steps", [T, 1])
def test_readout(steps):
    check_readout("triton", (steps, B, HID, OUT), device=CUDA)


@KNOWN_RECURRENT_BUG
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_weights(dtype):
    def make(seed):
        torch.manual_seed(seed)
        layer = LIFLayer(IN, HID, backend="reference", grad_window=0.5, recurrent=True,
                         dtype=dtype)
        with torch.no_grad():
            layer.weight.mul_(4.0)
            layer.rec_weight.mul_(2.0)
        return layer

    ref, x = tie_free(make, (T, B, IN), window=0.5, seeds=30, min_margin=MIN_MARGIN)
    ref.record_membrane = True
    tri = copy.deepcopy(ref).to(CUDA)
    tri.backend = "triton"
    readout = torch.randn(T, B, HID)
    outs = []
    for layer, dev in ((ref, "cpu"), (tri, CUDA)):
        out = layer(x.to(dev))
        (out.to_dense() * readout.to(dev)).sum().backward()
        outs.append(out.to("cpu"))
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    assert_rel_close(tri.last_membrane.cpu(), ref.last_membrane, MEMBRANE_RTOL, "membrane")
    for name in ("weight", "rec_weight"):
        g_tri, g_ref = getattr(tri, name).grad, getattr(ref, name).grad
        assert g_tri.dtype == dtype
        assert_rel_close(g_tri.float().cpu(), g_ref.float(), 2 * torch.finfo(dtype).eps, name)


def busy_layer(policy, max_spikes, recurrent=False, **kw):
    torch.manual_seed(4)
    layer = LIFLayer(IN, HID, backend="reference", max_spikes=max_spikes, overflow=policy,
                     grad_window=0.2, recurrent=recurrent, name="hidden1", **kw)
    with torch.no_grad():
        layer.weight.mul_(5.0)
    return layer


def triton_twin(layer):
    twin = copy.deepcopy(layer).to(CUDA)
    twin.backend = "triton"
    return twin


@pytest.mark.parametrize("recurrent", [False, True])
def test_overflow_error_names_layer_timestep_counts(recurrent):
    x = binary((T, B, IN), 0.4, 4)
    ref = busy_layer("error", 40, recurrent)
    tri = triton_twin(ref)
    with pytest.raises(SpikeOverflowError) as ref_err:
        ref(x)
    with pytest.raises(SpikeOverflowError) as tri_err:
        tri(x.to(CUDA))
    assert re.search(r"hidden1: .*max_spikes=40 .*timestep \d+, sample \d+: \d+ spikes",
                     str(tri_err.value))
    assert str(tri_err.value) == str(ref_err.value)


@pytest.mark.parametrize("reset, recurrent", [("subtract", True), ("zero", False)])
def test_overflow_drop_matches_reference(reset, recurrent):
    x = binary((T, B, IN), 0.4, 6)
    readout = torch.randn(T, B, HID, generator=torch.Generator().manual_seed(6))
    ref = busy_layer("drop", 40, recurrent, reset=reset, learn_threshold=True)
    tri = triton_twin(ref)
    outs, grads = [], []
    for layer, dev in ((ref, "cpu"), (tri, CUDA)):
        xg = x.to(dev).clone().requires_grad_()
        with pytest.warns(RuntimeWarning, match="hidden1: .*dropped"):
            out = layer(xg)
        (out.to_dense() * readout.to(dev)).sum().backward()
        outs.append(out.to("cpu"))
        grads.append(xg.grad.cpu())
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    assert tri.stats["spikes_dropped"] > 0
    for key in ("spikes_dropped", "eligible_dropped", "capacity", "needed_capacity"):
        assert tri.stats[key] == ref.stats[key], key
    for (name, p_ref), (_, p_tri) in zip(ref.named_parameters(), tri.named_parameters()):
        assert_rel_close(p_tri.grad.cpu(), p_ref.grad, 1e-4, name)
    assert_rel_close(grads[1], grads[0], 1e-4, "input grad")


def test_overflow_grow_equals_large_capacity():
    x = binary((T, B, IN), 0.4, 4).to(CUDA)
    grown = triton_twin(busy_layer("grow", 2, recurrent=True))
    big = busy_layer("error", HID, recurrent=True).to(CUDA)
    a, b = grown(x), big(x)
    assert grown.stats["grew"] and a.capacity == grown.stats["needed_capacity"]
    assert torch.equal(a.to_dense(), b.to_dense())
    assert torch.equal(a.ids, b.ids[..., : a.capacity])


def test_carried_state_matches_reference():
    ref = busy_layer("drop", 60, recurrent=True, reset="zero")
    ref.carry_state = True
    tri = triton_twin(ref)
    x = binary((2 * T, B, IN), 0.4, 8)
    readout = torch.randn(T, B, HID, generator=torch.Generator().manual_seed(8))
    outs = []
    for layer, dev in ((ref, "cpu"), (tri, CUDA)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            layer(x[:T].to(dev))
            out = layer(x[T:].to(dev))
        (out.to_dense() * readout.to(dev)).sum().backward()
        outs.append(out.to("cpu"))
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    torch.testing.assert_close(tri.state.membrane.cpu(), ref.state.membrane, atol=1e-5, rtol=0)
    assert torch.equal(tri.state.spikes.cpu(), ref.state.spikes)
    for (name, p_ref), (_, p_tri) in zip(ref.named_parameters(), tri.named_parameters()):
        assert_rel_close(p_tri.grad.cpu(), p_ref.grad, 1e-4, name)


@KNOWN_RECURRENT_BUG
def test_three_layers_train_like_the_reference():
    """A recurrent LIF -> LIF -> readout network, three Adam steps on the GPU and on the
    CPU's reference from the same weights: the same weights after them."""
    torch.manual_seed(11)
    net = torch.nn.Sequential(
        LIFLayer(IN, HID, recurrent=True, grad_window=0.5, backend="reference"),
        LIFLayer(HID, OUT, grad_window=0.5, backend="reference"),
        ReadoutLayer(OUT, 10, backend="reference"))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[1].weight.mul_(3.0)
    x = binary((T, B, IN), 0.3, 11)
    labels = torch.randint(0, 10, (B,), generator=torch.Generator().manual_seed(11))
    initial = copy.deepcopy(net)
    nets = {"reference": (net, "cpu"), "triton": (on_cuda(net), CUDA)}
    for name, (model, dev) in nets.items():
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)).sum(0), labels.to(dev))
            loss.backward()
            opt.step()
        assert model[0].stats["backend"] == name
    moved = 0.0
    for (pname, p_ref), (_, p_tri), p0 in zip(nets["reference"][0].named_parameters(),
                                              nets["triton"][0].named_parameters(),
                                              initial.parameters()):
        torch.testing.assert_close(p_tri.cpu(), p_ref, atol=1e-5, rtol=1e-5, msg=pname)
        moved = max(moved, float((p_ref.detach() - p0.detach()).abs().max()))
    assert moved > 1e-3


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_layer_on_the_second_gpu_runs_its_kernels_there():
    """Triton launches on the current device's stream: a layer on cuda:1 while cuda:0 is
    current must still run on cuda:1 (ordered with torch's ops there), matching the
    reference on the same device."""
    second = torch.device("cuda", 1)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    # small, with weights of multiples of 1/8: every current is an exact float, so the
    # order the kernels sum a step's rows in cannot move a spike
    layer = LIFLayer(20, 13, backend="triton", grad_window=0.3).to(second)
    with torch.no_grad():
        layer.weight.copy_(torch.randint(-8, 9, (13, 20)) / 8.0)
        layer.bias.zero_()
    ref = copy.deepcopy(layer)
    ref.backend = "reference"
    x = binary((T, B, 20), 0.3, 0).to(second)
    probe = torch.randn(T, B, 13, device=second)
    out, want = layer(x), ref(x)
    assert torch.equal(out.to_dense(), want.to_dense())
    (out.to_dense() * probe).sum().backward()
    (want.to_dense() * probe).sum().backward()
    assert_rel_close(layer.weight.grad, ref.weight.grad, 1e-4, "dL/dW on cuda:1")


def test_corrupted_ids_raise_not_crash():
    layer = LIFLayer(IN, HID, backend="triton").to(CUDA)
    s = SparseSpikes.from_dense(binary((T, B, IN), 0.3, 0)).to(CUDA)
    check_out_of_range_ids_refused(layer, s)
    # the device still works after the refusals
    assert layer(s).to("cpu").ids.shape[:2] == (T, B)


def test_benchmark_sized_layer_matches_the_dense_step():
    """A layer of the benchmark's network L (2312 -> 1466, T=100, B=48) at ~1% input
    activity, against the reference backend on the same GPU: at this size a few membranes
    sit within float32 rounding of the threshold, so the spikes may differ at a handful
    of the 7 M neuron-steps (each then changes its neuron's later steps), not more."""
    torch.manual_seed(0)
    steps, batch, n_in, n_out = 100, 48, 2312, 1466
    ref = LIFLayer(n_in, n_out, grad_window=0.1, backend="reference").to(CUDA)
    with torch.no_grad():
        ref.weight.mul_(6.0)
    tri = copy.deepcopy(ref)
    tri.backend = "triton"
    x = (torch.rand(steps, batch, n_in, device=CUDA) < 0.01).float()
    readout = torch.randn(steps, batch, n_out, device=CUDA)
    outs, grads = [], []
    for layer in (ref, tri):
        xg = x.clone().requires_grad_()
        out = layer(xg)
        dense = out.to_dense()
        (dense * readout).sum().backward()
        outs.append(dense.detach())
        grads.append(xg.grad)
    spikes = float(outs[0].sum())
    differ = float((outs[0] != outs[1]).sum())
    w_err = (tri.weight.grad - ref.weight.grad).abs().max() / ref.weight.grad.abs().max()
    print(f"\nL-sized layer: {spikes:.0f} spikes ({spikes / outs[0].numel():.2%}), "
          f"{differ:.0f} differ; weight grad rel err {float(w_err):.2e}")
    assert 0.002 < spikes / outs[0].numel() < 0.2
    assert differ <= 1e-5 * outs[0].numel()
    if differ == 0:
        assert_rel_close(tri.weight.grad, ref.weight.grad, 1e-4, "weight")
        assert_rel_close(grads[1], grads[0], 1e-4, "input grad")
