"""The IPU plan's partition over neurons and samples (popops_ext/plan, LayerGraph).

A layer's tiles of neurons are repeated for each sample group, each group with its
own copy of the weight rows and only its own samples' lists; the groups' weight
gradients are summed once per call. ``ipu_graph`` runs such plans (the IPU's own
graph on the host, with its checks of tile-local access and memory per tile) and
must give the dense reference backend's spikes, membranes and every gradient.
"""

import copy

import pytest
import torch
from conftest import assert_rel_close, binary, margin

from snn_ipu import LIFLayer, ReadoutLayer, plan
from snn_ipu._native import _C
from snn_ipu.planning import IpuTiles, place

T, B, IN, HID, OUT = 6, 5, 20, 18, 7


def network(seed):
    torch.manual_seed(seed)
    common = dict(grad_window=0.5, backend="reference")
    net = torch.nn.Sequential(
        LIFLayer(IN, HID, recurrent=True, learn_beta=True, max_spikes=HID, **common),
        LIFLayer(HID, HID, max_spikes=12, overflow="drop", **common),
        ReadoutLayer(HID, OUT, backend="reference"),
    )
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[0].rec_weight.mul_(2.0)
        net[1].weight.mul_(3.0)
    return net


def tie_free():
    for seed in range(30):
        net = network(seed)
        x = binary((T, B, IN), 0.3, seed)
        for layer in net[:2]:
            layer.record_membrane = True
        with torch.no_grad():
            net(x)
        if min(margin(layer.last_membrane, 1.0, 0.5) for layer in net[:2]) > 1e-4:
            for layer in net[:2]:
                layer.record_membrane = False
            return net, x
    pytest.fail("no tie-free seed")


def run(net, x, weights):
    xg = x.clone().requires_grad_()
    h0 = net[0](xg)
    h1 = net[1](h0)
    out = net[2](h1)
    (out * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters()}
    return (h0, h1, out), grads, xg.grad


@pytest.mark.parametrize("neurons_per_tile, groups", [(8, 2), (8, 5), (24, 3)])
def test_sample_groups_run_on_the_graph_as_the_reference(neurons_per_tile, groups):
    ref, x = tie_free()
    graph = copy.deepcopy(ref)
    first = 0
    for layer in graph:
        layer.backend = "ipu_graph"
        tiles = -(-layer.out_features // neurons_per_tile)
        layer.ipu_tiles = IpuTiles(first, tiles, neurons_per_tile, B, T, groups)
        first += tiles * groups
    weights = torch.randn(T, B, OUT, generator=torch.Generator().manual_seed(1))
    (r0, r1, rout), rgrads, rgx = run(ref, x, weights)
    (g0, g1, gout), ggrads, ggx = run(graph, x, weights)
    for i, (r, g) in enumerate([(r0, g0), (r1, g1)]):
        assert torch.equal(r.ids, g.ids) and torch.equal(r.counts, g.counts), f"layer {i}"
        assert torch.equal(r.values.detach(), g.values.detach()), f"layer {i} values"
    assert_rel_close(gout.detach(), rout.detach(), 1e-5, "readout membrane")
    for name, g in rgrads.items():
        assert float(g.abs().max()) > 0, name
        assert_rel_close(ggrads[name], g, 1e-4, name)
    assert_rel_close(ggx, rgx, 1e-4, "input")
    assert graph[1].stats["total_spikes_dropped"] == ref[1].stats["total_spikes_dropped"]


def test_more_groups_than_samples_are_refused():
    layer = LIFLayer(IN, HID, backend="ipu_graph")
    layer.ipu_tiles = IpuTiles(0, 3, 8, 2, T, 3)
    with pytest.raises(ValueError, match="sample_groups=3 exceeds the batch of 2"):
        layer(binary((T, 2, IN), 0.3, 0))


def s_network_rows(**kw):
    return plan([700, 256, 256, 20], 64, 100, activity=0.01, **kw)


def test_planner_splits_the_batch_where_the_neurons_run_out():
    """256 neurons in grains of 8 give at most 32 tiles; the planner uses more by
    splitting the 64 samples, which its own model says is faster than one group."""
    report = s_network_rows()
    for row in report.layers:
        assert row.sample_groups > 1
        d = row.details
        one_group = _C.plan_layer(
            row.in_features, row.out_features, 64, 100, False, int(d["model"]),
            row.capacity_in, row.capacity_out, 0.01, 4, "ipu2", 1,
            neurons_per_tile=row.neurons_per_tile, sample_groups=1)
        assert row.cycles_per_step < int(one_group["cycles_training_step"])
        assert row.tiles_used == row.num_tiles * row.sample_groups <= 1472
        assert int(d["samples_per_group_max"]) == -(-64 // row.sample_groups)


def test_an_unplaced_network_fits_overlaid():
    """The ops run one after another, so unplaced layers (each from tile 0 with its
    own fastest plan, what the ipu backend builds) share tiles: that must fit."""
    report = s_network_rows()
    assert report.layout == "overlaid" and report.tile_offsets == [0, 0, 0]
    assert report.fits, report.problems()
    io = [int(r.details["memory"]["io_share"]) for r in report.layers]
    own = max(r.bytes_per_tile_max - share for r, share in zip(report.layers, io))
    assert report.bytes_per_tile_combined == own + sum(io)
    assert report.cycles_per_step == sum(r.cycles_per_step for r in report.layers)


def test_pipelined_plan_gives_each_layer_its_own_tiles():
    report = s_network_rows(pipelined=True)
    assert report.layout == "disjoint" and report.fits
    assert sum(r.tiles_used for r in report.layers) <= 1472
    offsets = report.tile_offsets
    assert offsets == [0, report.layers[0].tiles_used,
                       report.layers[0].tiles_used + report.layers[1].tiles_used]
    # the fused time loop: no less than the slowest layer, less than the layers' sum
    per_layer = [r.cycles_per_step for r in report.layers]
    assert max(per_layer) < report.cycles_per_step == report.fused_cycles_per_step < sum(per_layer)


def test_place_hands_out_the_sample_groups():
    torch.manual_seed(0)
    net = torch.nn.Sequential(LIFLayer(700, 256), LIFLayer(256, 256), ReadoutLayer(256, 20))
    report = place(net, 64, 100, activity=0.01)
    # exact gradients: each hidden layer's list holds all 256 neurons, the input of the
    # layer after it; a readout has none, and no input_max_spikes leaves the network's
    # input unchecked
    for layer, row, first, capacity, capacity_in in zip(
            net, report.layers, report.tile_offsets, [256, 256, None], [None, 256, 256]):
        assert layer.ipu_tiles == IpuTiles(first, row.num_tiles, row.neurons_per_tile, 64, 100,
                                           row.sample_groups, capacity, 0.01, capacity_in)
