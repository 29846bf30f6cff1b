"""The custom ops' signature tables (popops_ext/poplar/OpSignatures.hpp), from which
CustomOps.cpp builds what PopART sees, against PopART 3.x's autodiff rules and against
the calls snn_ipu/backends/ipu.py makes.

PopART's rules (willow/src at sdk/poplar/3.4.0): every input of an op on the path to
the loss is on it too, and so is its producer (graphfromlosstolossupdater.cpp); a
tensor waits for one gradient per consuming op on that path and, where a consumer's
grad ops produce none, its expected count drops, at zero it fails
(transforms/autodiff/gradgrower.cpp, tensorgradregistry.cpp); a failed output fails its
producer's gradient as a whole (opgradregistry.cpp), and a weight left without a
gradient is skipped without a word (ir.cpp: "If there is no weight gradient, we assume
that the gradient has been forced to zero"). Every input of these ops can be another
op's output (the list of the layer before, the casts and clamps of the parameters), so
every input needs a grad output, integer ones included (zeros of their dtype).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from poptorch_standin import install

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer

ROOT = Path(__file__).resolve().parent.parent
# The calls here run outside an OverflowCounts (tests/test_ipu_overflow.py has them inside).
pytestmark = pytest.mark.filterwarnings("ignore:.*the host learns of it only through")

HEADER = ROOT / "popops_ext" / "poplar" / "OpSignatures.hpp"

DUMP = r"""
#include "OpSignatures.hpp"
#include <cstdio>
using namespace snn::ops;
static const char *type(DType t) {
  return t == DType::Int32 ? "int32" : t == DType::Float ? "float" : "float_or_half";
}
static const char *source(GradSource s) {
  return s == GradSource::GradOut ? "grad_out" : s == GradSource::In ? "in" : "out";
}
int main() {
  std::printf("{\"domain\": \"%s\", \"version\": %d, \"attributes\": [", kDomain, kDomainVersion);
  for (int i = 0; i < kNumAttributes; ++i)
    std::printf("%s[\"%s\", \"%s\", %.17g]", i ? ", " : "", kAttributes[i].name,
                kAttributes[i].kind == AttributeKind::Int ? "int" : "float",
                kAttributes[i].defaultValue);
  std::printf("], \"ops\": [");
  bool firstOp = true;
  for (const OpSignature *op : kAllOps) {
    std::printf("%s{\"name\": \"%s\", \"grad\": \"%s\", \"inputs\": [", firstOp ? "" : ", ",
                op->name, op->gradName);
    firstOp = false;
    for (int i = 0; i < op->numInputs; ++i)
      std::printf("%s[\"%s\", \"%s\"]", i ? ", " : "", op->inputs[i].name,
                  type(op->inputs[i].type));
    std::printf("], \"outputs\": [");
    for (int i = 0; i < op->numOutputs; ++i)
      std::printf("%s[\"%s\", \"%s\"]", i ? ", " : "", op->outputs[i].name,
                  type(op->outputs[i].type));
    std::printf("], \"grad_inputs\": [");
    for (int i = 0; i < op->numGradInputs; ++i)
      std::printf("%s[\"%s\", %d]", i ? ", " : "", source(op->gradInputs[i].source),
                  op->gradInputs[i].index);
    std::printf("], \"optional_grad_inputs\": [");
    bool first = true;
    for (int i = 0; i < op->numGradInputs; ++i)
      if (gradInputIsOptional(op->gradInputs[i])) {
        std::printf("%s%d", first ? "" : ", ", i);
        first = false;
      }
    std::printf("], \"grad_outputs\": [");
    for (int i = 0; i < op->numGradOutputs; ++i)
      std::printf("%s%d", i ? ", " : "", op->gradOutputs[i]);
    std::printf("]}");
  }
  std::printf("]}\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("signatures")
    (tmp / "dump.cpp").write_text(DUMP)
    exe = tmp / "dump"
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I",
                    str(HEADER.parent), str(tmp / "dump.cpp"), "-o", str(exe)], check=True)
    data = json.loads(subprocess.run([str(exe)], capture_output=True, text=True,
                                     check=True).stdout)
    return {"": data, **{op["name"]: op for op in data["ops"]}}


OPS = ["SnnSpikingLayer", "SnnReadoutLayer"]


@pytest.mark.parametrize("name", OPS)
def test_every_forward_input_gets_a_gradient(table, name):
    """PopART's rule above: an input whose gradient no grad op produces fails the
    producer's whole gradient. (The definitions before this table gave none for the
    input list's ids and counts: in LIFLayer -> ReadoutLayer only the readout learned.)"""
    op = table[name]
    produced = sorted(op["grad_outputs"])
    missing = [op["inputs"][i][0] for i in range(len(op["inputs"])) if i not in produced]
    assert not missing, f"{name}Grad produces no gradient for {missing}"
    assert produced == list(range(len(op["inputs"]))), "one gradient per input, no more"


@pytest.mark.parametrize("name", OPS)
def test_grad_inputs_name_real_tensors(table, name):
    op = table[name]
    for source, index in op["grad_inputs"]:
        ports = op["outputs"] if source in ("grad_out", "out") else op["inputs"]
        assert 0 <= index < len(ports), (source, index)
        if source == "grad_out":  # a gradient flows only into float outputs
            assert ports[index][1] != "int32", ports[index]
    # the grad op reads the forward inputs and outputs it needs, each once
    pairs = [tuple(p) for p in op["grad_inputs"]]
    assert len(set(pairs)) == len(pairs)


@pytest.mark.parametrize("name", OPS)
def test_gradients_of_outputs_are_optional_grad_inputs(table, name):
    """PopART 3.4 (transforms/autodiff/gradgrowerop.cpp) connects an empty TensorId to a
    grad input fed by the gradient of an output off the loss path, and
    Graph::connectInputs throws unless the grad op lists that index in
    optionalInputs(). Forward inputs and outputs (In, Out) are always connected."""
    op = table[name]
    grad_out = [i for i, (source, _) in enumerate(op["grad_inputs"]) if source == "grad_out"]
    assert grad_out, "the grad op takes the gradient of at least one output"
    assert sorted(op["optional_grad_inputs"]) == grad_out


def test_the_grad_op_declares_the_tables_optional_inputs():
    """CustomOps.cpp's SnnLayerGradOp overrides Op::optionalInputs (PopART's default: none)
    with the table's optional grad inputs, not with a list of its own."""
    source = (HEADER.parent / "CustomOps.cpp").read_text()
    body = re.search(r"class SnnLayerGradOp\b.*?\n};", source, re.S)
    assert body, "CustomOps.cpp: no class SnnLayerGradOp"
    body = body.group(0)
    assert re.search(r"std::set<popart::InIndex>\s+optionalInputs\(\)\s+const\s+override", body), \
        "SnnLayerGradOp does not override optionalInputs()"
    assert "ops::gradInputIsOptional(" in body, "optionalInputs() is not taken from the table"


def test_the_layers_outputs_feed_the_next_layers_inputs(table):
    """A spiking op's values/ids/counts are the next op's in_values/in_ids/in_counts:
    same element types (ipu.py passes them on unconverted)."""
    spiking = table["SnnSpikingLayer"]
    outputs = dict(spiking["outputs"])
    for name in OPS:
        inputs = dict(table[name]["inputs"])
        assert outputs["ids"] == inputs["in_ids"] == "int32"
        assert outputs["counts"] == inputs["in_counts"] == "int32"
        assert inputs["in_values"] in ("float", "float_or_half")


# --------------------------------------------------------------------------- ipu.py
DTYPES = {"int32": (torch.int32,), "float": (torch.float32,),
          "float_or_half": (torch.float32, torch.float16)}


def _calls(monkeypatch, layers, half=False):
    fake = install(monkeypatch)
    net = torch.nn.Sequential(*layers)
    if half:
        net = net.half()
    x = SparseSpikes.from_dense((torch.rand(4, 2, layers[0].in_features) < 0.3).float())
    with fake.tracing():
        net(x)
    return fake.custom_op_calls


@pytest.mark.parametrize("half", [False, True])
def test_ipu_backend_calls_match_the_tables(table, monkeypatch, half):
    layers = [LIFLayer(10, 16, max_spikes=8, overflow="drop", recurrent=True, backend="ipu"),
              SynapticLayer(16, 8, max_spikes=4, overflow="drop", learn_alpha=True,
                            backend="ipu"),
              ReadoutLayer(8, 3, backend="ipu")]
    calls = _calls(monkeypatch, layers, half)
    assert [c["name"] for c in calls] == ["SnnSpikingLayer", "SnnSpikingLayer",
                                          "SnnReadoutLayer"]
    attribute_names = {a[0] for a in table[""]["attributes"]}
    for call in calls:
        op = table[call["name"]]
        assert (call["domain"], call["domain_version"]) == (table[""]["domain"],
                                                            table[""]["version"])
        assert len(call["inputs"]) == len(op["inputs"])
        for tensor, (port, dtype) in zip(call["inputs"], op["inputs"]):
            assert tensor.dtype in DTYPES[dtype], (call["name"], port, tensor.dtype)
        assert len(call["example_outputs"]) == len(op["outputs"])
        for tensor, (port, dtype) in zip(call["example_outputs"], op["outputs"]):
            assert tensor.dtype in DTYPES[dtype], (call["name"], port, tensor.dtype)
        assert set(call["attributes"]) <= attribute_names


def test_attribute_kinds_match(table, monkeypatch):
    calls = _calls(monkeypatch, [LIFLayer(6, 8, max_spikes=4, overflow="drop", backend="ipu")])
    kinds = {name: kind for name, kind, _ in table[""]["attributes"]}
    for name, value in calls[0]["attributes"].items():
        assert isinstance(value, int if kinds[name] == "int" else float), name



# --------------------------------------------------------------------------- absent grad inputs
def _grad_calls(monkeypatch, layers):
    """The grad ops' runs on the host graph during one backward pass (ipu_graph backend):
    (op, attributes, inputs, forward inputs) as snn_ipu/backends/ipu_graph.py passes them."""
    from snn_ipu.backends import ipu_graph

    calls = []
    real = ipu_graph._run

    def spy(cfg, op, attributes, inputs, forward_inputs=()):
        if op.endswith("Grad"):
            calls.append((op, attributes, list(inputs), list(forward_inputs)))
        return real(cfg, op, attributes, inputs, forward_inputs)

    monkeypatch.setattr(ipu_graph, "_run", spy)
    net = torch.nn.Sequential(*layers)
    x = SparseSpikes.from_dense((torch.rand(5, 2, layers[0].in_features,
                                            generator=torch.Generator().manual_seed(0)) < 0.4)
                                .float())
    out = net(x)
    (out * torch.linspace(-1.0, 1.0, out.shape[-1])).sum().backward()
    return calls


def test_an_absent_optional_grad_input_counts_as_zeros(monkeypatch):
    """The grad op run (LayerOps.cpp, as the Opx grows it) with an optional grad input
    left unconnected, as PopART leaves it, gives what it gives with zeros there; a
    required input left unconnected is refused, naming it."""
    import numpy as np

    from snn_ipu import _graph
    from snn_ipu._native import numpy_view

    signatures = _graph.op_signatures()
    layers = [LIFLayer(9, 12, max_spikes=12, recurrent=True, backend="ipu_graph"),
              ReadoutLayer(12, 4, backend="ipu_graph")]
    calls = _grad_calls(monkeypatch, layers)
    assert sorted(c[0] for c in calls) == ["SnnReadoutLayerGrad", "SnnSpikingLayerGrad"]
    for op, attributes, inputs, forward in calls:
        signature = next(s for s in signatures.values() if s["grad_op"] == op)
        arrays = [numpy_view(t) for t in inputs]
        forward_arrays = [numpy_view(t) for t in forward]
        optional = signature["optional_grad_inputs"]
        assert optional, op
        for i in optional:
            zeros = list(arrays)
            zeros[i] = np.zeros_like(arrays[i])
            absent = list(arrays)
            absent[i] = None
            want = _graph.run_op(op, attributes, zeros, forward_arrays)
            got = _graph.run_op(op, attributes, absent, forward_arrays)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        required = next(i for i in range(len(arrays)) if i not in optional)
        missing = list(arrays)
        missing[required] = None
        with pytest.raises(ValueError, match="is not connected"):
            _graph.run_op(op, attributes, missing, forward_arrays)


# --------------------------------------------------------------------------- inputs the op creates
@pytest.mark.parametrize("recurrent", [False, True])
def test_the_op_creates_its_weights_on_the_tiles_of_their_neurons(recurrent):
    """PopART asks the forward Opx to lay out the weights (getInputCreatorType: CanCreate,
    createInput): each row sits on the tile of its neuron, tile first_tile + n //
    neurons_per_tile (snn_ipu.planning.IpuTiles; the last tile takes the rest), so the
    per-call copy into the tile's transposed blocks stays on the tile. Inputs the op does
    not create are spread from tile 0, as PopART spreads them."""
    from snn_ipu import _graph

    n, fan_in, steps, batch, k, per_tile, first = 20, 13, 3, 2, 5, 6, 40
    attributes = {"model": 0, "capacity": 4, "neurons_per_tile": per_tile,
                  "first_tile": first, "recurrent": int(recurrent)}
    inputs = [("int", [steps, batch, k]), ("int", [steps, batch, 2]),
              ("float", [steps, batch, k]), ("float", [n, fan_in]), ("float", [n]),
              ("float", [n, n] if recurrent else [1, 1]), ("float", [n]), ("float", [n]),
              ("float", [1])]

    def tiles_of(index):
        graph = _graph.Graph()
        tensor = graph.create_op_input("SnnSpikingLayer", attributes, inputs, index)
        tile_of = {}
        for tile, intervals in enumerate(graph.tile_mapping(tensor)):
            for begin, end in intervals:
                tile_of.update({element: tile for element in range(begin, end)})
        return tile_of

    created = [(3, fan_in)] + ([(5, n)] if recurrent else [])
    for index, cols in created:
        tile_of = tiles_of(index)
        assert sorted(tile_of) == list(range(n * cols)), "every element mapped"
        for neuron in range(n):
            row = {tile_of[neuron * cols + c] for c in range(cols)}
            assert row == {first + neuron // per_tile}, (index, neuron, row)
    for index in (4, 6) + (() if recurrent else (5,)):  # bias, beta; the [1, 1] stand-in
        assert 0 in set(tiles_of(index).values()), index
