"""Backends: one contract (:mod:`.contract`), several implementations.

``reference``: dense PyTorch autograd, the ground truth in tests.
``emulator``: the C++ host executor running the IPU codelets (default on CPU).
``ipu``: a PopTorch custom op, used when running on an IPU.

Each backend module implements :class:`~.contract.Backend`: ``spiking_layer`` and
``readout_layer`` take a layer's config, input spikes, parameters and initial state,
and return its output and a :class:`~.contract.CallRecord`.
"""

from __future__ import annotations

import importlib

from .contract import Backend

__all__ = ["select"]


def _running_on_ipu() -> bool:
    try:
        import poptorch  # noqa: F401  (only present with the Graphcore SDK)
    except ImportError:
        return False
    return bool(poptorch.isRunningOnIpu())


def select(name: str) -> Backend:
    """The backend module for a layer's ``backend`` setting."""
    if name == "auto":
        name = "ipu" if _running_on_ipu() else "emulator"
    return importlib.import_module(f"{__name__}.{name}")
