"""The IPU backend without an IPU: clear errors, and the exact custom-op call it emits.

The stand-in ``poptorch`` (tests/poptorch_standin.py) records what ``spiking_layer``
passes to ``poptorch.custom_op``; that the op itself computes the right thing can
only be checked on an IPU (see docs/ipu.md).
"""

import math
import sys
import warnings

import pytest
import torch
from poptorch_standin import StandinPoptorch, install

import snn_ipu
from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer
from snn_ipu.backends import ipu
from snn_ipu.backends.contract import LayerParams

# Layers here run outside an OverflowCounts, which the backend warns of (tested below).
pytestmark = pytest.mark.filterwarnings("ignore:.*the host learns of it only through")


def spikes(T=3, B=2, K=4, n=8):
    ids = torch.zeros(T, B, K, dtype=torch.int32)
    counts = torch.zeros(T, B, 2, dtype=torch.int32)
    ids[0, 0, :2] = torch.tensor([1, 5])
    counts[0, 0] = torch.tensor([2, 2])
    return SparseSpikes(ids, counts, n)


@pytest.fixture
def fake_poptorch(monkeypatch):
    fake = install(monkeypatch)
    fake._phase = "trace"  # the ops are emitted while PopTorch traces the model
    return fake


def params(layer, beta=None, alpha=None, bias="layer's"):
    n = layer.out_features
    return LayerParams(layer.weight, layer.bias if bias == "layer's" else bias,
                       getattr(layer, "rec_weight", None),
                       torch.full((n,), 0.9) if beta is None else beta,
                       None if layer.neuron_model == "readout" else torch.ones(n), alpha)


def call_spiking(layer, s, **kw):
    out, _ = ipu.spiking_layer(layer.config(), s, params(layer, **kw), None)
    return out


def call_readout(layer, s):
    out, _ = ipu.readout_layer(layer.config(), s, params(layer), None)
    return out


def test_without_poptorch_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", None)  # import poptorch -> ImportError
    layer = LIFLayer(8, 6, max_spikes=4)
    with pytest.raises(ipu.IPUUnavailableError, match="PopTorch") as info:
        call_spiking(layer, spikes())
    assert isinstance(info.value, RuntimeError)
    assert "emulator" in str(info.value)


def test_outside_a_poptorch_model_the_error_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", StandinPoptorch())
    with pytest.raises(ipu.IPUUnavailableError, match="isRunningOnIpu"):
        call_spiking(LIFLayer(8, 6, max_spikes=4), spikes())


def test_missing_library_names_the_env_var(tmp_path):
    with pytest.raises(ipu.IPUUnavailableError, match=ipu.LIBRARY_ENV):
        ipu.load_library(str(tmp_path / "nope.so"))


def test_spiking_layer_emits_the_custom_op(fake_poptorch):
    layer = LIFLayer(8, 6, recurrent=True, max_spikes=4, grad_window=0.5)
    out = call_spiking(layer, spikes())
    (call,) = fake_poptorch.custom_op_calls
    assert (call["name"], call["domain"], call["domain_version"]) == ("SnnSpikingLayer",
                                                                       "ai.snn_ipu", 1)
    ins = call["inputs"]
    assert len(ins) == 9
    assert ins[0].dtype == torch.int32 and ins[0].shape == (3, 2, 4)
    assert ins[1].dtype == torch.int32 and ins[1].shape == (3, 2, 2)
    assert ins[2].dtype == torch.float32 and ins[2][0, 0].tolist() == [1, 1, 0, 0]
    assert ins[3] is layer.weight and ins[5] is layer.rec_weight
    assert ins[8].shape == (1,)  # no alpha for a leaky layer: a stand-in
    shapes = [tuple(t.shape) for t in call["example_outputs"]]
    # the last: every spike as bits, one 32-bit word for the one tile's 6 neurons
    assert shapes == [(3, 2, 4), (3, 2, 4), (3, 2, 2), (3, 2, 4), (3, 2, 2), (1,), (1,),
                      (3, 2, 1)]
    a = call["attributes"]
    assert a["model"] == 0 and a["reset"] == 0 and a["recurrent"] == 1
    assert a["capacity"] == 4 and a["has_bias"] == 1 and a["keep_dense_state"] == 0
    assert a["grad_window"] == 0.5
    assert a["surrogate_kind"] == 0 and a["surrogate_p0"] == 2.0  # ATan(alpha=2)
    assert a["neurons_per_tile"] == 6  # all 6 neurons on one tile (less than a chunk of 8)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a.values())
    assert isinstance(out, SparseSpikes) and out.ids.shape == (3, 2, 4)


def test_record_membrane_is_refused_not_ignored(fake_poptorch):
    """The op returns no membrane: last_membrane would stay None without a word."""
    layer = LIFLayer(8, 6, max_spikes=4)
    layer.record_membrane = True
    with pytest.raises(ValueError, match="record_membrane is not supported on the ipu"):
        call_spiking(layer, spikes())
    assert not fake_poptorch.custom_op_calls


def test_a_readouts_record_membrane_is_refused_not_ignored(fake_poptorch):
    """A readout with record_membrane=True traced for the IPU left last_membrane None
    without a word, where the spiking layers refuse it."""
    layer = ReadoutLayer(8, 5, backend="ipu")
    layer.record_membrane = True
    with pytest.raises(ValueError, match="record_membrane is not supported on the ipu"):
        layer(spikes())
    assert not fake_poptorch.custom_op_calls


def test_learned_decay_keeps_dense_state(fake_poptorch):
    layer = SynapticLayer(8, 6, max_spikes=4)
    beta = torch.full((6,), 0.9, requires_grad=True)
    call_spiking(layer, spikes(), beta=beta, alpha=torch.full((6,), 0.8), bias=None)
    (call,) = fake_poptorch.custom_op_calls
    assert call["attributes"]["model"] == 1
    assert call["attributes"]["keep_dense_state"] == 1
    assert call["attributes"]["has_bias"] == 0
    assert [tuple(t.shape) for t in call["example_outputs"][5:7]] == [(3, 2, 6), (3, 2, 6)]
    assert call["inputs"][4].shape == (6,)  # zero bias stand-in


def test_readout_layer_emits_its_op(fake_poptorch):
    layer = ReadoutLayer(8, 5)
    out = call_readout(layer, spikes())
    (call,) = fake_poptorch.custom_op_calls
    assert call["name"] == "SnnReadoutLayer" and len(call["inputs"]) == 6
    assert call["attributes"]["model"] == 2
    assert out.shape == (3, 2, 5)


def test_infinite_window_is_packed_as_negative():
    config = LIFLayer(8, 6).config()
    a = ipu.pack_attributes(config, capacity=3, neurons_per_tile=8, has_bias=True,
                            keep_dense_state=False)
    assert config.grad_window is None and a["grad_window"] == -1.0
    assert math.isfinite(a["activity"])


def full_spikes(T, B, n, K=8):
    return SparseSpikes(torch.zeros(T, B, K, dtype=torch.int32),
                        torch.zeros(T, B, 2, dtype=torch.int32), n)


def test_place_puts_each_layer_on_its_own_tiles(fake_poptorch):
    """place() of a pipelined plan hands every layer the tiles its plan counted, side by
    side from tile 0, and the ops are built there with the plan's tile size and sample
    groups."""
    net = torch.nn.Sequential(LIFLayer(700, 256, max_spikes=16), LIFLayer(256, 256, max_spikes=16),
                              ReadoutLayer(256, 20))
    T, B = 100, 128
    report = snn_ipu.place(net, B, T, input_max_spikes=8, pipelined=True)
    rows = report.layers
    assert [r.num_tiles for r in rows] == [
        -(-layer.out_features // r.neurons_per_tile) for layer, r in zip(net, rows)]
    firsts = [0, rows[0].tiles_used, rows[0].tiles_used + rows[1].tiles_used]
    assert firsts[2] + rows[2].tiles_used <= 1472  # side by side on one IPU
    assert [layer.ipu_tiles.first_tile for layer in net] == firsts
    x = call_spiking(net[0], full_spikes(T, B, 700))
    h = call_spiking(net[1], full_spikes(T, B, 256, K=16))
    call_readout(net[2], full_spikes(T, B, 256, K=16))
    assert x.capacity == 16 and h.capacity == 16
    attrs = [c["attributes"] for c in fake_poptorch.custom_op_calls]
    assert [a["first_tile"] for a in attrs] == firsts
    assert [a["neurons_per_tile"] for a in attrs] == [r.neurons_per_tile for r in rows]
    assert [a["sample_groups"] for a in attrs] == [r.sample_groups for r in rows]


def test_unplaced_layers_start_at_tile_zero(fake_poptorch):
    call_spiking(LIFLayer(700, 256, max_spikes=16), full_spikes(4, 2, 700))
    assert fake_poptorch.custom_op_calls[0]["attributes"]["first_tile"] == 0


def test_a_layer_placed_for_other_shapes_refuses_to_run(fake_poptorch):
    net = torch.nn.Sequential(LIFLayer(64, 32, max_spikes=8), ReadoutLayer(32, 4))
    snn_ipu.place(net, 16, 20)
    with pytest.raises(ValueError, match=r"batch_size=16, num_steps=20.*batch_size=8.*place\("):
        call_spiking(net[0], full_spikes(20, 8, 64))
    with pytest.raises(ValueError, match=r"num_steps=20.*num_steps=30"):
        call_readout(net[1], full_spikes(30, 16, 32))
    assert fake_poptorch.custom_op_calls == []


def test_place_refuses_networks_that_do_not_fit():
    net = torch.nn.Sequential(LIFLayer(2312, 1466, max_spikes=64), ReadoutLayer(1466, 10))
    with pytest.raises(snn_ipu.PlanError, match="does not fit"):
        snn_ipu.place(net, 1024, 500)
    assert all(layer.ipu_tiles is None for layer in net)
    with pytest.raises(ValueError, match="torch.nn.Module"):
        snn_ipu.place([700, 256, 20], 8, 10)


def test_learned_decays_are_planned_with_their_dense_history(fake_poptorch, monkeypatch):
    seen = []

    def recording(cfg, spikes, weight, capacity, dense_history):
        seen.append(dense_history)
        return split(cfg, spikes, weight, capacity, dense_history)

    split = ipu._ipu_split
    monkeypatch.setattr(ipu, "_ipu_split", recording)
    layer = LIFLayer(8, 6, max_spikes=4)
    call_spiking(layer, spikes())  # fixed beta
    call_spiking(layer, spikes(), beta=torch.full((6,), 0.9, requires_grad=True))
    assert seen == [False, True]


def test_capacities_beyond_the_layer_width_are_clamped_or_refused(fake_poptorch):
    """The op's graph holds a row to the layer's width: a larger max_spikes is clamped
    (in the example outputs too), an input list wider than in_features is refused."""
    layer = LIFLayer(8, 6, max_spikes=10, overflow="drop")
    out = call_spiking(layer, spikes())
    assert fake_poptorch.custom_op_calls[0]["attributes"]["capacity"] == 6 and out.capacity == 6
    wide = SparseSpikes(torch.zeros(3, 2, 9, dtype=torch.int32),
                        torch.zeros(3, 2, 2, dtype=torch.int32), 8)
    with pytest.raises(ValueError, match="capacity K=9 exceeds in_features=8"):
        call_spiking(layer, wide)
    with pytest.raises(ValueError, match="capacity K=9 exceeds in_features=8"):
        call_readout(ReadoutLayer(8, 2, bias=False), wide)


# --------------------------------------------------------------------------- traced graphs
# PopTorch traces a model on ``ipu`` tensors, whose values cannot be read and whose
# shapes cannot depend on values; ``meta`` tensors share both limits, so a network
# that runs on them reaches the custom ops without a value read or a nonzero.


def test_a_network_runs_on_tensors_without_values(fake_poptorch):
    T, B = 5, 3
    net = torch.nn.Sequential(
        LIFLayer(20, 16, max_spikes=6, overflow="drop", grad_window=0.1, backend="ipu"),
        LIFLayer(16, 12, recurrent=True, max_spikes=6, overflow="drop", grad_window=0.1,
                 learn_threshold=True, backend="ipu"),
        ReadoutLayer(12, 4, backend="ipu"),
    ).to("meta")
    x = snn_ipu.encoding.rate(torch.rand(B, 20, device="meta"), T)
    membrane = net(x)
    loss = snn_ipu.losses.ce_membrane_loss(membrane, torch.zeros(B, dtype=torch.long,
                                                                 device="meta"))
    assert membrane.shape == (T, B, 4) and loss.device.type == "meta"
    first, second, readout = fake_poptorch.custom_op_calls
    # a dense input becomes a list of every neuron (its spikes cannot be counted)
    assert first["inputs"][0].shape == (T, B, 20)
    assert second["inputs"][0].shape == (T, B, 6) and readout["inputs"][0].shape == (T, B, 6)
    for call in fake_poptorch.custom_op_calls:
        assert all(t.device.type == "meta" for t in call["inputs"])
    hidden = net[0](x)
    counts_loss = snn_ipu.losses.ce_count_loss(hidden, torch.zeros(B, dtype=torch.long,
                                                                    device="meta"))
    assert counts_loss.shape == ()


def test_a_list_on_tensors_without_values_checks_its_shapes_only():
    ids = torch.zeros(2, 3, 4, dtype=torch.int32, device="meta")
    counts = torch.zeros(2, 3, 2, dtype=torch.int32, device="meta")
    s = SparseSpikes(ids, counts, 10)
    assert "spikes=?" in repr(s)
    with pytest.raises(ValueError, match=r"counts must have shape \[T, B, 2\]"):
        SparseSpikes(ids, counts[:, :2], 10)
    with pytest.raises(TypeError, match="int32"):
        SparseSpikes(ids.long(), counts, 10)


def test_a_traced_list_below_the_width_must_drop():
    x = torch.zeros(2, 3, 10, device="meta")
    with pytest.raises(ValueError, match="overflow='drop'"):
        SparseSpikes.from_dense(x, max_spikes=4)
    s = SparseSpikes.from_dense(x, max_spikes=4, overflow="drop")
    assert s.ids.shape == (2, 3, 4) and s.dropped.shape == ()


@pytest.mark.parametrize("max_spikes", [None, 3, 7, 12])
@pytest.mark.parametrize("with_eligible", [False, True])
def test_lists_built_by_rank_are_the_lists_of_entries(monkeypatch, max_spikes, with_eligible):
    """from_dense's static form (what a traced model builds), run on CPU tensors,
    against its usual form: the same listed ids, counts, values and gradient."""
    g = torch.Generator().manual_seed(3)
    T, B, N = 4, 5, 9
    x = (torch.rand(T, B, N, generator=g) < 0.35).float().requires_grad_()
    eligible = (torch.rand(T, B, N, generator=g) < 0.3) if with_eligible else None
    policy = "drop" if max_spikes is not None and max_spikes < N else "error"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "SparseSpikes.from_dense: spike list capacity")
        want = SparseSpikes.from_dense(x, max_spikes=max_spikes, overflow=policy,
                                       eligible=eligible)
    assert want.dropped > 0 or max_spikes != 3  # the drop is exercised
    monkeypatch.setattr(snn_ipu.spikes, "values_readable", lambda *tensors: False)
    got = SparseSpikes.from_dense(x, max_spikes=max_spikes, overflow=policy, eligible=eligible)

    assert torch.equal(got.counts, want.counts)
    assert int(got.dropped) == want.dropped
    assert got.capacity == (N if max_spikes is None else max_spikes)
    for t in range(T):
        for b in range(B):
            n = int(want.counts[t, b, 1])
            assert got.ids[t, b, :n].tolist() == want.ids[t, b, :n].tolist()
            assert got.values[t, b, :n].tolist() == want.values[t, b, :n].tolist()
            assert not got.values[t, b, n:].any()
            # padding: valid ids, distinct from the listed ones where there is room
            assert int(got.ids[t, b].min()) >= 0 and int(got.ids[t, b].max()) < N
    weights = torch.rand(T, B, N, generator=g)
    (grad_want,) = torch.autograd.grad((want.to_dense() * weights).sum(), x)
    (grad_got,) = torch.autograd.grad((got.to_dense() * weights).sum(), x)
    assert torch.equal(grad_got, grad_want)
    monkeypatch.undo()
    got.validate()  # the static lists keep every invariant of the format


def test_value_checks_still_run_on_readable_tensors():
    layer = LIFLayer(4, 3)
    with torch.no_grad():
        layer.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        layer(torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match="binary"):
        SparseSpikes.from_dense(torch.full((2, 1, 4), 0.5))


# --------------------------------------------------------------------------- issue 22
def test_example_outputs_live_on_the_weights_device(fake_poptorch):
    """PopTorch logs "No device set in torch.zeros(): forcing to IPU" for every tensor
    made without a device while tracing: stand-ins and example outputs take the weight's."""
    net = torch.nn.Sequential(LIFLayer(10, 6, max_spikes=4, overflow="drop", backend="ipu"),
                              ReadoutLayer(6, 3, bias=False, backend="ipu")).to("meta")
    net(SparseSpikes.from_dense(torch.zeros(4, 2, 10, device="meta")))
    assert len(fake_poptorch.custom_op_calls) == 2
    for call in fake_poptorch.custom_op_calls:
        assert {t.device.type for t in call["inputs"] + call["example_outputs"]} == {"meta"}
    assert fake_poptorch.device_logs == []


def test_every_op_output_feeds_the_layer_output(fake_poptorch):
    """Each output of the spiking op is consumed (PopART may reject unused ones): the
    list membrane, needed counts and dense state reach the returned values through a
    differentiable chain, with weight exactly zero even where they hold inf or NaN."""
    seen = {}

    def device(inputs, attributes):
        T, B, K = inputs[0].shape[0], inputs[0].shape[1], attributes["capacity"]
        outs = [torch.ones(T, B, K), torch.zeros(T, B, K, dtype=torch.int32),
                torch.full((T, B, 2), K, dtype=torch.int32),
                torch.full((T, B, K), float("nan")), torch.full((T, B, 2), float("inf")),
                torch.full((T, B, 6), -float("inf")), torch.ones(1), torch.ones(T, B, 1)]
        for i in (0, 3, 4, 5, 6, 7):
            outs[i].requires_grad_()
        seen["outs"] = outs
        return outs

    fake_poptorch.devices["SnnSpikingLayer"] = device
    fake_poptorch._phase = "run"
    layer = LIFLayer(8, 6, max_spikes=4, overflow="drop", learn_beta=True, backend="ipu")
    out = layer(spikes())
    assert torch.equal(out.values.detach(), torch.ones(3, 2, 4))
    out.values.sum().backward()
    for i in (3, 4, 5, 6, 7):  # membrane, needed, dense membrane, dense synaptic, spike bits
        grad = seen["outs"][i].grad
        assert grad is not None, f"output {i} is not consumed"
        assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.filterwarnings("default")
def test_a_layer_outside_overflow_counts_warns_once(fake_poptorch):
    from snn_ipu import ipu_overflow

    layer = LIFLayer(8, 6, max_spikes=4, overflow="error", backend="ipu")
    with pytest.warns(UserWarning, match=r"LIFLayer\(8->6\): on the IPU a list that overflows "
                                         r"max_spikes=4 .* only through snn_ipu.ipu_overflow"):
        layer(spikes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(spikes())  # once per layer
        # a list as wide as the layer cannot overflow
        LIFLayer(8, 6, max_spikes=6, overflow="drop", backend="ipu")(spikes())
        other = LIFLayer(8, 6, max_spikes=4, overflow="drop", backend="ipu")
        with ipu_overflow.OverflowCounts(other) as overflow:
            other(spikes())
    assert overflow.counts.shape == (1, len(ipu_overflow.ROW))


def test_exact_gradients_list_every_neuron(fake_poptorch):
    """grad_window=None lists every neuron in training: without a max_spikes the op gets
    the layer's width (the planner's activity guess would overflow every step)."""
    layer = LIFLayer(8, 6, grad_window=None, overflow="drop")
    call_spiking(layer, spikes())
    assert fake_poptorch.custom_op_calls[-1]["attributes"]["capacity"] == 6
    windowed = LIFLayer(8, 200, grad_window=0.1, overflow="drop")
    call_spiking(windowed, spikes())
    assert fake_poptorch.custom_op_calls[-1]["attributes"]["capacity"] < 200


def test_the_library_is_loaded_as_poptorch_documents(tmp_path, monkeypatch):
    """ctypes.cdll.LoadLibrary, as PopTorch's docs and custom-op tests load op libraries
    (no RTLD_GLOBAL: the ops register in libpopart's registry when the library loads)."""
    import ctypes

    lib = tmp_path / "libsnn_ipu_popart.so"
    lib.write_bytes(b"")
    loaded = []
    monkeypatch.setattr(ctypes.cdll, "LoadLibrary", lambda path: loaded.append(path) or path)
    monkeypatch.setattr(ipu, "_loaded", {})
    assert ipu.load_library(str(lib)) == str(lib)
    assert ipu.load_library(str(lib)) == str(lib)  # once
    assert loaded == [str(lib)]


def test_auto_finds_poptorch_installed_after_a_failed_import(monkeypatch):
    """``auto`` remembers a failed import of poptorch (it asks on every layer call), but
    still finds a poptorch that is in sys.modules later, and asks it every time."""
    from snn_ipu.backends import auto_backend

    monkeypatch.setitem(sys.modules, "poptorch", None)  # import poptorch raises
    assert auto_backend(torch.device("cpu")) == "emulator"
    assert auto_backend(torch.device("cpu")) == "emulator"
    fake = install(monkeypatch)
    assert auto_backend(torch.device("cpu")) == "emulator"  # not inside an IPU model
    fake._phase = "trace"
    assert auto_backend(torch.device("cpu")) == "ipu"


def test_placed_layers_take_the_capacity_and_activity_of_their_plan(fake_poptorch):
    """A windowed layer without max_spikes gets an automatic capacity: place() plans
    its tiles for the capacity its activity (or max_spikes) gives, and the op must be
    built with that list, not with the 5% guess an unplaced layer's op makes."""
    T, B = 100, 64
    net = torch.nn.Sequential(LIFLayer(700, 256, grad_window=0.5),
                              LIFLayer(256, 256, grad_window=0.5), ReadoutLayer(256, 20))
    unplaced = call_spiking(net[0], full_spikes(T, B, 700, K=16)).capacity
    fake_poptorch.custom_op_calls.clear()
    built = {}
    for how in (dict(activity=0.01), dict(activity=0.2), dict(max_spikes=100)):
        report = snn_ipu.place(net, B, T, input_max_spikes=16, **how)
        want = [r.capacity_out for r in report.layers[:2]]
        h = call_spiking(net[0], full_spikes(T, B, 700, K=16))
        call_spiking(net[1], h)
        calls = fake_poptorch.custom_op_calls[-2:]
        assert [c["attributes"]["capacity"] for c in calls] == want
        assert h.capacity == want[0]
        assert [c["attributes"]["activity"] for c in calls] == [how.get("activity", 0.05)] * 2
        built[str(how)] = want[0]
    assert built["{'max_spikes': 100}"] == 100
    # the plans differ from the unplaced op's list, or the test would show nothing
    assert built["{'activity': 0.01}"] < unplaced < built["{'activity': 0.2}"]


def test_unplaced_layers_and_own_capacities_keep_theirs(fake_poptorch):
    """A layer's own max_spikes, and exact gradients (every neuron listed), decide the
    capacity whatever place() planned; an unplaced layer's op is built for 5%."""
    T, B = 100, 64
    own = LIFLayer(700, 256, grad_window=0.5, max_spikes=40)
    exact = LIFLayer(700, 256)
    snn_ipu.place(torch.nn.Sequential(own, ReadoutLayer(256, 20)), B, T, activity=0.2)
    assert call_spiking(own, full_spikes(T, B, 700, K=16)).capacity == 40
    snn_ipu.place(torch.nn.Sequential(exact, ReadoutLayer(256, 20)), B, T, activity=0.01)
    assert call_spiking(exact, full_spikes(T, B, 700, K=16)).capacity == 256
    guess = snn_ipu.plan([700, 256, 20], B, T, activity=0.05,
                         input_max_spikes=16).layers[0].capacity_out
    windowed = LIFLayer(700, 256, grad_window=0.5)
    assert call_spiking(windowed, full_spikes(T, B, 700, K=16)).capacity == guess
    assert fake_poptorch.custom_op_calls[-1]["attributes"]["activity"] == 0.05


def test_an_exact_layers_evaluation_op_holds_every_neuron(fake_poptorch):
    """With autograd off (evaluation) a layer lists its spikes alone (window 0), but an
    exact-gradient layer without max_spikes has no estimate of how many: its op keeps
    the training op's list of every neuron (what plan() counts), where it took the 5%
    guess and dropped or refused the spikes past it."""
    layer = LIFLayer(700, 200)
    assert call_spiking(layer, full_spikes(10, 4, 700)).capacity == 200
    out, _ = ipu.spiking_layer(layer.config(records_grad=False), full_spikes(10, 4, 700),
                               params(layer), None)
    assert out.capacity == 200
    assert fake_poptorch.custom_op_calls[-1]["attributes"]["grad_window"] == 0.0
    windowed = LIFLayer(700, 200, grad_window=0.5)  # its calls all take the guess
    train, _ = ipu.spiking_layer(windowed.config(), full_spikes(10, 4, 700),
                                 params(windowed), None)
    infer, _ = ipu.spiking_layer(windowed.config(records_grad=False),
                                 full_spikes(10, 4, 700), params(windowed), None)
    assert infer.capacity == train.capacity < 200


def test_what_the_ops_cannot_build_is_refused_as_on_ipu_graph(fake_poptorch):
    """A list that grows and bfloat16 weights: refused before an op is emitted (the
    ipu_graph backend refused them; the ipu backend built the op, bfloat16 weights
    and a capacity that could not grow)."""
    layer = LIFLayer(8, 6, max_spikes=4, overflow="grow")
    with pytest.raises(ValueError, match="overflow='grow' cannot be honoured"):
        call_spiking(layer, spikes())
    layer = LIFLayer(8, 6, max_spikes=4).to(torch.bfloat16)
    with pytest.raises(TypeError, match="float32 or float16 weights, got torch.bfloat16"):
        call_spiking(layer, spikes())
    readout = ReadoutLayer(8, 5).to(torch.bfloat16)
    with pytest.raises(TypeError, match="torch.bfloat16"):
        call_readout(readout, spikes())
    assert fake_poptorch.custom_op_calls == []


def test_a_placed_layer_refuses_an_input_list_wider_than_its_plan(fake_poptorch):
    """place(input_max_spikes=K) chose the first layer's tiles for input lists of K: a
    wider list needs more tile memory than the plan counted. Without input_max_spikes
    the network's input is not checked (a dense input is listed N wide on the IPU)."""
    T, B = 20, 16
    net = torch.nn.Sequential(LIFLayer(64, 32, max_spikes=8), ReadoutLayer(32, 4))
    snn_ipu.place(net, B, T, input_max_spikes=10)
    call_spiking(net[0], full_spikes(T, B, 64, K=10))
    with pytest.raises(ValueError, match=r"input lists of 10 entries.*K=12.*"
                                         r"input_max_spikes=12"):
        call_spiking(net[0], full_spikes(T, B, 64, K=12))
    with pytest.raises(ValueError, match="input lists of 8 entries.*K=9"):
        call_readout(net[1], full_spikes(T, B, 32, K=9))
    snn_ipu.place(net, B, T)
    call_spiking(net[0], full_spikes(T, B, 64, K=64))
