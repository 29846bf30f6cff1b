"""Backends: one contract (:mod:`.contract`), several implementations.

``reference``: dense PyTorch autograd, the ground truth in tests.
``emulator``: the C++ host executor running the IPU codelets (default on CPU).
``ipu``: a PopTorch custom op, used when running on an IPU.
``triton``: the sparse kernels for NVIDIA GPUs (``auto`` picks it for the feed-forward
layers and readouts of CUDA tensors when Triton is installed; ``reference`` otherwise).

Each backend module implements :class:`~.contract.Backend`: ``spiking_layer`` and
``readout_layer`` take a layer's config, input spikes, parameters and initial state,
and return its output and a :class:`~.contract.CallRecord`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Optional

import torch

from .contract import Backend

__all__ = ["auto_backend", "select"]


# Set once an import of poptorch has failed: a failed import searches sys.path again
# every time (~0.1 ms), and "auto" asks on every layer call.
_poptorch_missing = False


def _running_on_ipu() -> bool:
    global _poptorch_missing
    # sys.modules first: a poptorch put there (a test's stand-in) is found however an
    # earlier import went
    poptorch = sys.modules.get("poptorch")
    if poptorch is None:
        if _poptorch_missing:
            return False
        try:
            import poptorch  # (only present with the Graphcore SDK)
        except ImportError:
            _poptorch_missing = True
            return False
    return bool(poptorch.isRunningOnIpu())


def auto_backend(device: Optional[torch.device] = None, recurrent: bool = False) -> str:
    """What ``backend="auto"`` runs for a layer whose weights are on ``device``: ``ipu``
    on an IPU, ``triton`` for CUDA tensors where Triton is installed (else the dense
    ``reference``, which runs on any device), ``emulator`` on the CPU. A ``recurrent``
    layer on CUDA runs ``reference`` while the triton backend's recurrent kernels are
    off there (:data:`.triton.RECURRENT_ON_CUDA`)."""
    if _running_on_ipu():
        return "ipu"
    if device is not None and torch.device(device).type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "reference"
        if recurrent:
            from . import triton

            return "triton" if triton.RECURRENT_ON_CUDA else "reference"
        return "triton"
    return "emulator"


def select(name: str, device: Optional[torch.device] = None, recurrent: bool = False) -> Backend:
    """The backend module for a layer's ``backend`` setting (``device``: where its
    weights are, and ``recurrent``: whether it has recurrent weights, for ``auto``)."""
    if name == "auto":
        name = auto_backend(device, recurrent)
    # sys.modules first: every layer call asks, and import_module's lookup costs more
    module = sys.modules.get(f"{__name__}.{name}")
    return module if module is not None else importlib.import_module(f"{__name__}.{name}")
