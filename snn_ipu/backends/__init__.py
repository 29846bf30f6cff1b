"""Backends: one interface, three implementations.

``reference``: dense PyTorch autograd, the ground truth in tests.
``emulator``: the C++ host executor running the IPU codelets (default on CPU).
``ipu``: a PopTorch custom op, used when running on an IPU.

Each backend module provides ``spiking_layer(layer, config, spikes, weight,
bias, rec_weight, beta, threshold, alpha) -> SparseSpikes`` (``config``: the
call's ``LayerConfig``, from ``layer.config(records_grad)``) and
``readout_layer(layer, spikes, weight, bias, beta) -> Tensor``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["select"]


def _running_on_ipu() -> bool:
    try:
        import poptorch  # noqa: F401  (only present with the Graphcore SDK)
    except ImportError:
        return False
    return bool(poptorch.isRunningOnIpu())


def select(name: str) -> ModuleType:
    """The backend module for a layer's ``backend`` setting."""
    if name == "auto":
        name = "ipu" if _running_on_ipu() else "emulator"
    return importlib.import_module(f"{__name__}.{name}")
