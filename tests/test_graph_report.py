"""The graph report: a planned network's IPU program built on the host and
measured, next to the planner's estimates."""

import numpy as np
import pytest
import torch

from snn_ipu import LIFLayer, ReadoutLayer, _graph, plan
from snn_ipu.backends.ipu import pack_attributes


@pytest.fixture(scope="module")
def s_network():
    """The S network (700-256-256-20, batch 64, 100 steps) on ipu2."""
    return plan([700, 256, 256, 20], 64, 100).graph_report()


def test_layers_sit_on_their_planned_tiles(s_network):
    p = s_network.plan
    used = np.flatnonzero(s_network.vertices)
    own = set()
    for row, first in zip(p.layers, p.tile_offsets):
        own |= set(range(first, first + row.tiles_used))
        assert s_network.vertices[first:first + row.tiles_used].min() > 0, row.name
    assert set(used.tolist()) == own


def test_report_agrees_with_the_plan_where_both_model_the_same_thing(s_network):
    """Exchange per step (the planner's model of what the copies move) and the
    busiest tile within the margins docs/ipu.md explains."""
    p = s_network.plan
    for i, row in enumerate(p.layers):
        c = row.details["cycles"]
        for grad, planned in ((False, c["exchange_forward"]), (True, c["exchange_backward"])):
            graph = s_network.op(i, grad).step_exchange
            assert abs(graph - planned) <= 0.1 * planned, (row.name, grad, graph, planned)
        assert s_network.op(i, False).steps == s_network.op(i, True).steps == 100
    assert s_network.fits and p.fits
    planned = p.bytes_per_tile_combined
    assert abs(s_network.max_tile_bytes - planned) < 0.1 * planned


def test_report_prints_both_sides(s_network):
    text = str(s_network)
    for row in s_network.plan.layers:
        assert row.name in text
    assert "busiest tile" in text and "plan 95.0 KiB" in text


def test_a_network_that_does_not_fit():
    """Too much for a tile in the plan is too much in the graph too, and an Engine
    refuses to compile such an op."""
    # 8 neurons x 20000 inputs per tile: their weight gradients alone (640 KB) are too much
    # (the data-fed first layer's backward holds no weight blocks beside them)
    report = plan([20000, 8, 2], 2, 3).graph_report()
    assert not report.plan.fits and not report.fits


def test_host_plans_have_no_graph():
    with pytest.raises(ValueError, match="IPU target"):
        plan([10, 5], 2, 3, target="host").graph_report()


def test_vertex_estimates_add_up_to_the_planners_phases(s_network):
    """The graph's compute sets, each tile's worker vertices shared out over its six
    workers, against the planner's cost of the same phase."""
    p = s_network.plan
    for i, row in enumerate(p.layers):
        c = row.details["cycles"]
        phases = {}
        for grad in (False, True):
            for name, cycles in s_network.op(i, grad).compute_sets:
                phases[name.rsplit("/", 1)[1]] = cycles
        pairs = [("spikeMatmul", "spike_matmul"), ("stateUpdate", "state_update"),
                 ("stateGrad", "state_grad"), ("weightGrad", "weight_grad")]
        if row.details["input_needs_grad"]:
            pairs += [("inputGrad", "input_grad"), ("inputGradReduce", "partial_reduce")]
        for graph_name, plan_name in pairs:
            assert abs(phases[graph_name] - c[plan_name]) <= 0.02 * c[plan_name], \
                (row.name, graph_name, phases[graph_name], c[plan_name])


def test_step_cycles_agree_with_the_plan_per_layer_and_phase(s_network):
    """Each op's time-loop iteration as the graph builds it (compute sets and their
    syncs, exchange phases, popops operations) within 10% of the planner's timestep."""
    for i, row in enumerate(s_network.plan.layers):
        for grad, key in ((False, "cycles_forward_timestep"), (True, "cycles_backward_timestep")):
            graph, planned = s_network.op(i, grad).step, int(row.details[key])
            assert abs(graph - planned) <= 0.1 * planned, (row.name, grad, graph, planned)


def test_the_data_fed_layer_builds_no_input_gradient(s_network):
    """The first layer reads the network's data: its grad op builds no input gradient
    and no reduction (nor their vertices), and the planner costs none; the layers
    after it build both. The weight gradient is one compute set per step."""
    for i, row in enumerate(s_network.plan.layers):
        names = [n.rsplit("/", 1)[1] for n, _ in s_network.op(i, True).compute_sets]
        c = row.details["cycles"]
        assert names.count("weightGrad") == 1, (row.name, names)
        if i == 0:
            assert not {"inputGrad", "inputGradReduce"} & set(names), names
            assert c["input_grad"] == c["partial_reduce"] == 0
        else:
            assert {"inputGrad", "inputGradReduce"} <= set(names), (row.name, names)
            assert c["input_grad"] > 0


@pytest.fixture(scope="module")
def pipelined():
    """A small pipelined network on tiles of its own per layer, with the fused loop."""
    return plan([96, 64, 48, 10], 12, 20, pipelined=True).graph_report()


def test_fused_loop_runs_the_layers_side_by_side(pipelined):
    """The pipelined layers as one program: each step's compute sets hold every
    layer's vertices on its own tiles, so a phase costs the slowest layer's share of
    it, and the step less than the layers' ops one after another."""
    p = pipelined.plan
    assert p.pipelined and p.disjoint and len(pipelined.fused) == 2
    n = len(p.layers)
    for grad, fused in ((False, pipelined.fused[0]), (True, pipelined.fused[1])):
        assert fused.steps == 20
        per_layer = [pipelined.op(i, grad) for i in range(n)]
        assert max(o.step for o in per_layer) <= fused.step < sum(o.step for o in per_layer)
        phases = {}
        for o in per_layer:
            for name, cycles in o.compute_sets:
                key = name.rsplit("/", 1)[1]
                phases[key] = max(phases.get(key, 0), cycles)
        fused_phases = {name.rsplit("/", 1)[1]: c for name, c in fused.compute_sets}
        assert set(fused_phases) == set(phases)
        for name, cycles in fused_phases.items():
            if name != "weightGrad":  # rounds of samples: the layers' counts differ
                assert cycles == phases[name], (grad, name, cycles, phases[name])
    assert "fused time loop" in str(pipelined)


def test_fused_step_against_the_planners_pipelined_estimate(pipelined):
    """The fused program's training step next to the planner's pipelined estimate
    (the slowest layer's), within the margin docs/ipu.md gives."""
    planned = pipelined.plan.cycles_per_step
    graph = pipelined.fused_cycles_per_step
    assert abs(graph - planned) <= 0.1 * planned, (graph, planned)


def _small_network(bias: bool) -> torch.nn.Sequential:
    return torch.nn.Sequential(LIFLayer(96, 64, bias=bias), LIFLayer(64, 48, bias=bias),
                               ReadoutLayer(48, 10, bias=bias))


@pytest.fixture(scope="module")
def with_and_without_bias():
    return {bias: plan(_small_network(bias), 12, 20).graph_report() for bias in (True, False)}


def test_layers_without_a_bias_build_no_bias_in_their_ops(with_and_without_bias):
    """The planner does not model a bias, so both plans put the layers on the same
    tiles; the graphs differ: without a bias no op holds bias slices on its tiles
    ("SnnLayer/bias") nor bias-gradient blocks ("SnnLayer/gradBias"), and every layer
    holds at least those bytes less (float32 bias and its gradient, out_features each)."""
    biased, unbiased = with_and_without_bias[True], with_and_without_bias[False]
    assert [(r.num_tiles, r.sample_groups) for r in biased.plan.layers] == \
        [(r.num_tiles, r.sample_groups) for r in unbiased.plan.layers]
    assert [r.has_bias for r in unbiased.plan.layers] == [False] * 3

    def layers_with_bias_blocks(report):
        # all layers are overlaid from tile 0, the busiest tile, so each has blocks there
        return {name.split("/")[0] for name, _ in report.max_tile_variables
                if "/SnnLayer/" in name and name.rsplit("/", 1)[1] in ("bias", "gradBias")}

    assert layers_with_bias_blocks(biased) == {row.name for row in biased.plan.layers}
    assert layers_with_bias_blocks(unbiased) == set()
    assert unbiased.counts["variables"] < biased.counts["variables"]
    for i, row in enumerate(biased.plan.layers):
        saved = int(biased.layer_bytes[i].sum()) - int(unbiased.layer_bytes[i].sum())
        assert saved >= 2 * 4 * row.out_features, (row.name, saved)


def _sent_attributes(monkeypatch, plan_report) -> list:
    """The op attributes graph_report hands the graph builder, per layer."""
    sent = []
    build = _graph.graph_report

    def spy(layers, *args):
        sent.extend(layer["attributes"] for layer in layers)
        return build(layers, *args)

    monkeypatch.setattr(_graph, "graph_report", spy)
    plan_report.graph_report()
    return sent


def test_ops_get_each_layers_bias_and_window_as_the_ipu_backend_sends_them(monkeypatch):
    """Exact gradients (None, LIFLayer's default), windows of the layer's own, no bias,
    a recurrent layer's rec_bias alone (summed into its op's bias) and a readout (no
    window: LayerConfig's default): each op is built with the attributes the ipu
    backend packs for that layer (pack_attributes, given the bias its call passes)."""
    model = torch.nn.Sequential(
        LIFLayer(96, 64),
        LIFLayer(64, 48, grad_window=0.25, bias=False),
        LIFLayer(48, 48, recurrent=True, bias=False, rec_bias=True, grad_window=1.5),
        ReadoutLayer(48, 10, bias=False),
    )
    sent = _sent_attributes(monkeypatch, plan(model, 12, 20))
    assert [a["grad_window"] for a in sent] == [-1.0, 0.25, 1.5, -1.0]
    assert [a["has_bias"] for a in sent] == [1, 0, 1, 0]
    for layer, attributes in zip(model, sent):
        packed = pack_attributes(layer.config(), 0, 8, has_bias=layer._params().bias is not None,
                                 keep_dense_state=False)
        assert {k: attributes[k] for k in ("grad_window", "has_bias")} == \
            {k: packed[k] for k in ("grad_window", "has_bias")}, layer.name


def test_a_plan_of_sizes_assumes_default_layers(monkeypatch):
    """Sizes alone: the ops of layers built with the defaults (a bias, grad_window=None)."""
    sent = _sent_attributes(monkeypatch, plan([96, 64, 10], 12, 20))
    for layer, attributes in zip((LIFLayer(96, 64), ReadoutLayer(64, 10)), sent):
        packed = pack_attributes(layer.config(), 0, 8, has_bias=True, keep_dense_state=False)
        assert (attributes["grad_window"], attributes["has_bias"]) == \
            (packed["grad_window"], packed["has_bias"]) == (-1.0, 1)
