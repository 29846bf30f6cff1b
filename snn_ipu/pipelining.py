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
"""

from __future__ import annotations

from typing import List

import torch

from ._numbers import whole_number
from .spikes import SparseSpikes

__all__ = ["check_input_delay", "delayed", "pipeline"]


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
