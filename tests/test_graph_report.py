"""The graph report: a planned network's IPU program built on the host and
measured, next to the planner's estimates."""

import numpy as np
import pytest

from snn_ipu import plan


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
