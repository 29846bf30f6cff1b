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


@pytest.mark.parametrize("method", ("register_full_backward_hook",
                                    "register_full_backward_pre_hook",
                                    "register_backward_hook"))
def test_backward_hooks_on_a_spiking_layer_are_refused_by_name(method):
    """A spiking layer returns SparseSpikes, which nn.Module's backward hooks cannot
    see: a full backward hook never ran (silently), the old-style one failed with
    SparseSpikes' message about indexing. The route the error names instead, a hook on
    the output's values, gets the reference's gradient."""
    models = {backend: _model(backend) for backend in BACKENDS}
    with pytest.raises(RuntimeError, match=r"LIFLayer\(12->24\): " + method + ".*values"):
        getattr(models["emulator"][0], method)(lambda *args: None)
    grads = {}
    for backend, model in models.items():
        seen = grads[backend] = []

        def hook(module, inputs, out, seen=seen) -> None:
            # dL/d(values) [T, B, K] at the listed neurons, as dL/dS [T, B, N]
            out.values.register_hook(lambda g: seen.append(
                torch.zeros(out.dense_shape).scatter(-1, out.ids.long(), g)))

        model[0].register_forward_hook(hook)
        model(_spikes(0)).square().mean().backward()
    assert models["emulator"][0].stats["activity"] > 0 and grads["reference"][0].abs().max() > 0
    torch.testing.assert_close(grads["emulator"][0], grads["reference"][0])


# (the reference readout is torch ops: forward mode works there)
@pytest.mark.parametrize("backend,tangent_of", [("reference", "0.weight"),
                                                ("emulator", "0.weight"),
                                                ("emulator", "1.weight")])
def test_forward_mode_gradients_are_refused_by_name(backend, tangent_of):
    """A tangent reaching a layer's autograd Function failed with torch's "You must
    implement the jvp function for custom autograd.Function", which named neither the
    layer nor the cause."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import functional_call

    model = _model(backend)
    params = {k: v.detach() for k, v in model.named_parameters()}
    named = {"0.weight": r"LIFLayer\(12->24\)", "1.weight": r"ReadoutLayer\(24->4\)"}[
        tangent_of] if backend == "emulator" else "spiking layers"
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=named + ".*forward_ad"):
        dual = fwAD.make_dual(params[tangent_of], torch.ones_like(params[tangent_of]))
        functional_call(model, {**params, tangent_of: dual}, (_spikes(0),))


@pytest.mark.parametrize("tangent_of", ("0.weight", "1.weight"))
def test_batched_gradients_are_the_reference_s_or_refused_by_name(tangent_of):
    """torch.autograd.functional.jacobian(vectorize=True) runs the backward under vmap
    (is_grads_batched=True): the reference's torch ops take it, the emulator's
    executor failed with "Batching rule not implemented for aten::detach"."""
    from torch.func import functional_call

    x = _spikes(0)[:4, :2]
    jacobians = {}
    for backend in BACKENDS:
        model = _model(backend)
        params = {k: v.detach() for k, v in model.named_parameters()}

        def outputs(w, model=model, params=params):
            return functional_call(model, {**params, tangent_of: w}, (x,)).sum((0, 1))

        jacobians[backend] = torch.autograd.functional.jacobian(outputs, params[tangent_of])
        if backend == "reference":
            vectorized = torch.autograd.functional.jacobian(outputs, params[tangent_of],
                                                            vectorize=True)
            torch.testing.assert_close(vectorized, jacobians[backend])
        else:
            with pytest.raises(RuntimeError, match=r"emulator.*is_grads_batched"):
                torch.autograd.functional.jacobian(outputs, params[tangent_of],
                                                   vectorize=True)
    assert jacobians["reference"].abs().max() > 0
    torch.testing.assert_close(jacobians["emulator"], jacobians["reference"])
