"""Whether the host can read a tensor's values while a model runs.

PopTorch builds an IPU program by tracing the model on ``ipu`` tensors: their
values do not exist yet, so reading one (``bool()``, ``int()``, ``.item()``)
raises ("aten::item is only supported in eager mode"), and ops whose output
shape depends on values (``nonzero``, ``bincount``) cannot be in the graph.
``meta`` tensors behave the same, which is how the tests stand in for the IPU.
Checks of values (finite weights, binary spikes, valid ids) run only where this
module says they can; shapes and dtypes are checked everywhere.
"""

from __future__ import annotations

import torch

__all__ = ["STATIC_GRAPH_DEVICES", "autocast_enabled", "values_readable"]

STATIC_GRAPH_DEVICES = frozenset({"ipu", "meta"})


def values_readable(*tensors) -> bool:
    """False when any of ``tensors`` lives on a device whose values the host cannot
    read while the model is built (PopTorch's ``ipu``, ``meta``); non-tensors are
    ignored."""
    # is_cpu first: it costs a tenth of building t.device, and this runs on every call
    return not any(
        isinstance(t, torch.Tensor) and not t.is_cpu and t.device.type in STATIC_GRAPH_DEVICES
        for t in tensors
    )


def _autocast_query():
    """``autocast_enabled(device_type)``, asked the way the installed torch takes it."""
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4 (PopTorch's 2.0) takes no device

        def enabled(device_type: str) -> bool:
            return torch.is_autocast_cpu_enabled() if device_type == "cpu" \
                else torch.is_autocast_enabled()

        return enabled
    return torch.is_autocast_enabled


#: Whether autocast is on for a device type ("cpu", "cuda").
autocast_enabled = _autocast_query()
