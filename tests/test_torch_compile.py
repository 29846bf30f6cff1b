"""A model with snn_ipu layers under ``torch.compile``: each layer runs eagerly (a graph
break), the torch code around it compiles, and the results are the uncompiled
reference model's, on every call (dynamo's second call traced the layer's numpy code and
raised before the layers were left to Python)."""

import pytest
import torch
from torch import nn

from snn_ipu.layers import LIFLayer, ReadoutLayer

pytest.importorskip("torch._dynamo")


class _Net(nn.Module):
    """Torch ops before and after the layers, for dynamo to compile around them."""

    def __init__(self, backend: str):
        super().__init__()
        torch.manual_seed(3)
        self.hidden = LIFLayer(12, 24, grad_window=0.2, backend=backend)
        self.recurrent = LIFLayer(24, 16, recurrent=True, grad_window=None, backend=backend)
        self.out = ReadoutLayer(16, 4, backend=backend)
        with torch.no_grad():
            self.hidden.weight.mul_(4.0)
            self.recurrent.weight.mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.out(self.recurrent(self.hidden((x > 0.6).float())))
        return torch.log_softmax(u.mean(0), dim=-1)


def test_compiled_model_matches_the_reference_on_every_call():
    torch.manual_seed(0)
    xs = [torch.rand(8, 3, 12) for _ in range(3)]
    labels = torch.tensor([0, 2, 3])
    reference, model = _Net("reference"), _Net("emulator")
    # aot_eager: the failure was dynamo's tracing, which every compile backend shares;
    # inductor's C++ build of the torch parts would add tens of seconds
    compiled = torch.compile(model, backend="aot_eager")
    for x in xs:
        loss = nn.functional.nll_loss(compiled(x), labels)
        ref_loss = nn.functional.nll_loss(reference(x), labels)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
        loss.backward()
        ref_loss.backward()
    assert model.hidden.stats["activity"] > 0 and model.recurrent.stats["activity"] > 0
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert q.grad is not None and q.grad.abs().max() > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
