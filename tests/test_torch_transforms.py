"""torch's program transforms other than torch.compile (tests/test_torch_compile.py):
``torch.jit.trace`` / ``torch.jit.script`` and ``torch.func``'s cannot run a layer call
as Python runs it, and are refused naming the layer and the transform. A trace
(check_trace=False) of a reference model gave the example input's spikes for every
other input, with no error; an emulator model's trace failed with "unordered_map::at",
scripting with "Error inferring type for _fills", and torch.func with "Cannot access data
pointer of Tensor that doesn't have storage"."""

import pytest
import torch
from torch import nn

from snn_ipu.layers import LIFLayer, ReadoutLayer

BACKENDS = ("reference", "emulator")


def _model(backend: str) -> nn.Sequential:
    torch.manual_seed(3)
    model = nn.Sequential(LIFLayer(12, 24, grad_window=0.3, backend=backend),
                          ReadoutLayer(24, 4, backend=backend))
    with torch.no_grad():
        model[0].weight.mul_(4.0)
    return model


def _spikes(seed: int) -> torch.Tensor:
    return (torch.rand(8, 3, 12, generator=torch.Generator().manual_seed(seed)) > 0.6).float()


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_trace_is_refused_by_name(backend):
    model = _model(backend)
    model(_spikes(0))
    assert model[0].stats["activity"] > 0  # the example input makes spikes to replay
    with pytest.raises(RuntimeError, match=r"LIFLayer\(12->24\).*torch\.jit\.trace"):
        torch.jit.trace(model, (_spikes(0),), check_trace=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jit_script_is_refused_by_name(backend):
    model = _model(backend)
    model(_spikes(0))
    with pytest.raises(RuntimeError, match=r"LIFLayer\(12->24\).*torch\.jit\.script"):
        torch.jit.script(model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transform", ("grad", "vmap"))
def test_torch_func_transforms_are_refused_by_name(backend, transform):
    from torch.func import functional_call, grad, vmap

    model = _model(backend)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x):
        return functional_call(model, p, (x,)).square().mean()

    with pytest.raises(RuntimeError, match=r"LIFLayer\(12->24\).*torch\.func"):
        if transform == "grad":
            grad(loss)(params, _spikes(0))
        else:  # per-sample gradients, the usual reason for vmap
            vmap(grad(loss), in_dims=(None, 1))(params, _spikes(0).unsqueeze(2))
