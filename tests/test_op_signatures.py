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

