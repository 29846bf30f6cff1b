"""Layer pipelining: a layer reads its input list one timestep late.

With ``layer.input_delay = d`` a layer at step ``t`` sees its input of step
``t - d`` (nothing before step ``d``):

    x_delayed[t] = x[t - d]   for t >= d,   empty (no spikes) for t < d

so the last ``d`` input steps never reach it. That is the delay of Finkbeiner
et al. (AAAI 2024): layer l at step t reads layer l-1's spikes of step t-1, so
the layers of one timestep do not depend on each other and can all run at once
(the planner's pipelined estimate). It changes the network's dynamics, so it is
opt-in: :func:`pipeline` sets a delay of one on every snn_ipu layer after the
first, and ``input_delay = 0`` (the default) leaves a layer as it was.

The shift is applied once, where a layer takes its input (before any backend
sees it), so the reference, emulator, ipu_graph and ipu backends all compute
the same delayed equations (docs/numerics.md). The shifted values keep their
autograd history: the gradient of ``x_delayed[t]`` reaches ``x[t - d]``.

Called layer by layer, every op has its own time loop and the layers still run
one after another. :func:`run_fused` runs a pipelined ``nn.Sequential`` on the
``ipu_graph`` backend as the IPU would run it at speed: one program with one time
loop whose every step holds all the layers' vertices (docs/ipu.md, "The fused
time loop").
"""

from __future__ import annotations

from typing import Any, List, Union

import torch

from ._numbers import whole_number
from .spikes import SparseSpikes

__all__ = ["check_input_delay", "delayed", "pipeline", "require_no_input_delay", "run_fused"]


def require_no_input_delay(layer, where: str) -> None:
    """Refuses to export a layer of a pipelined model (:func:`pipeline`): it reads its
    input ``input_delay`` steps late, and a model exported without that delay would
    compute another network."""
    delay = getattr(layer, "input_delay", 0)
    if delay:
        raise ValueError(f"{where}: {layer.name} reads its input {delay} step(s) late "
                         "(input_delay, set by snn_ipu.pipeline), which the exported model "
                         "cannot express; export the model as it was before pipeline()")


def check_input_delay(value) -> int:
    """A layer's ``input_delay``: a whole number of timesteps >= 0."""
    steps = whole_number(value, 0)
    if steps is None or steps >= 2**31:
        raise ValueError(f"input_delay must be a whole number of timesteps >= 0, got {value!r}")
    return steps


def _shift(t: torch.Tensor, steps: int) -> torch.Tensor:
    """``t`` moved ``steps`` rows later along dim 0, zeros in front, the tail dropped."""
    keep = max(t.shape[0] - steps, 0)
    front = torch.zeros((t.shape[0] - keep, *t.shape[1:]), dtype=t.dtype, device=t.device)
    return torch.cat([front, t[:keep]], dim=0)


def delayed(spikes: SparseSpikes, steps: int) -> SparseSpikes:
    """The list as a layer with ``input_delay=steps`` sees it: step ``t`` holds step
    ``t - steps`` of ``spikes``, and the first ``steps`` steps hold nothing."""
    if steps == 0:
        return spikes
    # Static ops only (a slice and a concatenation): PopTorch traces them unchanged.
    out = SparseSpikes._made(_shift(spikes.ids, steps), _shift(spikes.counts, steps),
                             spikes.num_neurons, _shift(spikes.values, steps))
    out._checked = spikes.values_checked
    # A list an IPU op made stays one: its dense view is an op of the device, and it
    # carries a gradient to the op (while PopTorch traces, its values do not say so;
    # without this the next op was built with input_needs_grad=0 and every layer
    # before it was left untrained by PopART, docs/ipu.md).
    out._dense_on_device = spikes._dense_on_device
    return out


def pipeline(model: torch.nn.Module, enabled: bool = True) -> List[str]:
    """Pipelines ``model``: every snn_ipu layer after the first (in registration
    order, which must be the order they run in) reads its input one timestep late
    (``input_delay = 1``); ``enabled=False`` sets every layer back to 0. Returns the
    names of the layers delayed."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    layers = [m for _, m in model.named_modules() if hasattr(m, "input_delay")]
    if not layers:
        raise ValueError("the model has no snn_ipu layers to pipeline")
    for i, layer in enumerate(layers):
        layer.input_delay = 1 if enabled and i > 0 else 0
    return [layer.name for layer in layers[1:]] if enabled else []


def _fusable_layers(model: torch.nn.Module) -> List[Any]:
    """The layers of a pipelined ``nn.Sequential`` that :func:`run_fused` can run as
    one program, or a ValueError naming what stands in the way."""
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError("run_fused takes an nn.Sequential of snn_ipu layers (each feeding the "
                        f"next), got {type(model).__name__}")
    layers = list(model)
    if not layers:
        raise ValueError("run_fused: the model has no layers")
    for i, layer in enumerate(layers):
        if not hasattr(layer, "input_delay"):
            raise ValueError(f"run_fused: layer {i} ({type(layer).__name__}) is not an snn_ipu "
                             "layer; the fused program holds snn_ipu layers only")
        want = 0 if i == 0 else 1
        if layer.input_delay != want:
            raise ValueError(
                f"run_fused: {layer.name} has input_delay={layer.input_delay}, the fused time "
                f"loop needs {want} (0 for the first layer, 1 after it): call "
                "snn_ipu.pipeline(model) first")
        if layer.backend != "ipu_graph":
            raise ValueError(f"run_fused: {layer.name} has backend={layer.backend!r}; the fused "
                             "program runs on backend='ipu_graph'")
        if layer.carry_state:
            raise ValueError(f"run_fused: {layer.name} carries its state, which the IPU op "
                             "does not support")
        if layer.neuron_model == "readout" and i + 1 < len(layers):
            raise ValueError(f"run_fused: {layer.name} is a readout before the last layer; "
                             "it lists no spikes for the layer after it")
    return layers


def run_fused(model: torch.nn.Module, x: Union[SparseSpikes, torch.Tensor]):
    """``model(x)`` for a pipelined ``nn.Sequential`` of snn_ipu layers on the
    ``ipu_graph`` backend, run as one program: one time loop forward and one backward,
    each step's compute sets holding every layer's vertices (the fused time loop,
    popops_ext/poplar/NetworkOps.hpp). The same output, gradients, layer stats and
    overflow policies as calling the layers in turn; the layers' lists between them
    stay in the program."""
    from .backends import ipu_graph
    from .layer_input import as_sparse

    layers = _fusable_layers(model)
    spikes = as_sparse(x, layers[0].in_features, layers[0].name)
    configs, params, records_grad = [], [], []
    input_grad = spikes.values.requires_grad
    for layer in layers:
        layer._check_parameters()
        layer_params = layer._params()
        if layer.neuron_model == "readout":
            configs.append(layer.config())
            records_grad.append(False)
        else:
            # a layer's list carries a gradient where autograd records its call
            input_grad = layer._records_grad(input_grad, layer_params)
            records_grad.append(input_grad)
            configs.append(layer.config(input_grad))
        params.append(layer_params)
    results = ipu_graph.pipelined_network(configs, spikes, params,
                                          name=type(model).__name__)
    for layer, grad, (_out, record) in zip(layers, records_grad, results):
        if layer.neuron_model != "readout":
            layer._apply_overflow_policy(record, stacklevel=3)
        layer._keep(record)
        if grad and layer.grad_window is not None and record.total_spikes is not None:
            layer._warn_if_no_gradient_passes()
    return results[-1][0]
