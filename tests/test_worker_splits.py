"""The IPU graph's worker splits (codelets/: SpikeMatmulParts, SpikeListCombineParts,
WeightGradRows, InputSpikeGradRange, PartialReduceRange) against the vertices they
split, which the emulator runs: on the host graph, the same inputs, and the same
results bit for bit (each element adds its terms in the same order), for splits
that leave workers with several items, one, or none."""

import numpy as np
import pytest

from snn_ipu import _graph as g

WORKERS = 6  # the host graph's ipu2 target (SNN_HOST_NUM_WORKERS)


def tensor(graph, dtype, shape, name):
    t = graph.add_variable(dtype, list(shape), name)
    graph.set_tile_mapping(t, 0)
    return t


class Harness:
    """A graph on tile 0: named host-written inputs, compute sets run in order."""

    def __init__(self):
        self.graph, self.seq, self.inputs, self.outputs = g.Graph(), g.Sequence(), [], []

    def input(self, name, array):
        dtype = {np.float32: "float", np.int32: "int", np.uint32: "unsigned int"}[array.dtype.type]
        t = tensor(self.graph, dtype, array.shape, name)
        self.graph.create_host_write(name, t)
        self.inputs.append((name, array))
        return t

    def output(self, name, dtype, shape):
        t = tensor(self.graph, dtype, shape, name)
        self.graph.create_host_read(name, t)
        self.outputs.append(name)
        return t

    def vertex(self, type_, connections, **values):
        cs = self.graph.add_compute_set(type_)
        v = self.graph.add_vertex(cs, type_, connections)
        for field, value in values.items():
            self.graph.set_initial_value(v, field, value)
        self.graph.set_tile_mapping(v, 0)
        self.seq.add(g.Execute(cs))
        return cs

    def add_to(self, cs, type_, connections, **values):
        v = self.graph.add_vertex(cs, type_, connections)
        for field, value in values.items():
            self.graph.set_initial_value(v, field, value)
        self.graph.set_tile_mapping(v, 0)

    def run(self):
        engine = g.Engine(self.graph, self.seq, True)
        for name, array in self.inputs:
            engine.write(name, array)
        engine.run()
        return {name: engine.read(name) for name in self.outputs}


def lists(rng, samples, stride, rows, counts):
    """[samples, stride] lists of distinct ids below rows, sample b's first counts[b]."""
    ids = np.zeros((samples, stride), np.int32)
    for b, n in enumerate(counts):
        ids[b, :n] = rng.choice(rows, n, replace=False)
    return ids


@pytest.mark.parametrize("samples,row_length,accumulate", [(1, 24, 0), (2, 32, 1), (3, 24, 0),
                                                            (7, 16, 1), (3, 8, 1)])
def test_spike_matmul_parts_adds_as_spike_matmul(samples, row_length, accumulate):
    rng = np.random.default_rng(samples + row_length)
    rows, K = 40, 12
    counts = rng.integers(0, K + 1, samples)
    counts[0] = K
    ids = lists(rng, samples, K, rows, counts)
    w = rng.standard_normal((rows, row_length)).astype(np.float32)
    start = rng.standard_normal((samples, row_length)).astype(np.float32)
    h = Harness()
    ids_t, w_t = h.input("ids", ids), h.input("w", w.ravel())
    cnt = h.input("counts", np.stack([counts, counts + 1], 1).astype(np.uint32))
    parts_cur = h.input("cur", start.ravel())
    ref = [h.input(f"ref{b}", start[b]) for b in range(samples)]
    h.vertex("SpikeMatmulParts<float>",
             {"ids": ids_t.flatten(), "counts": cnt.flatten(), "weights": w_t,
              "currents": parts_cur},
             rowLength=row_length, idStride=K, countStride=2,
             parts=max(1, min(row_length // 8, WORKERS // samples)), accumulate=accumulate)
    cs = h.graph.add_compute_set("reference")
    for b in range(samples):
        h.add_to(cs, "SpikeMatmul<float>", {"ids": ids_t[b], "ends": cnt[b].slice(0, 1),
                                            "weights": w_t, "currents": ref[b]},
                 rowLength=row_length, accumulate=accumulate)
    h.seq.add(g.Execute(cs))
    for b in range(samples):
        h.graph.create_host_read(f"out{b}", ref[b])
        h.outputs.append(f"out{b}")
    h.graph.create_host_read("parts", parts_cur)
    h.outputs.append("parts")
    out = h.run()
    want = np.stack([out[f"out{b}"] for b in range(samples)])
    np.testing.assert_array_equal(out["parts"].reshape(samples, row_length), want)
    # and it is the sum it should be
    expect = (start if accumulate else 0) + np.stack(
        [w[ids[b, :counts[b]]].sum(0) for b in range(samples)])
    np.testing.assert_allclose(want, expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("samples,rows,bias", [(1, 40, True), (3, 40, True), (4, 5, False)])
def test_weight_grad_rows_adds_as_weight_grad_scatter_sample_by_sample(samples, rows, bias):
    rng = np.random.default_rng(rows + samples)
    row_length, K = 16, min(rows, 10)
    counts = rng.integers(0, K + 1, samples)
    ids = lists(rng, samples, K, rows, counts)
    grad = rng.standard_normal((samples, row_length)).astype(np.float32)
    start = rng.standard_normal(rows * row_length).astype(np.float32)
    h = Harness()
    ids_t, g_t = h.input("ids", ids), h.input("g", grad)
    cnt = h.input("counts", np.stack([counts, counts], 1).astype(np.uint32))
    rows_w, scatter_w = h.input("w1", start), h.input("w2", start.copy())
    b0 = rng.standard_normal(row_length).astype(np.float32)
    rows_b = h.input("b1", b0) if bias else tensor(h.graph, "float", (0,), "nob1")
    scatter_b = h.input("b2", b0.copy()) if bias else tensor(h.graph, "float", (0,), "nob2")
    h.vertex("WeightGradRows", {"ids": ids_t.flatten(), "counts": cnt.flatten(),
                                "currentGrad": g_t.flatten(), "weightGrad": rows_w,
                                "biasGrad": rows_b},
             rowLength=row_length, idStride=K, countStride=2)
    for b in range(samples):  # the old graph: a compute set per sample
        h.vertex("WeightGradScatter", {"ids": ids_t[b], "numIds": cnt[b][0],
                                       "currentGrad": g_t[b], "weightGrad": scatter_w,
                                       "biasGrad": scatter_b}, rowLength=row_length)
    for name, t in (("rw", rows_w), ("sw", scatter_w)) + (
            (("rb", rows_b), ("sb", scatter_b)) if bias else ()):
        h.graph.create_host_read(name, t)
        h.outputs.append(name)
    out = h.run()
    np.testing.assert_array_equal(out["rw"], out["sw"])
    expect = start.reshape(rows, row_length).copy()
    for b in range(samples):
        expect[ids[b, :counts[b]]] += grad[b]
    np.testing.assert_allclose(out["rw"].reshape(rows, row_length), expect, rtol=1e-6, atol=1e-6)
    if bias:
        np.testing.assert_array_equal(out["rb"], out["sb"])
        np.testing.assert_allclose(out["rb"], b0 + grad.sum(0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("listed", [0, 2, 7, 14])
def test_input_grad_and_reduce_ranges_as_the_whole_list(listed):
    """InputSpikeGradRange over ranges = InputSpikeGrad; PartialReduceRange over ranges
    of gathered partials = PartialReduce, for a list of `listed` of 14 entries."""
    rng = np.random.default_rng(listed)
    rows, row_length, K, P = 30, 16, 14, 5
    ids = lists(rng, 1, K, rows, [listed])[0]
    w = rng.standard_normal((rows, row_length)).astype(np.float32)
    grad = rng.standard_normal(row_length).astype(np.float32)
    partials = rng.standard_normal((P, K)).astype(np.float32)
    h = Harness()
    ids_t, w_t, g_t = h.input("ids", ids), h.input("w", w.ravel()), h.input("g", grad)
    n = h.input("n", np.array([listed], np.uint32))
    whole = h.output("whole", "float", (K,))
    ranged = h.output("ranged", "float", (K,))
    h.vertex("InputSpikeGrad<float>", {"ids": ids_t, "numIds": n[0], "weights": w_t,
                                       "currentGrad": g_t, "partials": whole},
             rowLength=row_length)
    cs = h.graph.add_compute_set("ranges")
    for first in range(0, K, 3):
        size = min(3, K - first)
        h.add_to(cs, "InputSpikeGradRange<float>",
                 {"ids": ids_t.slice(first, first + size), "numIds": n[0], "weights": w_t,
                  "currentGrad": g_t, "partials": ranged.slice(first, first + size)},
                 rowLength=row_length, first=first)
    h.seq.add(g.Execute(cs))
    # the reduction: the whole list, and range by range with the partials gathered so
    p_t = h.input("p", partials.ravel())
    gathered = h.input("pg", np.concatenate([partials[:, f:f + 3].ravel()
                                             for f in range(0, K, 3)]))
    zero = np.zeros(K, np.float32)
    out_whole, out_ranged = h.input("ow", zero), h.input("or", zero.copy())
    h.vertex("PartialReduce", {"partials": p_t, "out": out_whole, "numOut": n[0]},
             numPartials=P, stride=K)
    cs = h.graph.add_compute_set("reduceRanges")
    at = 0
    for first in range(0, K, 3):
        size = min(3, K - first)
        h.add_to(cs, "PartialReduceRange",
                 {"partials": gathered.slice(at, at + P * size),
                  "out": out_ranged.slice(first, first + size), "numOut": n[0]},
                 first=first, numPartials=P, stride=size)
        at += P * size
    h.seq.add(g.Execute(cs))
    for name, t in (("ow", out_whole), ("or", out_ranged)):
        h.graph.create_host_read(name + "_", t)
        h.outputs.append(name + "_")
    out = h.run()
    np.testing.assert_array_equal(out["ranged"][:listed], out["whole"][:listed])
    np.testing.assert_allclose(out["whole"][:listed], w[ids[:listed]] @ grad, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(out["or_"], out["ow_"])
    np.testing.assert_array_equal(out["ow_"][listed:], 0)


@pytest.mark.parametrize("tiles,capacity,seed", [(9, 6, 0), (14, 20, 1), (3, 4, 2), (6, 6, 3)])
def test_spike_list_combine_parts_lists_as_spike_list_combine(tiles, capacity, seed):
    """The tiles' spike and eligible lists (some over the capacity, some empty) merged:
    the same list, zero-filled tail and counts."""
    rng = np.random.default_rng(seed)
    local = 5
    spikes = rng.integers(0, local + 1, tiles).astype(np.uint32)
    eligible = rng.integers(0, local + 1, tiles).astype(np.uint32)
    h = Harness()
    sid = [h.input(f"si{i}", rng.integers(0, 99, local).astype(np.int32)) for i in range(tiles)]
    sme = [h.input(f"sm{i}", rng.standard_normal(local).astype(np.float32)) for i in range(tiles)]
    eid = [h.input(f"ei{i}", rng.integers(0, 99, local).astype(np.int32)) for i in range(tiles)]
    eme = [h.input(f"em{i}", rng.standard_normal(local).astype(np.float32)) for i in range(tiles)]
    counts = h.input("c", np.stack([spikes, eligible], 1).ravel())
    results = {}
    for kind in ("SpikeListCombine", "SpikeListCombineParts"):
        ids = h.output(kind + "ids", "int", (capacity,))
        mem = h.output(kind + "mem", "float", (capacity,))
        cnt = h.output(kind + "counts", "unsigned int", (4,))
        h.vertex(kind, {"spikeIds": sid, "spikeMembrane": sme, "eligibleIds": eid,
                        "eligibleMembrane": eme, "tileCounts": counts, "ids": ids,
                        "membrane": mem, "counts": cnt})
        results[kind] = (ids, mem)
    out = h.run()
    a, b = "SpikeListCombine", "SpikeListCombineParts"
    np.testing.assert_array_equal(out[a + "counts"], out[b + "counts"])
    np.testing.assert_array_equal(out[a + "ids"], out[b + "ids"])
    listed = int(out[a + "counts"][1])
    np.testing.assert_array_equal(out[a + "mem"][:listed], out[b + "mem"][:listed])
    assert list(out[a + "counts"]) == [min(spikes.sum(), capacity),
                                       min(spikes.sum() + eligible.sum(), capacity),
                                       spikes.sum(), spikes.sum() + eligible.sum()]
