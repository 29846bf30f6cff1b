"""backend="ipu_graph": the IPU op's own graph (popops_ext/poplar/LayerGraph.cpp),
executed on the host implementation of the Poplar API, against the dense
reference backend.

Same layers, same weights: spikes and lists must be identical, membranes within
1e-6 of their scale, every gradient within 1e-4 relative (as the emulator
tests). Shapes are small: every call builds and checks a graph.
"""

import copy
import warnings

import pytest
import torch
from conftest import assert_rel_close, binary, check_without_recorded_membranes, tie_free_net

from snn_ipu import LIFLayer, ReadoutLayer, SpikeOverflowError
from snn_ipu import surrogate as sg
from snn_ipu.backends import ipu_graph
from snn_ipu.planning import IpuTiles, place

T, B, IN, HID, OUT = 8, 2, 20, 18, 7
SIZES = (T, B, IN, HID, OUT)
SURROGATES = [sg.ATan(2.0), sg.FastSigmoid(5.0), sg.Sigmoid(4.0), sg.Triangle(0.8, 1.0),
              sg.StraightThrough()]


def tie_free(model, reset, recurrent, window, surrogate, capacity=None, **kw):
    return tie_free_net(SIZES, model, reset, recurrent, window, surrogate,
                        first=dict(max_spikes=capacity or HID),
                        second=dict(max_spikes=capacity or OUT), **kw)


def on_graph(net):
    twin = copy.deepcopy(net)
    for layer in twin:
        layer.backend = "ipu_graph"
    return twin


def run(net, x, readout):
    xg = x.clone().requires_grad_()
    outs = [net[0](xg)]
    outs.append(net[1](outs[0]))
    (outs[1].to_dense() * readout).sum().backward()
    return xg.grad, outs


def compare(ref_net, graph_net, x, readout):
    gx_ref, ref_outs = run(ref_net, x, readout)
    gx_graph, graph_outs = run(graph_net, x, readout)
    for i, (r, g) in enumerate(zip(ref_outs, graph_outs)):
        assert torch.equal(r.counts, g.counts), f"layer {i} counts"
        assert torch.equal(r.ids, g.ids), f"layer {i} ids"
        assert torch.equal(r.values.detach(), g.values.detach()), f"layer {i} values"
        assert_rel_close(graph_net[i].last_membrane, ref_net[i].last_membrane, 1e-6,
                         f"layer {i} membrane")
        assert graph_net[i].stats["backend"] == "ipu_graph"
    for (name, p_ref), (_, p_graph) in zip(ref_net.named_parameters(),
                                           graph_net.named_parameters()):
        assert p_ref.grad is not None and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_graph.grad, p_ref.grad, 1e-4, name)
    assert_rel_close(gx_graph, gx_ref, 1e-4, "input grad")
    check_without_recorded_membranes(ref_net, graph_net, x, readout, ref_outs, gx_ref)
    return graph_outs


@pytest.mark.parametrize("model", ["leaky", "synaptic"])
@pytest.mark.parametrize("reset", ["subtract", "zero", "none"])
@pytest.mark.parametrize("recurrent", [False, True])
@pytest.mark.parametrize("window", [None, 0.3, 0.0])
def test_spiking_layers(model, reset, recurrent, window):
    """Every model, reset, recurrence and kind of window; the surrogates and learned
    decays rotate through the cases."""
    case = len(model) + len(reset) + int(recurrent) + (0 if window is None else int(10 * window))
    surrogate = SURROGATES[case % len(SURROGATES)]
    learn = dict(learn_beta=case % 2 == 0, learn_threshold=True)
    if model == "synaptic":
        learn["learn_alpha"] = case % 3 == 0
    net, x, readout = tie_free(model, reset, recurrent, window, surrogate, **learn)
    graph = on_graph(net)
    outs = compare(net, graph, x, readout)
    if window is not None:  # the window really made the lists sparse
        assert int(outs[0].counts[..., 1].sum()) < T * B * HID
    assert graph[0].stats["tiles"] > 1  # the ipu2 plan: 8 neurons per tile


@pytest.mark.parametrize("surrogate", [sg.ATan(2.0), sg.Sigmoid(4.0)])
def test_surrogates_exact_and_windowed(surrogate):
    for window in (None, 0.0):
        net, x, readout = tie_free("leaky", "subtract", False, window, surrogate)
        compare(net, on_graph(net), x, readout)


def test_capacity_drop_matches_reference():
    """A list too small for the step's spikes drops the excess on every backend alike;
    the dropped spikes still reset their neurons, in the gradients too."""
    net, x, readout = tie_free("leaky", "zero", True, 0.3, sg.ATan(2.0), capacity=4,
                               overflow="drop", learn_threshold=True)
    graph = on_graph(net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(net, graph, x, readout)
    assert graph[0].stats["spikes_dropped"] > 0 and graph[0].stats["eligible_dropped"] > 0
    assert graph[0].stats["spikes_dropped"] == net[0].stats["spikes_dropped"]
    assert graph[0].stats["needed_capacity"] == net[0].stats["needed_capacity"]


def test_capacity_error_raises_and_grow_is_refused():
    net, x, _ = tie_free("leaky", "subtract", False, 0.3, sg.ATan(2.0), capacity=2,
                         overflow="drop")
    graph = on_graph(net)
    graph[0].overflow = "error"
    with pytest.raises(SpikeOverflowError, match="max_spikes=2"):
        graph(x)
    graph[0].overflow = "grow"
    with pytest.raises(ValueError, match="grow"):
        graph(x)


def test_readout_with_learned_beta():
    torch.manual_seed(3)
    lif = LIFLayer(IN, HID, max_spikes=HID, grad_window=0.4, backend="reference")
    out = ReadoutLayer(HID, OUT, learn_beta=True, backend="reference")
    with torch.no_grad():
        lif.weight.mul_(4.0)
    ref = torch.nn.Sequential(lif, out)
    graph = on_graph(ref)
    x = binary((T, B, IN), 0.3, 3)
    target = torch.randn(T, B, OUT, generator=torch.Generator().manual_seed(3))
    for net in (ref, graph):
        (net(x) * target).sum().backward()
    for (name, p_ref), (_, p_graph) in zip(ref.named_parameters(), graph.named_parameters()):
        assert float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_graph.grad, p_ref.grad, 1e-4, name)


def test_one_tile_plan():
    """All of a layer's neurons on one tile (one vertex per sample and compute set)."""
    net, x, readout = tie_free("synaptic", "subtract", True, None, sg.ATan(2.0))
    graph = on_graph(net)
    for layer in graph:
        layer.ipu_tiles = IpuTiles(0, 1, layer.out_features, B, T)
    compare(net, graph, x, readout)
    assert [layer.stats["tiles"] for layer in graph] == [1, 1]


def test_placed_network_with_tile_offsets():
    """place() puts each layer on tiles of its own (as it does for a pipelined plan):
    the graph is built from there."""
    net, x, readout = tie_free("leaky", "zero", False, 0.3, sg.FastSigmoid(5.0))
    graph = on_graph(net)
    report = place(graph, B, T, pipelined=True)
    assert report.tile_offsets[1] > 0
    assert graph[1].ipu_tiles.first_tile == report.tile_offsets[1]
    compare(net, graph, x, readout)


def test_placed_windowed_layers_build_the_lists_their_plan_counted():
    """Windowed layers without max_spikes, place()d for the activity they run at: the
    graph holds the lists the plan sized from it (here every neuron, as the reference's
    lists), and gives the reference's results. Built for the 5% an unplaced op
    assumes, the lists would be too short for this input and overflow."""
    net, x, readout = tie_free("leaky", "subtract", False, 0.3, sg.ATan(2.0))
    graph = on_graph(net)
    for layer in graph:
        layer.max_spikes = None
    report = place(graph, B, T, activity=0.3, input_max_spikes=IN)
    assert [row.capacity_out for row in report.layers] == [HID, OUT]
    outs = compare(net, graph, x, readout)
    assert [o.capacity for o in outs] == [HID, OUT]
    unplaced = on_graph(net)
    for layer in unplaced:
        layer.max_spikes = None
    with pytest.raises(SpikeOverflowError):
        unplaced[1](unplaced[0](x))


def test_an_exact_network_evaluates_as_the_reference():
    """Exact gradients and no max_spikes: with autograd off the op lists spikes alone,
    in the list of every neuron its training calls have, and gives the reference's
    spikes; a list of the 5% guess overflowed here."""
    net, x, _ = tie_free("leaky", "subtract", False, None, sg.ATan(2.0))
    graph = on_graph(net)
    for layer in (*net, *graph):
        layer.max_spikes = None
    with torch.no_grad():
        ref = net[1](net[0](x))
        out = graph[1](graph[0](x))
    assert graph[0].stats["capacity"] == HID and out.capacity == OUT
    assert torch.equal(out.to_dense(), ref.to_dense())
    assert float(ref.to_dense().sum()) > 0


def test_s_network_first_layer_tile_plan():
    """The 700-256 layer of the S network with the tile size its ipu2 plan (batch 64,
    100 steps) gives it, on a short sequence and a small batch."""
    from snn_ipu.planning import plan

    npt = plan([700, 256, 256, 20], 64, 100).layers[0].neurons_per_tile
    torch.manual_seed(0)
    ref = LIFLayer(700, 256, max_spikes=256, grad_window=0.2, backend="reference")
    with torch.no_grad():
        ref.weight.mul_(6.0)
    graph = copy.deepcopy(ref)
    graph.backend = "ipu_graph"
    graph.ipu_tiles = IpuTiles(0, -(-256 // npt), npt, 2, 3)
    x = binary((3, 2, 700), 0.1, 0)
    target = torch.randn(3, 2, 256, generator=torch.Generator().manual_seed(0))
    outs = []
    for layer in (ref, graph):
        xg = x.clone().requires_grad_()
        out = layer(xg)
        (out.to_dense() * target).sum().backward()
        outs.append((out, xg.grad))
    assert graph.stats["tiles"] == -(-256 // npt) > 1
    assert torch.equal(outs[0][0].ids, outs[1][0].ids) and int(outs[0][0].counts.sum()) > 0
    assert_rel_close(outs[1][1], outs[0][1], 1e-4, "input grad")
    assert_rel_close(graph.weight.grad, ref.weight.grad, 1e-4, "weight grad")


def test_half_weights_run_the_half_vertices():
    torch.manual_seed(2)
    ref = LIFLayer(IN, HID, max_spikes=HID, dtype=torch.float16, backend="emulator")
    with torch.no_grad():
        ref.weight.mul_(4.0)
    graph = copy.deepcopy(ref)
    graph.backend = "ipu_graph"
    x = binary((T, B, IN), 0.3, 2)
    a, b = ref(x), graph(x)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.counts, b.counts)


def test_network_trains_like_the_emulator():
    """LIF -> LIF -> readout, a few Adam steps: the weights on ipu_graph follow the
    emulator's (both run the same codelets; the reference's sums differ in order)."""
    torch.manual_seed(5)
    net = torch.nn.Sequential(
        LIFLayer(IN, HID, max_spikes=HID, grad_window=0.5, backend="emulator"),
        LIFLayer(HID, HID, max_spikes=HID, grad_window=0.5, backend="emulator"),
        ReadoutLayer(HID, OUT, backend="emulator"),
    )
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[1].weight.mul_(3.0)
    twin = on_graph(net)
    initial = [p.detach().clone() for p in net.parameters()]
    x = binary((T, B, IN), 0.3, 5)
    labels = torch.tensor([1, 4])
    for model in (net, twin):
        opt = torch.optim.Adam(model.parameters(), lr=0.02)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x).sum(0), labels)
            loss.backward()
            opt.step()
    for (name, p), (_, q), p0 in zip(net.named_parameters(), twin.named_parameters(), initial):
        assert float((p.detach() - p0).abs().max()) > 1e-3, f"{name} did not train"
        assert_rel_close(q.detach(), p.detach(), 1e-5, name)


def test_grad_wiring_gives_every_produced_input_a_gradient():
    """PopART fails a producer op's gradient when a consumer's grad op leaves one of
    its inputs without a gradient: each op's grad op must give one for the inputs
    another layer's op produces (its list: ids, counts, values)."""
    for sig in ipu_graph.SIGNATURES.values():
        produced = {sig["inputs"].index(n) for n in ipu_graph.PRODUCED_BY_OTHER_OPS}
        given = {fwd for _, fwd in sig["grad_outputs"]}
        assert produced <= given, f"{sig['grad_op']} leaves {produced - given} without gradient"
        takes = {(kind, i) for kind, i in sig["grad_inputs"]}
        assert ("GradOut", sig["outputs"].index("values" if "values" in sig["outputs"]
                                                else "membrane")) in takes


def test_backward_refuses_a_wiring_that_leaves_a_produced_input_out(monkeypatch):
    """The routing itself enforces PopART's rule: drop the grad op's gradient for
    in_ids from the table and a network's backward fails, naming it."""
    sig = copy.deepcopy(ipu_graph.SIGNATURES["SnnSpikingLayer"])
    ids = sig["inputs"].index("in_ids")
    sig["grad_outputs"] = [(g, f) for g, f in sig["grad_outputs"] if f != ids]
    monkeypatch.setitem(ipu_graph.SIGNATURES, "SnnSpikingLayer", sig)
    net, x, readout = tie_free("leaky", "subtract", False, 0.3, sg.ATan(2.0))
    graph = on_graph(net)
    with pytest.raises(ipu_graph.GraphError, match="in_ids"):
        run(graph, x, readout)


def test_data_fed_layer_builds_no_input_gradient_and_every_weight_trains(monkeypatch):
    """Data that needs no gradient (a plain tensor): the first layer's ops are built with
    input_needs_grad=0, so its grad op returns no in_values gradient, the second layer's
    with 1. Every weight's gradient still equals the reference's (the weight gradients
    now come from WeightGradRows, all of a tile's samples in one compute set), and the
    network trains: each weight moves."""
    net, x, readout = tie_free("leaky", "subtract", True, 0.3, sg.ATan(2.0))
    graph = on_graph(net)
    seen = []
    real = ipu_graph._run

    def spy(cfg, op, attributes, inputs, forward_inputs=()):
        outputs = real(cfg, op, attributes, inputs, forward_inputs)
        seen.append((op, attributes["input_needs_grad"], len(outputs)))
        return outputs

    monkeypatch.setattr(ipu_graph, "_run", spy)
    initial = [p.detach().clone() for p in graph.parameters()]
    for model in (net, graph):
        (model[1](model[0](x)).to_dense() * readout).sum().backward()
    for (name, p_ref), (_, p_graph) in zip(net.named_parameters(), graph.named_parameters()):
        assert p_ref.grad is not None and float(p_ref.grad.abs().max()) > 0, name
        assert_rel_close(p_graph.grad, p_ref.grad, 1e-4, name)
    layer_ops = [(op, flag, n) for op, flag, n in seen if op.startswith("SnnSpikingLayer")]
    forward = [flag for op, flag, _ in layer_ops if not op.endswith("Grad")]
    backward = [(flag, n) for op, flag, n in layer_ops if op.endswith("Grad")]
    assert forward == [0, 1]
    full = len(ipu_graph.SIGNATURES["SnnSpikingLayer"]["grad_outputs"])
    assert backward == [(1, full), (0, full - 1)]  # backward runs the last layer first
    torch.optim.SGD(graph.parameters(), lr=0.5).step()
    for (name, p), p0 in zip(graph.named_parameters(), initial):
        assert float((p.detach() - p0).abs().max()) > 0, f"{name} did not move"


def test_auto_never_picks_ipu_graph():
    from snn_ipu.backends import select

    assert select("auto").__name__.endswith("emulator")


def test_an_unknown_op_attribute_is_named():
    from snn_ipu import _graph

    with pytest.raises(ValueError, match="unknown attribute bogus"):
        _graph.run_op("SnnReadoutLayer", {"bogus": 1}, [])


def test_spike_losses_run_on_the_device_and_match_the_reference():
    """to_dense() / spike_counts() of an ipu_graph list run as the device's op (a readout
    with identity weights, docs/ipu.md): the same dense spikes and every gradient as the
    reference's scatters, for ce_count_loss and ce_rate_loss."""
    from snn_ipu import losses

    net, x, _ = tie_free("leaky", "subtract", True, 0.3, sg.ATan(2.0))
    graph = on_graph(net)
    labels = torch.tensor([1, 5])
    for loss in (losses.ce_count_loss, losses.ce_rate_loss):
        for model in (net, graph):
            model.zero_grad()
            loss(model(x), labels).backward()
        assert graph[1](graph[0](x))._dense_on_device is not None
        ref_dense = net[1](net[0](x)).to_dense()
        assert torch.equal(graph[1](graph[0](x)).to_dense().detach(), ref_dense.detach())
        for (name, p_ref), (_, p_graph) in zip(net.named_parameters(),
                                               graph.named_parameters()):
            assert float(p_ref.grad.abs().max()) > 0, name
            assert_rel_close(p_graph.grad, p_ref.grad, 1e-4, f"{loss.__name__} {name}")


@pytest.mark.parametrize("dense", [False, True])
def test_graded_inputs_are_refused_as_on_the_emulator(dense):
    """The op takes every listed input entry as a spike of 1: a graded value is refused
    on ipu_graph with the emulator's own error."""
    from snn_ipu import SparseSpikes

    x = binary((T, B, IN), 0.3, 2) * 0.5
    errors = []
    for backend in ("emulator", "ipu_graph"):
        layer = LIFLayer(IN, HID, max_spikes=HID, backend=backend)
        ids, counts, values = _listed(x)
        inp = x if dense else SparseSpikes(ids, counts, IN, values, validate=False)
        with pytest.raises(ValueError) as info:
            layer(inp)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert "binary" in errors[0] or "graded" in errors[0]


def _listed(x):
    from snn_ipu import SparseSpikes

    s = SparseSpikes.from_dense((x != 0).float())
    return s.ids, s.counts, torch.where(s.values > 0, s.values * 0.5, s.values)
