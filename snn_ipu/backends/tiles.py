"""Tile plans for the executors: which tile owns which contiguous output neurons.

The emulator runs the very plan the IPU would run (``target="ipu2"``) or one
sized for the host's caches and threads (``target="host"``); both come from
the C++ planner in ``popops_ext/plan`` through ``snn_ipu._C.plan_layer``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Optional, Union

import numpy as np

from ..layers import MODELS as MODEL_CODES

__all__ = ["MODEL_CODES", "model_code", "tile_starts_for"]


def model_code(model: Union[str, int]) -> int:
    """The integer code (0 leaky, 1 synaptic, 2 readout) of a neuron model."""
    if isinstance(model, str):
        try:
            return MODEL_CODES[model]
        except KeyError:
            raise ValueError(f"unknown neuron model {model!r}; expected one of "
                             f"{sorted(MODEL_CODES)}") from None
    if model not in MODEL_CODES.values():
        raise ValueError(f"unknown neuron model code {model!r}")
    return int(model)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@lru_cache(maxsize=256)
def _cached(args: tuple) -> np.ndarray:
    from .. import _C

    *shape, dense_history = args
    starts = np.ascontiguousarray(
        _C.plan_layer(*shape, dense_history=dense_history)["tile_starts"], dtype=np.int32
    )
    starts.setflags(write=False)  # shared by every caller through the cache
    return starts


def tile_starts_for(
    in_features: int,
    out_features: int,
    batch: int,
    num_steps: int,
    recurrent: bool = False,
    model: Union[str, int] = "leaky",
    capacity_in: int = 0,
    capacity_out: int = 0,
    weight_bytes: int = 4,
    target: str = "host",
    threads: Optional[int] = None,
    activity: float = 0.05,
    dense_history: bool = False,
) -> np.ndarray:
    """``int32[num_tiles + 1]``: tile ``i`` owns neurons ``[starts[i], starts[i + 1])``.

    ``dense_history``: the layer keeps its dense state history (an IPU op whose
    decays are learned), which takes tile memory. Read-only and cached: the
    same layer shape always gets the same plan.
    """
    args = (
        int(in_features), int(out_features), int(batch), int(num_steps), bool(recurrent),
        model_code(model), int(capacity_in), int(capacity_out), float(activity),
        int(weight_bytes), str(target), int(threads if threads is not None else default_threads()),
        bool(dense_history),
    )
    return _cached(args)
