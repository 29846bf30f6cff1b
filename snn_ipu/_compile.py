"""The layers under ``torch.compile``: dynamo cannot trace the native calls, the numpy
views or the checks of a layer call, so a layer runs as Python runs it, one graph break
where a compiled caller reaches it, and the rest of the model compiles around it.

The other program transforms of torch cannot run a layer as Python runs it, and are
refused by name (:func:`refuse_transforms`): ``torch.jit.trace`` and ``torch.jit.script``,
and ``torch.func``'s ``grad``, ``vmap``, ``jacrev``, ``jvp``."""

from __future__ import annotations

import sys
from typing import Callable, Dict, Optional

import torch

_EAGER: Dict[Callable, Callable] = {}

# functorch's level of the innermost transform running (None: none), where torch has it
_functorch_level: Callable[[], Optional[int]] = getattr(
    getattr(torch._C, "_functorch", None), "maybe_current_level", lambda: None)


def compiling() -> bool:
    """Whether dynamo is tracing the caller (it reads True there, False when run)."""
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if is_compiling is None:  # torch < 2.3: dynamo's own, once something has imported it
        dynamo = sys.modules.get("torch._dynamo")
        is_compiling = getattr(dynamo, "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def eager(fn: Callable) -> Callable:
    """``fn`` as dynamo leaves it: run by Python, not traced."""
    wrapped = _EAGER.get(fn)
    if wrapped is None:
        import torch._dynamo

        wrapped = _EAGER[fn] = torch._dynamo.disable(fn)
    return wrapped


def refuse_transforms(where: str, readable: bool) -> None:
    """Raises where ``torch.func`` or ``torch.jit.trace`` runs the layer call ``where``
    (``readable``: its tensors' values can be read, not a static graph's). functorch's
    wrapped tensors have no storage, so the lists' native scan failed with "Cannot access
    data pointer of Tensor that doesn't have storage"; a trace records the example
    input's lists as constants, so the traced reference model gave other inputs that
    input's spikes (check_trace=False: no error at all), and the emulator's failed with
    "unordered_map::at"."""
    if _functorch_level() is not None:
        raise RuntimeError(
            f"{where}: snn_ipu layers do not run under torch.func transforms (grad, vmap, "
            "jacrev, jvp, ...): their spike lists and native calls read the tensors' "
            "values; use torch.autograd.grad or loss.backward() (per-sample gradients: "
            "one sample per call)")
    if readable and torch.jit.is_tracing():
        raise RuntimeError(
            f"{where}: snn_ipu layers cannot be traced by torch.jit.trace: a layer's spike "
            "lists have data-dependent sizes and its backend runs outside the trace, which "
            "would replay the example input's spikes for every input; run the model as "
            "Python, or under torch.compile")
