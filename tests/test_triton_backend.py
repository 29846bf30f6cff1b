"""The triton backend's kernels, run by Triton's interpreter on the CPU (the very
kernels the GPU runs, with smaller tiles: INTERPRETER_TILES), against the dense
reference: spikes, lists and overflow records identical, membranes within 1e-6 of their
scale, gradients within 1e-4 relative (the bar of the emulator's tests,
tests/test_emulator_vs_reference.py, over a representative subset of its configurations,
at smaller sizes: the interpreter runs every kernel op in numpy)."""

import copy
import re
import warnings

import pytest
import torch
from conftest import (
    CHANGES_BETWEEN_PASSES,
    assert_rel_close,
    binary,
    check_learned_decays_and_threshold,
    check_out_of_range_ids_refused,
    check_parameters_changed_between_passes,
    check_readout,
    check_recorded_membrane_edited_before_backward,
    compare_triton,
    tie_free_net,
    triton_configs,
)

pytest.importorskip("triton")

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SpikeOverflowError  # noqa: E402
from snn_ipu import surrogate as sg  # noqa: E402
from snn_ipu.backends import auto_backend  # noqa: E402
from snn_ipu.backends import triton as tbackend  # noqa: E402

T, B, IN, HID, OUT = 6, 2, 20, 13, 5
SIZES = (T, B, IN, HID, OUT)


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """CPU tensors run the kernels through Triton's interpreter where TRITON_INTERPRET=1
    (read at each call, so set per test: no other test's subprocess inherits it)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # the list kernels on the backward's input side, whatever the list's density (the
    # GEMM path that dense lists take has its own test)
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 2.0)


def tie_free(model, reset, recurrent, window, surrogate, **kw):
    return tie_free_net(SIZES, model, reset, recurrent, window, surrogate, **kw)


def on(backend, net):
    twin = copy.deepcopy(net)
    for layer in twin:
        layer.backend = backend
    return twin


CONFIGS = triton_configs()


@pytest.mark.parametrize("model, reset, recurrent, window, surrogate", CONFIGS)
def test_layers_match_reference(model, reset, recurrent, window, surrogate):
    net, x, readout = tie_free(model, reset, recurrent, window, surrogate)
    outs = compare_triton(net, on("triton", net), x, readout)
    if window is not None:  # the window really made the lists sparse
        assert int(outs[0].counts[..., 1].sum()) < T * B * HID


def test_dense_backward_paths(monkeypatch):
    """The GEMM path of the backward's input side (dense lists) gives the reference's
    gradients too, and the stats say it was taken."""
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 0.0)
    net, x, readout = tie_free("leaky", "subtract", True, 0.3, sg.ATan(2.0))
    tri = on("triton", net)
    compare_triton(net, tri, x, readout, path="dense")
    assert tri[1].stats["input_grad_path"] == "dense"


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
def test_learned_decays_and_threshold(model):
    # the neuron-parallel BPTT kernel (feed-forward) and the per-sample one (recurrent)
    check_learned_decays_and_threshold("triton", model, (T, B, IN, HID),
                                       recurrent=model == "synaptic")


@pytest.mark.parametrize("steps", [T, 1])
def test_readout(steps):
    check_readout("triton", (steps, B, IN, OUT))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_weights(dtype):
    """Half weights, float32 state: the reference with the same (rounded) weights gives
    the same spikes, membranes and gradients; the weight gradients come back in the
    weights' dtype, rounded once from float32."""
    torch.manual_seed(2)
    ref = LIFLayer(IN, HID, backend="reference", grad_window=0.5, recurrent=True, dtype=dtype)
    with torch.no_grad():
        ref.weight.mul_(4.0)
        ref.rec_weight.mul_(2.0)
    ref.record_membrane = True
    tri = copy.deepcopy(ref)
    tri.backend = "triton"
    x = binary((T, B, IN), 0.25, 2)
    readout = torch.randn(T, B, HID)
    outs = []
    for layer in (ref, tri):
        out = layer(x)
        (out.to_dense() * readout).sum().backward()
        outs.append(out)
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    assert_rel_close(tri.last_membrane, ref.last_membrane, 1e-6, "membrane")
    for name in ("weight", "rec_weight"):
        g_tri, g_ref = getattr(tri, name).grad, getattr(ref, name).grad
        assert g_tri.dtype == dtype
        # one rounding of each against the other: 2 steps of the dtype's epsilon
        assert_rel_close(g_tri.float(), g_ref.float(), 2 * torch.finfo(dtype).eps, name)


def busy_layer(policy, max_spikes, backend, recurrent=False, **kw):
    torch.manual_seed(4)
    layer = LIFLayer(IN, HID, backend=backend, max_spikes=max_spikes, overflow=policy,
                     grad_window=0.2, recurrent=recurrent, name="hidden1", **kw)
    with torch.no_grad():
        layer.weight.mul_(5.0)
    return layer


@pytest.mark.parametrize("recurrent", [False, True])
def test_overflow_error_names_layer_timestep_counts(recurrent):
    x = binary((T, B, IN), 0.4, 4)
    with pytest.raises(SpikeOverflowError) as ref_err:
        busy_layer("error", 2, "reference", recurrent)(x)
    with pytest.raises(SpikeOverflowError) as tri_err:
        busy_layer("error", 2, "triton", recurrent)(x)
    assert re.search(r"hidden1: .*max_spikes=2 .*timestep \d+, sample \d+: \d+ spikes",
                     str(tri_err.value))
    assert str(tri_err.value) == str(ref_err.value)


@pytest.mark.parametrize("reset, recurrent", [("subtract", True), ("zero", False)])
def test_overflow_drop_matches_reference(reset, recurrent):
    """A dropped spike is not passed on (nor fed back) but still resets its neuron;
    the same entries, counts, drop totals, warning and gradients as the reference."""
    x = binary((T, B, IN), 0.4, 6)
    readout = torch.randn(T, B, HID, generator=torch.Generator().manual_seed(6))
    ref = busy_layer("drop", 3, "reference", recurrent, reset=reset, learn_threshold=True)
    tri = copy.deepcopy(ref)
    tri.backend = "triton"
    outs, grads = [], []
    for layer in (ref, tri):
        xg = x.clone().requires_grad_()
        with pytest.warns(RuntimeWarning, match="hidden1: .*dropped"):
            out = layer(xg)
        (out.to_dense() * readout).sum().backward()
        outs.append(out)
        grads.append(xg.grad)
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    assert tri.stats["spikes_dropped"] > 0
    for key in ("spikes_dropped", "eligible_dropped", "capacity", "needed_capacity"):
        assert tri.stats[key] == ref.stats[key], key
    for (name, p_ref), (_, p_tri) in zip(ref.named_parameters(), tri.named_parameters()):
        assert_rel_close(p_tri.grad, p_ref.grad, 1e-4, name)
    assert_rel_close(grads[1], grads[0], 1e-4, "input grad")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tri(x)  # warned once per layer
    assert tri.stats["total_spikes_dropped"] == 2 * tri.stats["spikes_dropped"]


def test_overflow_grow_equals_large_capacity():
    x = binary((T, B, IN), 0.4, 4)
    grown = busy_layer("grow", 2, "triton", recurrent=True)
    big = busy_layer("error", HID, "reference", recurrent=True)
    a, b = grown(x), big(x)
    assert grown.stats["grew"] and a.capacity == grown.stats["needed_capacity"]
    assert torch.equal(a.to_dense(), b.to_dense())
    assert torch.equal(a.ids, b.ids[..., : a.capacity])


def test_carried_state_matches_reference():
    """Two chunks with carry_state (the second starts from the first's state, with a
    recurrent input from its last spikes, under drop) give the reference's lists and
    gradients."""
    ref = busy_layer("drop", 4, "reference", recurrent=True, reset="zero")
    ref.carry_state = True
    tri = copy.deepcopy(ref)
    tri.backend = "triton"
    x = binary((2 * T, B, IN), 0.4, 8)
    readout = torch.randn(T, B, HID, generator=torch.Generator().manual_seed(8))
    outs = []
    for layer in (ref, tri):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            layer(x[:T])
            out = layer(x[T:])
        (out.to_dense() * readout).sum().backward()
        outs.append(out)
        for field in ("membrane", "spikes"):
            assert getattr(layer.state, field).shape == (B, HID)
    assert torch.equal(outs[0].ids, outs[1].ids) and torch.equal(outs[0].counts, outs[1].counts)
    torch.testing.assert_close(tri.state.membrane, ref.state.membrane, atol=1e-5, rtol=0)
    assert torch.equal(tri.state.spikes, ref.state.spikes)
    for (name, p_ref), (_, p_tri) in zip(ref.named_parameters(), tri.named_parameters()):
        assert_rel_close(p_tri.grad, p_ref.grad, 1e-4, name)


def test_calls_autograd_does_not_record_list_spikes_only():
    layer = LIFLayer(IN, HID, max_spikes=12, backend="triton", name="hidden1")
    with torch.no_grad():
        layer.weight.mul_(3.0)
    x = binary((T, B, IN), 0.3, 6)
    with pytest.raises(SpikeOverflowError, match="hidden1: .*gradient-eligible"):
        layer(x)
    with torch.no_grad():
        quiet = layer(x)
        ref = copy.deepcopy(layer)
        ref.backend = "reference"
        expected = ref(x)
    assert torch.equal(quiet.counts[..., 1], quiet.counts[..., 0])
    assert torch.equal(quiet.ids, expected.ids) and torch.equal(quiet.counts, expected.counts)


def test_three_layers_train_like_the_emulator():
    """A recurrent LIF -> LIF -> readout network, three Adam steps on each backend from
    the same weights: the weights after them agree with the emulator's."""
    torch.manual_seed(11)
    net = torch.nn.Sequential(
        LIFLayer(IN, HID, recurrent=True, grad_window=0.5, backend="emulator"),
        LIFLayer(HID, HID, grad_window=0.5, backend="emulator"),
        ReadoutLayer(HID, OUT, backend="emulator"))
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[1].weight.mul_(3.0)
    x = binary((T, B, IN), 0.3, 11)
    labels = torch.randint(0, OUT, (B,), generator=torch.Generator().manual_seed(11))
    initial = copy.deepcopy(net)
    nets = {"emulator": net, "triton": on("triton", net)}
    for name, model in nets.items():
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x).sum(0), labels)
            loss.backward()
            opt.step()
        assert model[0].stats["backend"] == name
    moved = 0.0
    for (pname, p_emu), (_, p_tri), p0 in zip(nets["emulator"].named_parameters(),
                                              nets["triton"].named_parameters(),
                                              initial.parameters()):
        torch.testing.assert_close(p_tri, p_emu, atol=1e-5, rtol=1e-5, msg=pname)
        moved = max(moved, float((p_emu.detach() - p0.detach()).abs().max()))
    assert moved > 1e-3  # the steps changed the weights


@pytest.mark.parametrize("dense", [False, True])
def test_gradients_under_autocast_are_float32_on_either_path(monkeypatch, dense):
    """The kernels sum in float32 whatever autocast says; the dense paths' GEMMs (taken
    where the lists are full: exact gradients) must too, or the gradient's precision
    would follow the path (bfloat16: ~3e-3 off)."""
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 0.0 if dense else 2.0)
    torch.manual_seed(0)
    base = LIFLayer(IN, HID + 4, backend="triton", grad_window=None)
    with torch.no_grad():
        base.weight.mul_(4.0)
    x = binary((T, B, IN), 0.4, 0)
    probe = torch.randn(T, B, HID + 4)
    grads = []
    for autocast in (False, True):
        layer = copy.deepcopy(base)
        xg = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            (layer(xg).to_dense() * probe).sum().backward()
        assert layer.stats["weight_grad_path"] == ("dense" if dense else "sparse")
        grads.append((layer.weight.grad, xg.grad))
    for plain, cast in zip(*grads):
        assert_rel_close(cast, plain, 1e-6, "gradient under autocast")


def test_corrupted_ids_raise_not_crash():
    layer = LIFLayer(IN, HID, backend="triton")
    s = SparseSpikes.from_dense(binary((T, B, IN), 0.3, 0))
    assert int(s.counts[3, 1, 0]) > 0
    # Edited through .data after the list's check, so that the backend's own scan meets them
    # (a replaced or unchecked list is refused before, by the layers' common check).
    check_out_of_range_ids_refused(layer, s)
    edited = SparseSpikes(s.ids, s.counts.clone(), IN, s.values)
    edited.counts.data[0, 0, 1] = s.capacity + 7
    with pytest.raises(ValueError, match="exceed capacity"):
        layer(edited)


def test_corrupted_padding_ids_raise_not_crash(monkeypatch):
    """An out-of-range id in a list's padding (past counts[..., 1]), edited in after the
    list's check, is refused as the reference refuses it: the kernels never read it, but
    the backward's dense paths gather and scatter at every id (on CPU tensors an
    IndexError from backward(), on a GPU a device-side assert)."""
    monkeypatch.setattr(tbackend, "DENSE_FRACTION", 0.0)
    layer = LIFLayer(IN, HID, backend="triton", name="hidden1")
    s = SparseSpikes.from_dense(binary((T, B, IN), 0.3, 0))
    t, b = (int(i) for i in (s.counts[..., 1] < s.capacity).nonzero()[0])
    edited = SparseSpikes(s.ids.clone(), s.counts, IN, s.values.clone().requires_grad_())
    edited.ids.data[t, b, -1] = 10**6
    with pytest.raises(ValueError, match=re.escape(
            f"hidden1: input list id {10**6} at t={t}, b={b}, k={s.capacity - 1} out of "
            f"range [0, {IN}) (padding past counts[..., 1]")):
        layer(edited).to_dense().sum().backward()


@pytest.mark.parametrize("value", [None, "0", "false", "OFF", "2"])
def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch, value):
    """Triton's interpreter is on for 1, true, on and yes alone (any case): for any other
    value it runs nothing on the CPU, and neither does the backend."""
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET")
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    layer = LIFLayer(IN, HID, backend="triton", name="hidden1")
    with pytest.raises(ValueError, match="hidden1: the triton backend runs on CUDA tensors.*"
                                         "TRITON_INTERPRET=1"):
        layer(binary((T, B, IN), 0.3, 0))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        layer.double()(binary((T, B, IN), 0.3, 0).double())


def test_auto_picks_triton_for_cuda_tensors(monkeypatch):
    assert auto_backend(torch.device("cpu")) == "emulator"
    assert auto_backend(torch.device("cuda", 0)) == "triton"
    # recurrent layers on CUDA: the dense reference while the recurrent kernels are off
    assert auto_backend(torch.device("cuda", 0), recurrent=True) == "reference"
    monkeypatch.setattr(tbackend, "RECURRENT_ON_CUDA", True)
    assert auto_backend(torch.device("cuda", 0), recurrent=True) == "triton"
    assert auto_backend(torch.device("cpu"), recurrent=True) == "emulator"
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real(name, *a))
    assert auto_backend(torch.device("cuda")) == "reference"


def test_every_launch_is_a_listed_specialisation(monkeypatch):
    """Every kernel launch's argument types are those of an entry of SPECIALISATIONS,
    which tests/test_triton_compile.py compiles for sm_80 / sm_90: a listed type that
    differs from the launched one (neuron_scan_ff's uint8 flags were listed as float32)
    compiles a variant the GPU never runs and leaves the one it runs unchecked."""
    from snn_ipu import SynapticLayer
    from snn_ipu.backends import triton_kernels as tk

    types = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
             torch.int32: "*i32", torch.uint8: "*u8"}
    seen = set()
    launch = tk.Kernel.__getitem__

    def recording(self, grid):
        run = launch(self, grid)

        def record(*args, **kwargs):
            seen.add((self, tuple(types[a.dtype] if isinstance(a, torch.Tensor) else
                                  "i32" if isinstance(a, int) else "fp32" for a in args)))
            return run(*args, **kwargs)
        return record

    monkeypatch.setattr(tk.Kernel, "__getitem__", recording)
    for dtype in (torch.float32, torch.bfloat16):
        for cls, recurrent in ((LIFLayer, False), (LIFLayer, True), (SynapticLayer, False)):
            torch.manual_seed(0)
            net = torch.nn.Sequential(
                cls(8, 6, backend="triton", grad_window=0.5, recurrent=recurrent, dtype=dtype,
                    learn_beta=True),
                ReadoutLayer(6, 3, backend="triton", dtype=dtype))
            with torch.no_grad():
                net[0].weight.mul_(4.0)
            net(binary((3, 2, 8), 0.4, 0).requires_grad_()).sum().backward()
    assert {k for k, _ in seen} == {s.kernel for s in tk.SPECIALISATIONS}  # all launched
    for kernel, got in seen:
        listed = {tuple(t for t in s.signature.values() if t != "constexpr")
                  for s in tk.SPECIALISATIONS if s.kernel is kernel}
        assert got in listed, f"{kernel.fn.__name__}: launched with {got}, listed {listed}"


@pytest.mark.parametrize("kind", ["feed-forward", "recurrent", "readout"])
def test_forward_mode_and_batched_gradients_are_refused_by_name(kind):
    """A forward-mode tangent (torch.autograd.forward_ad) failed with torch's "You must
    implement the jvp function for custom autograd.Function", and a batched backward
    (is_grads_batched=True, jacobian(vectorize=True)) with "Cannot access storage of
    BatchedTensorImpl" or a vmap rule of scatter_add_: neither named the layer or the
    cause. Both are refused by name, as on the emulator (tests/test_torch_transforms.py)."""
    import torch.autograd.forward_ad as fwAD

    torch.manual_seed(0)
    layer = ReadoutLayer(IN, OUT, backend="triton", name="probe") if kind == "readout" else \
        LIFLayer(IN, HID, backend="triton", recurrent=kind == "recurrent", name="probe")
    with torch.no_grad():
        layer.weight.mul_(4.0)
    x = binary((T, B, IN), 0.3, 0)
    with fwAD.dual_level(), pytest.raises(
            RuntimeError, match=r"probe: the triton backend has no forward-mode gradients"):
        layer(fwAD.make_dual(x, torch.ones_like(x)))
    out = layer(x)
    y = (out if kind == "readout" else out.to_dense()).reshape(-1)[:3]
    with pytest.raises(RuntimeError, match=r"probe: the triton backend's backward takes one "
                                           r"gradient at a time; is_grads_batched=True"):
        torch.autograd.grad(y, layer.weight, grad_outputs=torch.eye(3), is_grads_batched=True)


def test_deterministic_algorithms_take_no_atomics(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) the weight gradients (of W and of a
    recurrent V) were still summed by the outer-product kernel's float32 atomics, whose
    order of summation varies from run to run on a GPU: the mode was ignored without a
    word. They take the GEMM there (no atomics), and give the reference's gradients."""
    from snn_ipu.backends import triton_kernels as tk

    launched = set()
    launch = tk.Kernel.__getitem__
    monkeypatch.setattr(tk.Kernel, "__getitem__",
                        lambda self, grid: launched.add(self) or launch(self, grid))
    net, x, readout = tie_free("leaky", "subtract", True, 0.3, sg.ATan(2.0))
    was, warn_only = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True)
    try:
        compare_triton(net, on("triton", net), x, readout, path="dense")
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
    assert tk.neuron_scan_backward_kernel in launched  # the recurrent layer's backward ran
    assert tk.spike_outer_kernel not in launched


@pytest.mark.parametrize("change", CHANGES_BETWEEN_PASSES)
def test_parameters_changed_between_the_passes_differentiate_the_forward(change):
    """As on the emulator: the backward read the parameters' new values."""
    check_parameters_changed_between_passes("triton", change)


def test_a_recorded_membrane_edited_before_backward_changes_nothing():
    check_recorded_membrane_edited_before_backward("triton")
