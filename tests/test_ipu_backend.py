"""The IPU backend without an IPU: clear errors, and the exact custom-op call it emits.

A stand-in ``poptorch`` module records what ``spiking_layer`` passes to
``poptorch.custom_op``; that the op itself computes the right thing can only
be checked on an IPU (see docs/ipu.md).
"""

import math
import sys
import types

import pytest
import torch

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer
from snn_ipu.backends import ipu


def spikes(T=3, B=2, K=4, n=8):
    ids = torch.zeros(T, B, K, dtype=torch.int32)
    counts = torch.zeros(T, B, 2, dtype=torch.int32)
    ids[0, 0, :2] = torch.tensor([1, 5])
    counts[0, 0] = torch.tensor([2, 2])
    return SparseSpikes(ids, counts, n)


class FakePoptorch(types.ModuleType):
    def __init__(self, on_ipu=True):
        super().__init__("poptorch")
        self.on_ipu = on_ipu
        self.calls = []

    def isRunningOnIpu(self):  # noqa: N802 - poptorch's name
        return self.on_ipu

    def custom_op(self, inputs, name, domain, domain_version, example_outputs, attributes=None):
        self.calls.append(dict(inputs=inputs, name=name, domain=domain, version=domain_version,
                               example_outputs=example_outputs, attributes=attributes))
        return [torch.zeros_like(t) for t in example_outputs]


@pytest.fixture
def fake_poptorch(monkeypatch):
    fake = FakePoptorch()
    monkeypatch.setitem(sys.modules, "poptorch", fake)
    monkeypatch.setattr(ipu, "load_library", lambda path=None: None)
    return fake


def call_spiking(layer, s):
    return ipu.spiking_layer(layer, layer.config(), s, layer.weight, layer.bias, layer.rec_weight,
                             torch.full((layer.out_features,), 0.9),
                             torch.ones(layer.out_features), None)


def test_without_poptorch_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", None)  # import poptorch -> ImportError
    layer = LIFLayer(8, 6, max_spikes=4)
    with pytest.raises(ipu.IPUUnavailableError, match="PopTorch") as info:
        call_spiking(layer, spikes())
    assert isinstance(info.value, RuntimeError)
    assert "emulator" in str(info.value)


def test_outside_a_poptorch_model_the_error_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", FakePoptorch(on_ipu=False))
    with pytest.raises(ipu.IPUUnavailableError, match="isRunningOnIpu"):
        call_spiking(LIFLayer(8, 6, max_spikes=4), spikes())


def test_missing_library_names_the_env_var(tmp_path):
    with pytest.raises(ipu.IPUUnavailableError, match=ipu.LIBRARY_ENV):
        ipu.load_library(str(tmp_path / "nope.so"))


def test_spiking_layer_emits_the_custom_op(fake_poptorch):
    layer = LIFLayer(8, 6, recurrent=True, max_spikes=4, grad_window=0.5)
    out = call_spiking(layer, spikes())
    (call,) = fake_poptorch.calls
    assert (call["name"], call["domain"], call["version"]) == ("SnnSpikingLayer", "ai.snn_ipu", 1)
    ins = call["inputs"]
    assert len(ins) == 9
    assert ins[0].dtype == torch.int32 and ins[0].shape == (3, 2, 4)
    assert ins[1].dtype == torch.int32 and ins[1].shape == (3, 2, 2)
    assert ins[2].dtype == torch.float32 and ins[2][0, 0].tolist() == [1, 1, 0, 0]
    assert ins[3] is layer.weight and ins[5] is layer.rec_weight
    assert ins[8].shape == (1,)  # no alpha for a leaky layer: a stand-in
    shapes = [tuple(t.shape) for t in call["example_outputs"]]
    assert shapes == [(3, 2, 4), (3, 2, 4), (3, 2, 2), (3, 2, 4), (3, 2, 2), (1,), (1,)]
    a = call["attributes"]
    assert a["model"] == 0 and a["reset"] == 0 and a["recurrent"] == 1
    assert a["capacity"] == 4 and a["has_bias"] == 1 and a["keep_dense_state"] == 0
    assert a["grad_window"] == 0.5
    assert a["surrogate_kind"] == 0 and a["surrogate_p0"] == 2.0  # ATan(alpha=2)
    assert a["neurons_per_tile"] == 6  # all 6 neurons on one tile (less than a chunk of 8)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a.values())
    assert isinstance(out, SparseSpikes) and out.ids.shape == (3, 2, 4)


def test_learned_decay_keeps_dense_state(fake_poptorch):
    layer = SynapticLayer(8, 6, max_spikes=4)
    beta = torch.full((6,), 0.9, requires_grad=True)
    ipu.spiking_layer(layer, layer.config(), spikes(), layer.weight, None, None, beta,
                      torch.ones(6), torch.full((6,), 0.8))
    (call,) = fake_poptorch.calls
    assert call["attributes"]["model"] == 1
    assert call["attributes"]["keep_dense_state"] == 1
    assert call["attributes"]["has_bias"] == 0
    assert [tuple(t.shape) for t in call["example_outputs"][5:]] == [(3, 2, 6), (3, 2, 6)]
    assert call["inputs"][4].shape == (6,)  # zero bias stand-in


def test_readout_layer_emits_its_op(fake_poptorch):
    layer = ReadoutLayer(8, 5)
    out = ipu.readout_layer(layer, spikes(), layer.weight, layer.bias, torch.full((5,), 0.9))
    (call,) = fake_poptorch.calls
    assert call["name"] == "SnnReadoutLayer" and len(call["inputs"]) == 6
    assert call["attributes"]["model"] == 2
    assert out.shape == (3, 2, 5)


def test_infinite_window_is_packed_as_negative():
    config = LIFLayer(8, 6).config()
    a = ipu.pack_attributes(config, capacity=3, neurons_per_tile=8, has_bias=True,
                            keep_dense_state=False)
    assert config.grad_window is None and a["grad_window"] == -1.0
    assert math.isfinite(a["activity"])
