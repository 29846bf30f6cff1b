"""The tile planner (popops_ext/plan) and snn_ipu.planning, against hand-computed numbers.

The expected bytes below are worked out by hand from the memory model in
popops_ext/plan/MemoryEstimation.cpp (the list of what a tile holds), not
taken from the planner's output.
"""

import dataclasses
import math

import conftest
import numpy as np
import pytest
import torch

from snn_ipu import LIFLayer, ReadoutLayer
from snn_ipu._native import _C
from snn_ipu.backends.work_split import tile_starts_for
from snn_ipu.planning import LayerPlanRow, PlanError, PlanReport, plan

KIB = 1024
TILE = 624 * KIB
RESERVED = 32 * KIB  # code and vertex state per tile on ipu2


def tiny(**kw):
    """10 -> 4 leaky layer, batch 2, T 3, K_in 5, K_out 3, float weights, on ipu2."""
    args = dict(in_features=10, out_features=4, batch=2, timesteps=3, recurrent=False, model=0,
                capacity_in=5, capacity_out=3, activity=0.05, weight_bytes=4, target="ipu2",
                threads=1)
    args.update(kw)
    return _C.plan_layer(**args)


def test_tiny_layer_on_one_tile_bytes_by_hand():
    p = tiny(neurons_per_tile=4)
    assert p["num_tiles"] == 1
    assert list(p["tile_starts"]) == [0, 4]
    in_list = 5 * 4 + 8            # ids + counts of one input list: 28
    emitted = 2 * 4 * (4 + 4) + 8  # LifUpdate's spike and eligible lists, 4 each: 72
    out_list = 3 * (4 + 4 + 4) + 8  # combined list with membranes and grads: 44
    sent = 2 * 3 * (4 + 4) + 8     # both lists cut to min(K_out, 4) = 3: 56
    # Per-neuron arrays are padded to the codelets' 8-float chunks: 4 -> 8.
    expected = {
        "weights": 8 * 10 * 4,                       # 320
        "grad_weights": 8 * 10 * 4,                  # float: 320
        "neuron_params": 8 * 3 * 4 * 2,              # bias, beta, thr and grads: 192
        "state": 2 * 8 * 4 * 6,                      # U, S, I; carry, notSpiked, gI: 384
        "spike_buffers": 2 * (in_list + emitted),    # 200
        "grad_buffers": 2 * out_list + 2 * (2 * 3 * 12),  # + the tile's slice: 232
        "history": 0,                                # lists live in the op's tensors
        "combine": 2 * sent,                         # both samples combined here: 112
        "reduce": 0,                                 # one tile: nothing to reduce
        # input lists, grads at them, output lists (id, membrane, grad), counts:
        # 3 * 2 * (28 + 20 + 36 + 8) = 552 bytes spread over all 1472 tiles
        "io_share": math.ceil(552 / 1472),
        "reserved": RESERVED,
    }
    assert p["memory"] == expected
    assert p["bytes_per_tile_max"] == 1761 + RESERVED == sum(expected.values())
    assert p["bytes_per_tile_mean"] == pytest.approx(1761 + RESERVED)
    # the tile's own bytes without its io share, and the op's 552 io bytes (spread over
    # the IPU) once
    assert p["bytes_total"] == 1761 + RESERVED - 1 + 552
    assert p["fits"] and p["reason"] == ""


def test_tiny_layer_on_the_host_keeps_its_tensors_and_reserves_nothing():
    p = tiny(neurons_per_tile=4, target="host")
    assert p["memory"]["io_share"] == 552 and p["memory"]["reserved"] == 0
    assert p["bytes_per_tile_max"] == 1760 + 552 == p["bytes_total"]
    # kept through the step: W and its gradient (8-padded rows x 10 inputs x 4 bytes,
    # 320 each), bias, beta, threshold and their gradients (8 x 3 x 4 x 2 = 192) and
    # the op's tensors over T (552); not the state and a step's buffers
    assert p["bytes_kept"] == 320 + 320 + 192 + 552


def test_tiny_layer_on_two_tiles_bytes_and_exchange_by_hand():
    p = tiny(neurons_per_tile=2)
    assert p["num_tiles"] == 2
    assert list(p["tile_starts"]) == [0, 2, 4]
    sent = 2 * 2 * 8 + 8  # 40: a tile with 2 neurons sends at most 2 + 2 entries
    m = p["memory"]
    assert m["weights"] == 8 * 10 * 4  # 2 neurons, padded to a chunk of 8
    assert m["spike_buffers"] == 2 * 28 + 2 * (2 * 2 * 8 + 8)
    # combined list + slice of 2 x 2 entries + partial input grads [B, K_in]
    assert m["grad_buffers"] == 2 * 44 + 2 * (2 * 2 * 12) + 2 * 5 * 4
    assert m["combine"] == 1 * 2 * sent                  # one sample, both tiles' lists
    assert m["reduce"] == math.ceil(2 * 5 / 2) * 2 * 4   # 5 outputs x 2 partials
    assert m["io_share"] == 1
    assert p["bytes_per_tile_max"] == 1697 + RESERVED
    assert p["bytes_per_tile_mean"] == pytest.approx(1697 + RESERVED)  # both tiles alike
    # forward: input lists to both tiles + every sample's two partial lists
    assert p["exchange_bytes_forward"] == 2 * (2 * 28) + 2 * (2 * sent)
    # backward: input lists again, the combined output list with grads to
    # both tiles, and the partial input grads
    assert p["exchange_bytes_backward"] == 2 * (2 * 28) + 2 * (2 * 44) + 2 * 5 * 2 * 4
    assert p["exchange_bytes_per_step"] == 272 + 368


def test_recurrent_synaptic_half_weights_by_hand():
    p = tiny(neurons_per_tile=4, recurrent=True, model=1, weight_bytes=2)
    m = p["memory"]
    assert m["weights"] == 8 * (10 + 4) * 2           # W and V rows, half
    assert m["grad_weights"] == 8 * (10 + 4) * 4      # accumulated in float
    assert m["neuron_params"] == 8 * 4 * 4 * 2        # + alpha
    assert m["state"] == 2 * 8 * 4 * 8                # + syn and its carry
    assert m["spike_buffers"] == 2 * (28 + (3 * 4 + 8) + 72)  # + own list at t-1


def test_readout_keeps_dense_membrane_history():
    p = tiny(neurons_per_tile=4, model=2)
    m = p["memory"]
    assert p["capacity_out"] == 0
    assert m["history"] == 3 * 2 * 4 * 4
    assert m["state"] == 2 * 8 * 4 * 4
    assert m["combine"] == 0
    assert m["grad_buffers"] == 2 * 4 * 4  # dL/dU[t] arrives dense


def test_dense_history_when_learning_decays():
    p = tiny(neurons_per_tile=4, model=1, dense_history=True)
    assert p["memory"]["history"] == 3 * 2 * 4 * 4 * 2  # U and syn over T


def test_auto_capacity_is_twice_the_expected_listed_entries():
    p = _C.plan_layer(700, 256, 8, 10, False, 0, 0, 0, 0.05, 4, "ipu2", 1)
    assert p["capacity_in"] == math.ceil(2 * 2 * 0.05 * 700)  # 140
    assert p["capacity_out"] == math.ceil(2 * 2 * 0.05 * 256)  # 52


def test_spike_matmul_cycles_by_hand():
    # 6 samples on 6 workers: one sample each, 4 neurons, 10 expected spikes.
    p = tiny(in_features=100, capacity_in=100, activity=0.1, batch=6, neurons_per_tile=4)
    per_spike = 6 + math.ceil(8 / 2) * 3      # row padded to 8: 18
    per_item = 8 + 10 * per_spike             # 188
    # poplibs' supervisor start of 18 cycles (popsparse PerformanceEstimation.hpp)
    assert p["cycles"]["spike_matmul"] == 18 + (15 + per_item) * 6


@pytest.mark.parametrize("target", ["ipu2", "host"])
@pytest.mark.parametrize("out", [1, 7, 20, 256, 1000, 5000])
def test_tiles_cover_all_neurons(target, out):
    p = _C.plan_layer(300, out, 4, 10, False, 0, 0, 0, 0.05, 4, target, 3)
    starts = p["tile_starts"]
    assert starts.dtype == np.int32
    assert len(starts) == p["num_tiles"] + 1
    assert starts[0] == 0 and starts[-1] == out
    assert np.all(np.diff(starts) > 0)
    sizes = np.diff(starts)
    assert np.all(sizes[:-1] % 8 == 0)  # whole 8-neuron chunks but for the last tile
    if target == "ipu2":  # groups of tiles, each with a share of the 4 samples
        assert p["num_tiles"] * p["sample_groups"] <= 1472 and 1 <= p["sample_groups"] <= 4
    else:  # a work item per thread at least: tiles, or sample groups of a tile
        assert p["num_tiles"] * p["sample_groups"] >= 3
        assert p["sample_groups"] == 1 or p["num_tiles"] < 3


def test_host_splits_the_batch_when_tiles_are_fewer_than_threads():
    def split(n_in, batch, recurrent=False):
        p = _C.plan_layer(n_in, 64, batch, 10, recurrent, 0, 0, 0, 0.05, 4, "host", 2)
        return p["num_tiles"], p["sample_groups"], p["bytes_budget"]

    l2 = split(100, 64)[2]  # the tile budget: a core's L2, at least 2 MiB (or 4 MiB)
    # Weights within half of the budget: one tile, the two threads take 32 samples each.
    assert split(l2 // 4 // (64 * 4), 64)[:2] == (1, 2)
    # One sample cannot be split: two tiles, as with larger weights, which every
    # thread would otherwise read whole.
    assert split(l2 // 4 // (64 * 4), 1)[:2] == (2, 1)
    assert split(3 * l2 // 4 // (64 * 4), 64)[:2] == (2, 1)
    # ... unless the layer is recurrent: groups spare it a barrier per step.
    assert split(3 * l2 // 4 // (64 * 4), 64, recurrent=True)[:2] == (1, 2)
    # Tiles enough for the threads: no groups.
    p = _C.plan_layer(2312, 1466, 48, 10, False, 0, 0, 0, 0.05, 4, "host", 2)
    assert p["num_tiles"] >= 2 and p["sample_groups"] == 1


def test_host_tile_budget_follows_the_l2():
    """The host's tile budget: one core's L2 as sysconf reports it, no less than 2 MiB,
    and 4 MiB where that L2 is below 1 MiB (narrower tiles ran slower where the L2 is
    small: docs/performance.md, rounds 24 and 25)."""
    l2 = conftest.host_l2_bytes()
    if l2 is None:
        pytest.skip("no getconf to read the L2's size with")
    budget = _C.plan_layer(100, 64, 8, 10, False, 0, 0, 0, 0.05, 4, "host", 2)["bytes_budget"]
    assert budget == (4 * 2**20 if l2 < 2**20 else max(l2, 2 * 2**20))


def test_host_weight_block_within_l2():
    p = _C.plan_layer(4000, 512, 4, 10, False, 0, 0, 0, 0.05, 4, "host", 2)
    n = p["neurons_per_tile_max"]
    assert n % 8 == 0
    assert n == 8 or n * 4000 * 4 <= p["bytes_budget"]
    assert (n + 8) * 4000 * 4 > p["bytes_budget"] or n + 8 > 512 // 2


def test_costs_grow_with_activity_and_size():
    cyc = [tiny(in_features=400, capacity_in=400, activity=a, neurons_per_tile=4)
           for a in (0.01, 0.05, 0.2)]
    steps = [c["cycles_training_step"] for c in cyc]
    assert steps[0] < steps[1] < steps[2]
    assert len({c["bytes_per_tile_max"] for c in cyc}) == 1  # capacities fixed: same bytes
    by_n = [tiny(out_features=n, neurons_per_tile=n)["cycles_training_step"] for n in (4, 16, 64)]
    assert by_n[0] < by_n[1] < by_n[2]
    by_t = [tiny(timesteps=t, neurons_per_tile=4)["bytes_per_tile_max"] for t in (3, 30, 300)]
    assert by_t[0] < by_t[1] < by_t[2]
    # samples/s is batch over seconds per step
    p = tiny(neurons_per_tile=4)
    assert p["samples_per_second"] == pytest.approx(2 / (p["cycles_training_step"] / 1.33e9))


def test_too_big_layer_does_not_fit_and_says_why():
    p = _C.plan_layer(100_000, 100_000, 32, 100, False, 0, 0, 0, 0.05, 4, "ipu2", 1)
    assert not p["fits"]
    assert p["bytes_per_tile_max"] > TILE
    # 2 x 1e10 weight bytes alone need > 20e9 / (1472 * 592 KiB) = 22 IPUs of memory, but
    # a tile of 8 neurons (the fewest) holds 8 rows of 100000 inputs, W and its float
    # gradient: 8 x 100000 x (4 + 4) = 6.4e6 bytes > 624 KiB, so more IPUs cannot help;
    # nor can half weights: 8 x 100000 x (2 + 4) = 4.8e6 bytes
    assert p["ipus_needed"] > 22
    assert "more IPUs would not help" in p["reason"] and "use about" not in p["reason"]
    assert "half weights" not in p["reason"]
    assert "split the layer over" not in p["reason"]
    assert "input features would have to be split" in p["reason"]
    half = _C.plan_layer(100_000, 100_000, 32, 100, False, 0, 0, 0, 0.05, 2, "ipu2", 1)
    assert not half["fits"] and "half weights" not in half["reason"]


def test_a_tile_whose_smallest_share_does_not_fit_is_not_sent_to_more_ipus():
    """700 -> 8000, batch 256, K_out 1600: the plan already gives each tile 8 neurons,
    the fewest, and every tile holds each sample's combined output list with membranes
    and gradients (256 x (1600 x 12 + 8) = 4.9e6 bytes, MemoryEstimation.cpp's
    gradBuffers) whatever the layer is split over: more IPUs cannot help (the message said
    "use about 12 IPUs"), a smaller batch or max_spikes can."""
    p = _C.plan_layer(700, 8000, 256, 500, False, 0, 700, 1600, 0.05, 4, "ipu2", 1)
    assert not p["fits"] and p["neurons_per_tile_max"] == 8
    assert p["memory"]["grad_buffers"] >= 256 * (1600 * 12 + 8) > TILE
    reason = p["reason"]
    assert "more IPUs would not help" in reason and "use about" not in reason
    assert "max_spikes" in reason and "batch (256)" in reason
    # a tile's lists are per step: T is no remedy for them
    assert "T (500)" not in reason
    # a quarter of the batch and K_out 100: what the message says helps, helps
    assert _C.plan_layer(700, 8000, 64, 500, False, 0, 100, 100, 0.05, 4, "ipu2", 1)["fits"]


def test_a_tile_whose_rows_fit_is_told_that_tile_0s_gather_of_lists_does_not():
    """8000 -> 8000, batch 16, T 100, 100-entry lists: the message said "even 8 neurons'
    weight rows exceed a tile", but they take 500 KiB of the 592 KiB a tile has for data.
    What does not fit is tile 0's buffer for combining a sample's lists, gathered from
    all 1000 tiles; more tiles would only make it larger."""
    p = _C.plan_layer(8000, 8000, 16, 100, False, 0, 100, 100, 0.05, 4, "ipu2", 1)
    assert not p["fits"] and p["num_tiles"] == 1000 and p["neurons_per_tile_max"] == 8
    rows = 8 * 8000 * (4 + 4)  # W and its float gradient: 512000 bytes, 500 KiB
    own = (rows
           + 8 * 3 * 4 * 2                        # bias, beta, threshold and their grads
           + 16 * 8 * 4 * 6                       # [B, n] state: 3072
           + 16 * ((100 * 4 + 8) + 2 * 8 * 8 + 8)  # input list, tile's two lists: 8704
           + 16 * (100 * 12 + 8) + 16 * 2 * 8 * 12 + 16 * 100 * 4  # grad buffers: 28800
           + RESERVED)
    assert own == 585536 <= TILE  # a tile's own share, 572 KiB, fits
    # 16 neurons' rows alone would not: 16 x 8000 x 8 = 1024000 bytes
    gather = 1000 * (2 * 8 * (4 + 4) + 8)  # one sample's pieces from every tile: 133 KiB
    reduce = math.ceil(16 * 100 / 1000) * 1000 * 4  # its partial input gradients: 8000
    io = math.ceil(100 * 16 * (408 + 400 + 1200 + 8) / 1472)  # share of the op's tensors
    assert p["memory"]["combine"] == gather == 136000
    assert p["bytes_per_tile_max"] == own + gather + reduce + io == 731728 > TILE
    assert own + reduce + io <= TILE  # without the gather it would fit
    reason = p["reason"]
    assert "weight rows exceed a tile" not in reason
    assert "combines the spike lists" in reason and "all 1000 tiles" in reason
    assert "133 KiB" in reason and "572 KiB" in reason
    assert "would not shrink that gather" in reason
    assert "use about" not in reason and "split the layer over" not in reason
    # each remedy named is one that, by hand, fits these tiles: half weights save
    # 8 x 8000 x 2 bytes; capacity_out 3 (a tile then sends 2 x 3 entries, not 2 x 8),
    # not 4; 6550 inputs save 1450 x 8 x 8 bytes of rows, 6551 not quite
    assert "use half weights (weight_bytes=2)" in reason
    assert 731728 - 8 * 8000 * 2 <= TILE
    assert "max_spikes of at most 3 (capacity_out=100" in reason

    def with_k(k):
        gather_k = 1000 * (2 * k * 8 + 8)
        grad_k = 16 * (k * 12 + 8) + 16 * 2 * k * 12 + 16 * 100 * 4
        io_k = math.ceil(100 * 16 * (408 + 400 + k * 12 + 8) / 1472)
        return own - 28800 + grad_k + gather_k + reduce + io_k

    assert with_k(3) == 629919 <= TILE < with_k(4) == 646508
    four = _C.plan_layer(8000, 8000, 16, 100, False, 0, 100, 4, 0.05, 4, "ipu2", 1,
                         neurons_per_tile=8)
    assert four["bytes_per_tile_max"] == 646508
    assert "at most 6550 inputs (in_features=8000" in reason
    assert 731728 - 1450 * 64 <= TILE < 731728 - 1449 * 64
    assert "at most 2627 output neurons (out_features=8000" in reason

    def with_out(o):  # fewer tiles of 8 to gather from, the last with what is left
        tiles = math.ceil(o / 8)
        last = o - 8 * (tiles - 1)
        gather_o = (tiles - 1) * 136 + (2 * last * 8 + 8)
        return own + gather_o + math.ceil(1600 / tiles) * tiles * 4 + io

    assert with_out(2627) == 638972 <= TILE < with_out(2628) == 638988
    for fixed in (dict(weight_bytes=2), dict(capacity_out=3), dict(in_features=6550),
                  dict(out_features=2627)):
        args = dict(in_features=8000, out_features=8000, batch=16, timesteps=100,
                    recurrent=False, model=0, capacity_in=100, capacity_out=100,
                    activity=0.05, weight_bytes=4, target="ipu2", threads=1)
        assert _C.plan_layer(**{**args, **fixed})["fits"], fixed
    # a smaller batch cannot help: tile 0 combines one sample already, and the rest
    # of the batch's buffers (about 40 KiB) are less than the 90 KiB too much
    assert "a batch of at most" not in reason


def test_spike_list_advice_does_not_name_t_where_more_tiles_can_help():
    """16 -> 200000, batch 256, T 100, K_in 16, K_out 8: the IPU's tiles hold 136 neurons
    each, whose own share does not fit (more tiles would shrink it), and the largest part
    of the busiest tile is its spike lists and exchange buffers. Those are one step's
    (MemoryEstimation.cpp): shortening T does not shrink them, but the message said
    "lower max_spikes (...), the batch (256) or T (100)"."""
    args = (16, 200_000, 256, 100, False, 0, 16, 8, 0.05, 4, "ipu2", 1)
    p = _C.plan_layer(*args)
    assert not p["fits"] and p["num_tiles"] == 1471 and p["neurons_per_tile_max"] == 136
    B, n, tiles = 256, 136, 1471
    lists = {
        # the step's input list; the tile's spike and eligible lists with membranes
        "spike_buffers": B * ((16 * 4 + 8) + 2 * n * (4 + 4) + 8),               # 577536
        # the combined list with membranes and grads, the tile's slice, partial input grads
        "grad_buffers": B * (8 * 12 + 8) + B * 2 * 8 * 12 + B * 16 * 4,        # 92160
        # tile 0 gathers one sample's pieces (2 x min(8, 136) entries) from every tile
        "combine": math.ceil(B / tiles) * tiles * (2 * 8 * 8 + 8),              # 200056
        # and reduces ceil(256 x 16 / 1471) inputs' partial gradients from every tile
        "reduce": math.ceil(B * 16 / tiles) * tiles * 4,                        # 17652
    }
    assert {k: p["memory"][k] for k in lists} == lists
    state = B * n * 4 * 6 + n * 3 * 4 * 2  # 838848, the next largest part
    assert p["memory"]["state"] + p["memory"]["neuron_params"] == state < sum(lists.values())
    reason = p["reason"]
    assert "Largest share: spike lists and exchange buffers (867 KiB)" in reason
    assert "would not help" not in reason and "tile 0 also" not in reason
    assert "max_spikes (capacity_in=16, capacity_out=8)" in reason and "batch (256)" in reason
    assert "T (100)" not in reason and "shorten T" not in reason
    # twice the steps: the same lists and buffers a tile
    longer = _C.plan_layer(*args[:3], 200, *args[4:])
    assert {k: longer["memory"][k] for k in lists} == lists


def test_ipus_needed_counts_the_tiles_whose_own_share_fits():
    """4000 -> 200000, batch 2, T 10, lists of 8: 136 neurons a tile on one IPU hold
    136 x 4000 x 8 bytes of W and its gradient (4.3e6). The layer's bytes over an IPU's
    said "split the layer over about 8 IPUs", but 8 IPUs' 11776 tiles would hold 24
    neurons each (200000 / 8 = 25000 grains), whose own share is still too large: it
    takes tiles of 16, 12500 of them, 9 IPUs at least. And snn_ipu places a layer on one
    IPU, so the message says that rather than suggest a split it cannot make."""
    p = _C.plan_layer(4000, 200_000, 2, 10, False, 0, 8, 8, 0.05, 4, "ipu2", 1)
    assert not p["fits"] and p["num_tiles"] == 1471 and p["neurons_per_tile_max"] == 136

    def own(n):  # a tile's own share of n neurons (n >= 8), with the batch of 2
        return (n * 4000 * (4 + 4)               # W and its float gradient
                + n * 3 * 4 * 2                  # bias, beta, threshold and their grads
                + 2 * n * 4 * 6                  # [B, n] state
                + 2 * ((8 * 4 + 8) + 2 * n * 8 + 8)  # input list, the tile's two lists
                + 2 * (8 * 12 + 8) + 2 * 2 * 8 * 12 + 2 * 8 * 4  # grad buffers
                + RESERVED)

    assert own(16) == 547184 <= TILE < own(24) == 804016
    usable = (TILE - RESERVED) * 1472
    assert math.ceil(200_000 * 4000 * 8 / usable) == 8  # what the bytes alone said
    assert math.ceil(200_000 / 8 / (8 * 1472)) == 3  # 8 IPUs: up to 3 grains a tile
    assert p["ipus_needed"] == math.ceil(200_000 / 16 / 1472) == 9
    reason = p["reason"]
    assert "about 8" not in reason and "split the layer over" not in reason
    assert "Tiles of at most 16 neurons would hold their own share (534 KiB" in reason
    assert "12500 tiles, at least 9 IPUs" in reason
    assert "snn_ipu places a layer on one IPU" in reason
    assert "would not help" not in reason
    # half weights alone would not do: they save 2 bytes a weight, so tiles of 24 neurons
    # hold their own share, not of 32; 200000 / 24 = 8334 tiles, more than an IPU has
    assert own(24) - 24 * 4000 * 2 <= TILE < own(32) - 32 * 4000 * 2
    assert math.ceil(200_000 / 24) > 1472 and "half weights" not in reason


def test_long_sequences_blame_the_history():
    p = _C.plan_layer(64, 64, 64, 20_000, False, 0, 64, 64, 0.05, 4, "ipu2", 1)
    assert not p["fits"]
    assert "shorten T" in p["reason"]


def test_invalid_arguments():
    with pytest.raises(ValueError):
        tiny(weight_bytes=3)
    with pytest.raises(ValueError):
        tiny(model=2, recurrent=True)
    with pytest.raises(ValueError):
        tiny(target="gpu")
    with pytest.raises(ValueError):
        tiny(model=5)


def test_tile_starts_for_matches_plan_and_is_cached():
    a = tile_starts_for(300, 100, 4, 10, target="host", threads=2)
    b = tile_starts_for(300, 100, 4, 10, target="host", threads=2)
    assert a is b and not a.flags.writeable
    assert list(a) == list(_C.plan_layer(300, 100, 4, 10, False, 0, 0, 0, 0.05, 4, "host", 2)
                           ["tile_starts"])
    with pytest.raises(ValueError):
        tile_starts_for(300, 100, 4, 10, model="izhikevich")


def test_plan_from_sizes():
    r = plan([700, 256, 256, 20], batch_size=32, num_steps=100, max_spikes=30)
    assert isinstance(r, PlanReport)
    assert [x.model for x in r.layers] == ["leaky", "leaky", "readout"]
    assert [x.capacity_out for x in r.layers] == [30, 30, 0]
    assert r.layers[1].capacity_in == 30 and r.layers[2].capacity_in == 30
    assert r.layers[0].capacity_in == math.ceil(2 * 2 * 0.05 * 700)
    assert r.fits
    assert r.cycles_per_step == sum(x.cycles_per_step for x in r.layers)
    assert r.samples_per_second == pytest.approx(32 / (r.cycles_per_step / 1.33e9))
    # the ops run one after another: each layer its fastest plan, all from tile 0
    assert r.layout == "overlaid" and r.tile_offsets == [0, 0, 0]
    text = str(r)
    assert "layer0" in text and "readout" in text and "samples/s" in text and "fits" in text
    r.raise_if_not_fits()  # no error


class _FakeLayer(torch.nn.Module):
    def __init__(self, n_in, n_out, model, recurrent=False, max_spikes=None, dtype=torch.float32):
        super().__init__()
        self.in_features, self.out_features = n_in, n_out
        self.neuron_model, self.recurrent, self.max_spikes = model, recurrent, max_spikes
        self.weight = torch.nn.Parameter(torch.zeros(n_out, n_in, dtype=dtype))


def test_plan_from_module_reads_layer_attributes():
    net = torch.nn.Sequential(
        _FakeLayer(40, 24, "synaptic", recurrent=True, max_spikes=6, dtype=torch.float16),
        torch.nn.Dropout(0.1),  # no neuron_model: skipped
        _FakeLayer(24, 5, "readout"),
    )
    r = plan(net, batch_size=4, num_steps=10, max_spikes=9)
    a, b = r.layers
    assert (a.name, a.model, a.recurrent, a.capacity_out) == ("0", "synaptic", True, 6)
    assert a.details["weight_bytes"] == 2
    assert (b.name, b.model, b.capacity_in) == ("2", "readout", 6)
    with pytest.raises(ValueError):
        plan(torch.nn.Linear(3, 3), 4, 10)


@pytest.mark.parametrize("target", ["ipu2", "host"])
def test_exact_gradient_layers_are_planned_with_lists_of_every_neuron(target):
    """With exact gradients (grad_window=None, the layers' default) every neuron is
    listed at every step, so the op's list is out_features long (the IPU backend's
    own choice, backends.ipu._capacity; the emulator lists every neuron too): planned
    from the activity's guess, such a layer's bytes were those of a list a fraction of
    that. A max_spikes of the layer's own, or a window, keeps the planned capacity."""
    from snn_ipu import LIFLayer, ReadoutLayer
    from snn_ipu.backends.ipu import _capacity
    from snn_ipu.spikes import SparseSpikes

    net = torch.nn.Sequential(
        LIFLayer(700, 256), LIFLayer(256, 256, max_spikes=7),
        LIFLayer(256, 128, grad_window=0.5), LIFLayer(128, 64), ReadoutLayer(64, 10))
    r = plan(net, batch_size=64, num_steps=100, target=target, max_spikes=9)
    assert [row.capacity_out for row in r.layers[:4]] == [256, 7, 9, 64]
    # the IPU op's capacity for the exact layers, whatever its input list
    spikes = SparseSpikes.from_dense(torch.zeros(100, 64, 700))
    assert _capacity(net[0].config(), spikes, net[0].weight, False) == 256
    # planned as windowed, the first layer's list (and so its bytes) were smaller
    windowed = plan(torch.nn.Sequential(LIFLayer(700, 256, grad_window=0.5)), 64, 100,
                    target=target, max_spikes=9)
    exact = plan(torch.nn.Sequential(LIFLayer(700, 256)), 64, 100, target=target,
                 max_spikes=9)
    assert windowed.layers[0].capacity_out == 9
    assert exact.layers[0].bytes_per_tile_max > windowed.layers[0].bytes_per_tile_max


def test_plan_of_layers_learning_decays_counts_their_dense_history():
    """A layer that learns beta (or alpha) keeps U (and syn) over T on the IPU: the
    plan's history bytes are the hand-computed T x B x neurons x 4 per state (B: the
    samples of the tile's sample group)."""
    from snn_ipu import LIFLayer, SynapticLayer

    def history(layer):
        r = plan(torch.nn.Sequential(layer), batch_size=4, num_steps=10)
        row = r.layers[0]
        return (row.details["memory"]["history"],
                row.neurons_per_tile * int(row.details["samples_per_group_max"]))

    plain, _ = history(LIFLayer(40, 24))
    learned, n = history(LIFLayer(40, 24, learn_beta=True))
    assert learned - plain == 10 * n * 4
    named = plan(torch.nn.Sequential(LIFLayer(40, 24, name="hidden1")), 4, 10)
    assert named.layers[0].name == "hidden1"  # the layer's own name, as errors use it
    syn_plain, _ = history(SynapticLayer(40, 24))
    syn_learned, n = history(SynapticLayer(40, 24, learn_alpha=True))
    assert syn_learned - syn_plain == 2 * 10 * n * 4


def test_plan_sizes_must_be_integers():
    for sizes in ([700.9, 256], ["700", 256], "700", [700], [700, 0], [700, True]):
        with pytest.raises(ValueError, match="sequence of at least two positive integers"):
            plan(sizes, 4, 10)


def test_plan_arguments_are_checked_by_name():
    for kwargs in (dict(max_spikes=0), dict(input_max_spikes=2.5), dict(threads=-1),
                   dict(num_steps=2**33)):
        name = next(iter(kwargs))
        args = dict(batch_size=4, num_steps=10)
        args.update(kwargs)
        with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
            plan([40, 24, 5], **args)


def test_plan_takes_numpy_integers_and_names_a_wrong_activity():
    """numpy ints are positive integers here as in the layer sizes (a batch size read
    from an array was refused as not one); an activity that is not a number is an
    error naming it, not a TypeError from a comparison or True planned as 1.0."""
    r = plan([40, 24, 5], batch_size=np.int64(4), num_steps=np.int32(10),
             max_spikes=np.int64(3), input_max_spikes=np.int16(7), threads=np.int64(1))
    assert (r.batch_size, r.num_steps) == (4, 10) and type(r.batch_size) is int
    # the capacities asked for, not the automatic ones (2 each at 5% of 40 and 24)
    assert [(x.capacity_in, x.capacity_out) for x in r.layers] == [(7, 3), (3, 0)]
    for activity in ("0.1", True, None):
        with pytest.raises(ValueError, match="activity must be a number"):
            plan([40, 24, 5], 4, 10, activity=activity)


def test_plan_error_names_the_layer_and_the_fix():
    r = plan([100_000, 100_000, 10], batch_size=32, num_steps=100)
    assert not r.fits
    with pytest.raises(PlanError) as info:
        r.raise_if_not_fits()
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    # an 8-neuron tile of layer0 holds 8 x 100000 x 4 bytes of dL/dW (3.2e6) and each
    # sample's list of 20000 entries (auto capacity: 32 x 20000 x 12 bytes = 7.7e6)
    assert "layer0" in msg and "max_spikes" in msg and "fewer inputs" in msg
    assert "DOES NOT FIT" in str(r)


def _row(name, tiles, max_bytes, io_share):
    return LayerPlanRow(
        name=name, model="leaky", in_features=1, out_features=1, recurrent=False,
        capacity_in=1, capacity_out=1, num_tiles=tiles, neurons_per_tile=1,
        bytes_per_tile_max=max_bytes, bytes_per_tile_mean=max_bytes, bytes_budget=TILE,
        exchange_bytes_per_step=0, cycles_per_step=1000, samples_per_second=0.0, fits=True,
        reason="", details={"target_tiles": 1472, "memory": {"io_share": io_share}},
    )


def test_layers_side_by_side_share_only_their_io_tensors():
    r = PlanReport("ipu2", 4, 10, [_row("a", 1000, 400 * KIB, 10 * KIB),
                                   _row("b", 400, 300 * KIB, 20 * KIB)], 1.33e9,
                   layout="disjoint")
    assert r.disjoint and r.tile_offsets == [0, 1000]
    # a's tile holds its own 390 KiB plus both layers' io shares
    assert r.bytes_per_tile_combined == 390 * KIB + 30 * KIB
    assert r.fits and r.problems() == []


def test_layers_that_fit_alone_but_not_together():
    # overlaid, one op after the other: the larger layer's own 390 KiB and both io shares
    r = PlanReport("ipu2", 4, 10, [_row("a", 1000, 400 * KIB, 10 * KIB),
                                   _row("b", 1000, 300 * KIB, 250 * KIB)], 1.33e9)
    assert not r.disjoint and r.tile_offsets == [0, 0]
    assert r.bytes_per_tile_combined == 390 * KIB + 260 * KIB
    assert not r.fits
    assert any("together" in p for p in r.problems())
    with pytest.raises(PlanError, match="together"):
        r.raise_if_not_fits()


def test_layers_that_fit_alone_count_their_sample_groups_tiles():
    """The overlap counts each layer's tiles of all its sample groups: 16 x 64 and
    16 x 64 and 3 x 64 tiles from tile 0 are 1024 + 1024 + 192 = 2240 tiles."""
    rows = []
    for name, tiles in (("a", 16), ("b", 16), ("c", 3)):
        row = _row(name, tiles, 450 * KIB, 100 * KIB)
        rows.append(dataclasses.replace(row, sample_groups=64,
                                        details={**row.details, "tiles_used": tiles * 64}))
    r = PlanReport("ipu2", 64, 10, rows, 1.33e9)
    assert r.bytes_per_tile_combined == 350 * KIB + 300 * KIB  # > 624 KiB
    (problem,) = r.problems()
    assert "their 2240 tiles overlap on the 1472 of the IPU" in problem


def test_slow_steps_print_their_rate_not_zero():
    # 2e10 cycles at 1.33 GHz: 15.04 s per step of 4 samples, 0.266 samples/s (the
    # same line on an IPU target)
    r = PlanReport("host", 4, 10, [dataclasses.replace(_row("a", 10, 100 * KIB, KIB),
                                                       cycles_per_step=20_000_000_000)],
                   1.33e9)
    assert "15037.594 ms/step, 0.266 samples/s" in str(r)


def test_host_plan_fits_and_reports_items():
    r = plan([100, 64, 10], batch_size=8, num_steps=20, target="host", threads=2)
    assert r.fits and r.target == "host"
    assert all(x.num_tiles * x.sample_groups >= 2 for x in r.layers)
    with pytest.raises(ValueError):
        plan([100, 64, 10], batch_size=8, num_steps=20, target="tpu")
    with pytest.raises(ValueError):
        plan([100], batch_size=8, num_steps=20)


def test_report_says_how_the_layers_share_the_ipu():
    """Unplaced, the ops run one after another, each from tile 0 with its fastest plan
    (what the ipu backend builds); pipelined, each layer gets tiles of its own."""
    r = plan([700, 256, 256, 20], batch_size=64, num_steps=100)
    assert r.layout == "overlaid" and r.fits
    assert "each layer takes its fastest plan from tile 0" in str(r)
    assert r.tiles_used == max(row.tiles_used for row in r.layers)
    p = plan([700, 256, 256, 20], batch_size=64, num_steps=100, pipelined=True)
    assert p.disjoint and p.fits and p.tiles_used <= 1472
    assert "pipelined" in str(p) and "the fused time loop's" in str(p)
    # one time loop: each phase its slowest layer's, the step ops one after another
    per_layer = [row.cycles_per_step for row in p.layers]
    assert p.cycles_per_step == p.fused_cycles_per_step
    assert max(per_layer) < p.cycles_per_step < sum(per_layer)


def test_pipelined_layers_without_tiles_of_their_own_are_not_said_to_run_at_once():
    """Three 4096 -> 4096 layers that build an input gradient hold, per 8-neuron grain,
    W and dW rows of 8 x 4096 x 4 B = 128 KiB each: 16 neurons (512 KiB + the 32 KiB
    reserve + buffers) pass 624 KiB, so each needs 4096 / 8 = 512 tiles, and the three
    1536 > 1472: side by side they cannot be, the fused time loop cannot run them."""
    r = plan([4096] * 5 + [10], batch_size=4, num_steps=50, pipelined=True)
    assert [row.num_tiles for row in r.layers[1:4]] == [512] * 3
    assert r.fits and not r.disjoint
    assert r.cycles_per_step == sum(row.cycles_per_step for row in r.layers)
    text = str(r)
    assert "run at once in one program" not in text
    assert "do not fit on tiles of their own" in text


def test_a_layer_whose_input_needs_no_grad_is_costed_without_an_input_gradient():
    """N-MNIST's first layer (2312 -> 1466, 62 x 24 neurons, 16 groups of 3 samples):
    without input_needs_grad its backward has no input gradient, no reduction of the
    62 tiles' partials (their compute sets, syncs, gather and gradIn[t] operations) and
    no [T, B, K_in] gradient in memory; its forward is the same."""
    args = dict(in_features=2312, out_features=1466, batch=48, timesteps=100,
                capacity_in=32, capacity_out=14, neurons_per_tile=24, sample_groups=16)
    needs = _C.plan_layer(**args)
    data = _C.plan_layer(**args, input_needs_grad=False)
    assert needs["input_needs_grad"] and not data["input_needs_grad"]
    c, d = needs["cycles"], data["cycles"]
    assert c["input_grad"] > 0 and c["partial_reduce"] > 0
    assert d["input_grad"] == 0 and d["partial_reduce"] == 0
    # two compute sets (input gradient, its reduction) and their syncs fewer
    assert c["sync_backward"] - d["sync_backward"] == 2 * needs["sync_cycles"]
    # the gather of 61 other tiles' partials (one sample per combining tile, 32 floats
    # each: 7,808 bytes at 4 a cycle, plus the phase's sync and overhead)
    phase = needs["sync_cycles"] + needs["exchange_overhead_cycles"]
    assert c["exchange_backward"] - d["exchange_backward"] == phase + 61 * 32 * 4 // 4
    assert d["step_ops_backward"] < c["step_ops_backward"]
    for key in ("spike_matmul", "state_update", "list_combine", "exchange_forward",
                "weight_grad", "state_grad"):
        assert c[key] == d[key], key
    assert data["cycles_forward_timestep"] == needs["cycles_forward_timestep"]
    # the tile's partials (3 samples x 32 floats) and its share of the reduction
    assert needs["bytes_per_tile_max"] - data["bytes_per_tile_max"] >= 2 * 3 * 32 * 4


def test_plan_gives_only_the_first_layer_no_input_gradient():
    """The network's data feeds the first layer only: plan() costs it without an input
    gradient, the layers after it with one, in both layouts."""
    for pipelined in (False, True):
        report = plan([40, 24, 16, 4], 4, 5, pipelined=pipelined)
        flags = [row.details["input_needs_grad"] for row in report.layers]
        assert flags == [False, True, True], pipelined
        assert report.layers[0].details["cycles"]["input_grad"] == 0
        assert report.layers[1].details["cycles"]["input_grad"] > 0


def test_host_network_whose_layers_fit_alone_but_not_together_does_not_fit():
    """A training step keeps every layer's forward lists until its backward pass, so on
    the host the layers' kept bytes add up: four 64-neuron layers whose lists over T
    each take about a quarter of the host budget fit alone and not together.

    By hand, from ioBytes (MemoryEstimation.cpp), K_in = K_out = 64, per step and sample:
    the first layer (no input gradient) 64*4 + 8 + 64*12 + 8 = 1040 bytes, the two
    hidden ones 1040 + 64*4 = 1296, the readout 64*4 + 8 + 64*4 + 2*64*4 = 1032, plus its
    membrane history 64*4 = 256: 4920 in all. The budget is half of physical RAM
    (Target.cpp), read here from the machine, so the test holds on any machine."""
    import os

    budget = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    batch, per_step = 64, 4920
    steps = math.ceil(1.25 * budget / (batch * per_step))  # the lists alone: 1.25 budgets
    sizes = [64, 64, 64, 64, 64]
    r = plan(sizes, batch, steps, target="host", max_spikes=64, input_max_spikes=64, threads=2)
    assert r.layers[0].details["host_memory_budget"] == budget
    assert all(x.fits for x in r.layers)  # each about a third of the budget at most
    assert not r.fits
    assert r.host_bytes_total >= steps * batch * per_step > budget
    (problem,) = r.problems()
    assert "together" in problem and "batch" in problem and "num_steps" in problem
    assert "max_spikes" in problem
    with pytest.raises(PlanError, match="together"):
        r.raise_if_not_fits()
    assert "DOES NOT FIT" in str(r)
    # half the steps: the lists take 0.63 budgets, the rest is small; it fits
    half = plan(sizes, batch, steps // 2, target="host", max_spikes=64, input_max_spikes=64,
                threads=2)
    assert half.fits and half.problems() == []
    assert steps // 2 * batch * per_step <= half.host_bytes_total <= budget


@pytest.mark.parametrize("readout", ["membrane", "spikes"])
def test_the_cli_networks_plan_has_the_lists_of_the_model_it_builds(readout):
    """`snn-ipu plan` plans training.model_shapes, the layers of build_model without
    their weights: its capacities are those the same plan gives the model built."""
    from snn_ipu.training import TrainConfig, build_model, model_shapes

    for window in (None, 0.5):
        config = TrainConfig(hidden=[48, 32], grad_window=window, readout=readout)
        shapes = plan(model_shapes(config, 20, 5), 8, 10)
        built = plan(build_model(config, 20, 5), 8, 10)
        assert [r.capacity_out for r in shapes.layers] == \
            [r.capacity_out for r in built.layers]
        assert (shapes.layers[0].capacity_out == 48) == (window is None)


def test_plans_refuse_weights_the_ops_do_not_take():
    """A bfloat16 model was planned (and its graph reported) as a float16 one."""
    net = torch.nn.Sequential(LIFLayer(64, 32, max_spikes=8), ReadoutLayer(32, 4))
    for dtype in (torch.bfloat16, torch.float64):
        with pytest.raises(ValueError, match=f"{dtype} weights.*float32 or float16"):
            plan(net.to(dtype), 16, 20)
    assert plan(net.half(), 16, 20).layers[0].in_features == 64
