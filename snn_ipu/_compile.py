"""The layers under ``torch.compile``: dynamo cannot trace the native calls, the numpy
views or the checks of a layer call, so a layer runs as Python runs it, one graph break
where a compiled caller reaches it, and the rest of the model compiles around it."""

from __future__ import annotations

import sys
from typing import Callable, Dict

import torch

_EAGER: Dict[Callable, Callable] = {}


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
