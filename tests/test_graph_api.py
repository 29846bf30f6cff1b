"""The host implementation of the Poplar graph API (snn_ipu._graph), on graphs
built by hand: tensor views against numpy, tile mappings, vertex kinds, and
each check the device would make firing on a graph built wrong on purpose.
"""

import numpy as np
import pytest

from snn_ipu import _graph as g

PoplarError = g.PoplarError


def run(graph, prog, inputs=(), outputs=(), check_output_reads=True):
    """Writes inputs {handle: array}, runs, returns {handle: array} of outputs."""
    engine = g.Engine(graph, prog, check_output_reads)
    for handle, array in inputs:
        engine.write(handle, array)
    engine.run()
    return {h: engine.read(h) for h in outputs}


def mapped(graph, dtype, shape, tile=0, name="x"):
    t = graph.add_variable(dtype, list(shape), name)
    graph.set_tile_mapping(t, tile)
    return t


# ---------------------------------------------------------------- views and copies

def view_cases():
    """(numpy function, tensor function) pairs on a [3, 4, 5] tensor."""
    return [
        (lambda a: a[1], lambda t: t[1]),
        (lambda a: a[:, 1:3], lambda t: t.slice(1, 3, 1)),
        (lambda a: a[:, :, 2:5], lambda t: t.slice(2, 5, 2)),
        (lambda a: a.transpose(2, 0, 1), lambda t: t.dim_shuffle([2, 0, 1])),
        (lambda a: a.reshape(12, 5).T, lambda t: t.reshape([12, 5]).transpose()),
        (lambda a: np.concatenate([a[:, 1:2], a[:, 3:4]], 1),
         lambda t: g.concat([t.slice(1, 2, 1), t.slice(3, 4, 1)], 1)),
        (lambda a: np.concatenate([a[0], a[2]], 0), lambda t: g.concat([t[0], t[2]], 0)),
        (lambda a: np.tile(a[:, :, :1], (1, 1, 3)), lambda t: t.slice(0, 1, 2).broadcast(3, 2)),
        (lambda a: np.tile(a[0], (2, 1)), lambda t: t[0].broadcast(2, 0)),
        (lambda a: a[1, 2].reshape(1, 5)[None], lambda t: t[1][2].expand([0, 0])),
        (lambda a: a[:, 1:2].reshape(3, 5), lambda t: t.slice(1, 2, 1).squeeze([1])),
        (lambda a: a.transpose(1, 0, 2)[1].T, lambda t: t.dim_shuffle([1, 0, 2])[1].transpose()),
    ]


@pytest.mark.parametrize("case", range(len(view_cases())))
def test_views_copy_what_numpy_selects(case):
    np_view, view = view_cases()[case]
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    graph = g.Graph()
    src = mapped(graph, "float", a.shape)
    v = view(src)
    dst = mapped(graph, "float", v.shape, name="dst")
    graph.create_host_write("a", src)
    graph.create_host_read("b", dst)
    seq = g.Sequence()
    seq.add(g.Copy(v, dst))
    out = run(graph, seq, [("a", a)], ["b"])["b"]
    np.testing.assert_array_equal(out, np_view(a))


def test_transposed_views_stay_compact():
    """A [700, 256] transpose is 256 strided regions, not one per element."""
    graph = g.Graph()
    w = mapped(graph, "float", (700, 256))
    assert w.transpose().num_regions() == 256
    assert w[3].broadcast(1000, 0).num_regions() == 1


def test_reinterpret_keeps_the_bytes():
    graph = g.Graph()
    src = mapped(graph, "int", (4,))
    dst = mapped(graph, "unsigned int", (4,), name="dst")
    graph.create_host_write("a", src)
    graph.create_host_read("b", dst)
    seq = g.Sequence()
    seq.add(g.Copy(src.reinterpret("unsigned int"), dst))
    out = run(graph, seq, [("a", np.array([-1, 0, 1, 7], np.int32))], ["b"])["b"]
    np.testing.assert_array_equal(out, np.array([2**32 - 1, 0, 1, 7], np.uint32))


def test_linear_mapping_spreads_whole_grains():
    graph = g.Graph()
    t = graph.add_variable("float", [100000], "x")
    graph.map_linearly(t)
    mapping = graph.tile_mapping(t)
    sizes = [sum(e - b for b, e in tile) for tile in mapping]
    assert sum(sizes) == 100000 and max(sizes) == 68  # ceil(100000 / 1472) rounded to 2
    assert all(b % 2 == 0 for tile in mapping for b, _ in tile)
    small = graph.add_variable("float", [40], "y")
    graph.map_linearly(small)
    assert [sum(e - b for b, e in tile) for tile in graph.tile_mapping(small)][:2] == [32, 8]


# ---------------------------------------------------------------- vertices

def test_multivertex_runs_every_worker():
    graph = g.Graph()
    out = mapped(graph, "unsigned int", (9,))
    cs = graph.add_compute_set("workers")
    v = graph.add_vertex(cs, "TestWorkerIds", {"out": out})
    graph.set_tile_mapping(v, 0)
    graph.create_host_read("out", out)
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    np.testing.assert_array_equal(run(graph, seq, outputs=["out"])["out"],
                                  [1, 2, 3, 4, 5, 6, 0, 0, 0])


def test_aligned_fields_get_aligned_memory():
    """A field declared 8-byte aligned, connected one float into a variable: the host
    stages it (as Poplar would rearrange it) and the result still lands in place."""
    graph = g.Graph()
    src = mapped(graph, "float", (9,))
    dst = mapped(graph, "float", (9,), name="dst")
    flag = mapped(graph, "unsigned int", (1,), name="flag")
    cs = graph.add_compute_set("aligned")
    v = graph.add_vertex(cs, "TestAligned",
                         {"in": src.slice(1, 9), "out": dst.slice(1, 9), "aligned": flag})
    graph.set_tile_mapping(v, 0)
    graph.create_host_write("src", src)
    graph.create_host_read("dst", dst)
    graph.create_host_read("flag", flag)
    seq = g.Sequence()
    graph.zero(dst, seq)
    seq.add(g.Execute(cs))
    out = run(graph, seq, [("src", np.arange(9, dtype=np.float32))], ["dst", "flag"])
    np.testing.assert_array_equal(out["dst"], [0] + [2.0 * i for i in range(1, 9)])
    assert out["flag"][0] == 1


def test_registry_holds_every_codelet():
    names = {c["name"] for c in g.vertex_classes()}
    for codelet in ("SpikeMatmul<float>", "SpikeMatmul<half>", "LifUpdate", "SynapticUpdate",
                    "ReadoutUpdate", "SpikeListCombine", "TileListSlice", "LifStateGrad",
                    "SynapticStateGrad", "ReadoutStateGrad", "WeightGradScatter",
                    "InputSpikeGrad<float>", "InputSpikeGrad<half>", "PartialReduce",
                    "SpikeBitsPack", "SpikeBitsToList"):
        assert codelet in names


# ---------------------------------------------------------------- the checks

def matmul_graph(currents_tile=0, rows=3, row_length=8, currents_size=8):
    """A SpikeMatmul vertex on tile 0 and its tensors (currents on currents_tile)."""
    graph = g.Graph()
    ids = mapped(graph, "int", (2,), name="ids")
    ends = mapped(graph, "unsigned int", (1,), name="ends")
    weights = mapped(graph, "float", (rows * row_length,), name="weights")
    currents = mapped(graph, "float", (currents_size,), currents_tile, name="currents")
    cs = graph.add_compute_set("mm")
    v = graph.add_vertex(cs, "SpikeMatmul<float>",
                         {"ids": ids, "ends": ends, "weights": weights, "currents": currents})
    graph.set_initial_value(v, "rowLength", row_length)
    graph.set_initial_value(v, "accumulate", 0)
    graph.set_tile_mapping(v, 0)
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    return graph, seq, v, (ids, ends, weights, currents)


def test_a_correct_matmul_runs():
    graph, seq, _, (ids, ends, weights, currents) = matmul_graph()
    for name, t in (("ids", ids), ("ends", ends), ("w", weights)):
        graph.create_host_write(name, t)
    graph.create_host_read("cur", currents)
    w = np.arange(24, dtype=np.float32)
    out = run(graph, seq, [("ids", np.array([0, 2], np.int32)), ("ends", np.array([2], np.uint32)),
                           ("w", w)], ["cur"])["cur"]
    np.testing.assert_array_equal(out, w[0:8] + w[16:24])


def test_unmapped_variable():
    graph = g.Graph()
    a = graph.add_variable("float", [4], "never/mapped")
    b = mapped(graph, "float", (4,))
    seq = g.Sequence()
    seq.add(g.Copy(a, b))
    with pytest.raises(PoplarError, match="'never/mapped'.*never mapped to a tile"):
        g.Engine(graph, seq)


def test_vertex_never_mapped():
    graph = g.Graph()
    out = mapped(graph, "unsigned int", (6,))
    cs = graph.add_compute_set("cs")
    graph.add_vertex(cs, "TestWorkerIds", {"out": out})
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    with pytest.raises(PoplarError, match="TestWorkerIds.*never mapped to a tile"):
        g.Engine(graph, seq)


def test_field_never_connected():
    graph = g.Graph()
    cs = graph.add_compute_set("cs")
    v = graph.add_vertex(cs, "SpikeMatmul<float>", {"ids": mapped(graph, "int", (2,))})
    graph.set_tile_mapping(v, 0)
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    with pytest.raises(PoplarError, match="SpikeMatmul<float>.*field 'ends' is never connected"):
        g.Engine(graph, seq)


def test_state_field_never_set():
    graph = g.Graph()
    cs = graph.add_compute_set("cs")
    v = graph.add_vertex(cs, "SpikeMatmul<float>", {
        "ids": mapped(graph, "int", (2,)), "ends": mapped(graph, "unsigned int", (1,)),
        "weights": mapped(graph, "float", (8,)), "currents": mapped(graph, "float", (8,))})
    graph.set_initial_value(v, "accumulate", 0)
    graph.set_tile_mapping(v, 0)
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    with pytest.raises(PoplarError, match="field 'rowLength' is never given a value"):
        g.Engine(graph, seq)


def test_field_of_the_wrong_type():
    graph = g.Graph()
    cs = graph.add_compute_set("cs")
    with pytest.raises(PoplarError, match="field 'ids'.*Input of int.*of type float"):
        graph.add_vertex(cs, "SpikeMatmul<float>", {"ids": mapped(graph, "float", (2,))})


def test_scalar_field_of_the_wrong_size():
    graph = g.Graph()
    cs = graph.add_compute_set("cs")
    with pytest.raises(PoplarError, match="'numIds' is a scalar.*connected to 2 elements"):
        graph.add_vertex(cs, "WeightGradScatter", {"numIds": mapped(graph, "unsigned int", (2,))})


def test_vector_field_too_small_for_the_vertex():
    """SpikeMatmul writes rowLength currents per sample: fewer is refused."""
    graph, seq, _, _ = matmul_graph(currents_size=6)
    with pytest.raises(PoplarError, match="currents holds 6 elements, fewer than samples x "
                                          "rowLength \\(8\\)"):
        g.Engine(graph, seq)
    graph, seq, _, _ = matmul_graph(rows=3, row_length=8)
    g.Engine(graph, seq)


def test_vertex_reading_another_tile():
    graph, seq, _, _ = matmul_graph(currents_tile=5)
    with pytest.raises(PoplarError, match="field 'currents' writes 'currents'.*tile 5: "
                                          "exchange must be an explicit Copy onto tile 0"):
        g.Engine(graph, seq)


def test_output_read_before_written():
    graph = g.Graph()
    a = mapped(graph, "float", (4,))
    out = mapped(graph, "float", (4,), name="out")
    cs = graph.add_compute_set("cs")
    v = graph.add_vertex(cs, "TestReadsItsOutput", {"in": a, "out": out})
    graph.set_tile_mapping(v, 0)
    graph.create_host_write("a", a)
    seq = g.Sequence()
    graph.zero(out, seq)
    seq.add(g.Execute(cs))
    with pytest.raises(PoplarError, match="TestReadsItsOutput.*read its Output field 'out' "
                                          "before writing it"):
        run(graph, seq, [("a", np.ones(4, np.float32))])
    # the check can be turned off, and then the vertex runs
    run(graph, seq, [("a", np.ones(4, np.float32))], check_output_reads=False)


def test_two_vertices_writing_one_element():
    graph = g.Graph()
    out = mapped(graph, "unsigned int", (10,))
    cs = graph.add_compute_set("cs")
    for part in (out.slice(0, 6), out.slice(5, 10)):
        v = graph.add_vertex(cs, "TestWorkerIds", {"out": part})
        graph.set_tile_mapping(v, 0)
    seq = g.Sequence()
    seq.add(g.Execute(cs))
    with pytest.raises(PoplarError, match=r"writes 'x'\[5:6\], which vertex .* also writes"):
        g.Engine(graph, seq)


def test_tile_over_its_memory():
    graph = g.Graph()
    big = mapped(graph, "float", (150 * 1024,), tile=7, name="big")  # 600 KiB + code
    other = mapped(graph, "float", (150 * 1024,), tile=8, name="other")
    seq = g.Sequence()
    seq.add(g.Copy(big, other))
    with pytest.raises(PoplarError, match="tile 7 needs 632.0 KiB.*624.0 KiB.*'big' 600.0 KiB"):
        g.Engine(graph, seq)


def test_copy_onto_itself_twice():
    graph = g.Graph()
    a = mapped(graph, "float", (4,))
    b = mapped(graph, "float", (2,), name="b")
    seq = g.Sequence()
    seq.add(g.Copy(a, g.concat([b, b])))
    with pytest.raises(PoplarError, match="writes 'b'.* more than once"):
        g.Engine(graph, seq)
