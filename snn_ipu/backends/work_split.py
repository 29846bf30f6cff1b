"""How an executor splits a layer call: which tile owns which contiguous output
neurons, and the groups of samples that run as separate work items.

The emulator runs the very plan the IPU would run (``target="ipu2"``) or one
sized for the host's caches and threads (``target="host"``); both come from
the C++ planner in ``popops_ext/plan`` (``_C.plan_layer``), cached here per layer
shape.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import NamedTuple, Optional, Union

import numpy as np

from .._codes import MODELS as MODEL_CODES

__all__ = ["DEFAULT_ACTIVITY", "MODEL_CODES", "WorkSplit", "model_code", "tile_starts_for",
           "work_split_for"]

# The fraction of neurons spiking per step that an IPU plan assumes where it is given
# none (snn_ipu.plan and place), and that the op of a layer place() did not place is
# built for: it sizes an automatic list capacity and the cycle estimates.
DEFAULT_ACTIVITY = 0.05


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


def planning_threads() -> int:
    """The thread count host plans are made for: the machine's CPUs, not the ones this
    process may use (taskset, cgroups) nor set_num_threads(). Tiles and sample groups fix
    the order of the gradients' sums, so a plan that followed those would make results
    depend on them; this way they are bit-identical on one machine however it runs."""
    return _MACHINE_CPUS


# Read once: os.cpu_count() scans sysfs on every call, and a plan is looked up per call.
_MACHINE_CPUS = os.cpu_count() or 1


class WorkSplit(NamedTuple):
    """How the executor splits a layer call: ``tile_starts`` (``int32[num_tiles + 1]``,
    tile ``i`` owns neurons ``[starts[i], starts[i + 1])``) and ``sample_groups``, the
    contiguous groups of samples that run as separate work items on the host (a
    layer with fewer tiles than threads gives each thread a share of the batch;
    1 on an IPU)."""

    tile_starts: np.ndarray
    sample_groups: int


@lru_cache(maxsize=256)
def _cached(args: tuple) -> WorkSplit:
    from .._native import _C

    *shape, dense_history = args
    plan = _C.plan_layer(*shape, dense_history=dense_history)
    starts = np.ascontiguousarray(plan["tile_starts"], dtype=np.int32)
    starts.setflags(write=False)  # shared by every caller through the cache
    return WorkSplit(starts, int(plan["sample_groups"]))


def work_split_for(
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
) -> WorkSplit:
    """The planner's :class:`WorkSplit` of a layer call.

    ``dense_history``: the layer keeps its dense state history (an IPU op whose
    decays are learned), which takes tile memory. Read-only and cached: the
    same layer shape always gets the same plan.
    """
    args = (
        int(in_features), int(out_features), int(batch), int(num_steps), bool(recurrent),
        model_code(model), int(capacity_in), int(capacity_out), float(activity),
        int(weight_bytes), str(target), int(threads if threads is not None else planning_threads()),
        bool(dense_history),
    )
    return _cached(args)


def tile_starts_for(*args, **kwargs) -> np.ndarray:
    """``int32[num_tiles + 1]``: tile ``i`` owns neurons ``[starts[i], starts[i + 1])``
    (the ``tile_starts`` of :func:`work_split_for`, which takes the same arguments)."""
    return work_split_for(*args, **kwargs).tile_starts
