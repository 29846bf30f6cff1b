"""Whether tensors hold values outside a range: the checks a layer runs on its
parameters and neuron constants on every call. On the CPU all of them take one
native pass over their bits; elsewhere (and for dtypes numpy lacks) torch ops per
tensor."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ._codes import VALUE_RANGES
from ._native import _C

__all__ = ["FINITE", "POSITIVE", "UNIT", "first_nonfinite", "first_out_of_range"]

# The ranges (codelets/Codes.hpp). NaN lies outside all of them.
FINITE = VALUE_RANGES["finite"]  # not inf
UNIT = VALUE_RANGES["unit"]  # [0, 1]: a decay
POSITIVE = VALUE_RANGES["positive"]  # finite and > 0: a threshold

# The dtypes the native pass reads (numpy has no bfloat16).
_NATIVE_DTYPES = (torch.float32, torch.float16, torch.float64)


def _outside(t: torch.Tensor, value_range: int) -> bool:
    t = t.detach()
    if value_range == FINITE:
        # A NaN or inf makes the sum non-finite; a huge but finite tensor can overflow
        # it, so a non-finite sum is confirmed by the exact test.
        return not math.isfinite(float(t.sum(dtype=torch.float32))) and not bool(
            torch.isfinite(t).all())
    if value_range == UNIT:
        return not bool(((t >= 0) & (t <= 1)).all())
    return not bool(((t > 0) & torch.isfinite(t)).all())


def first_out_of_range(tensors: Sequence[torch.Tensor], ranges: Sequence[int]) -> int:
    """The index of the first of ``tensors`` with a value outside its range in
    ``ranges`` (``FINITE``, ``UNIT`` or ``POSITIVE``, one per tensor), or -1."""
    if len(ranges) != len(tensors):
        raise ValueError(f"one range per tensor: got {len(ranges)} for {len(tensors)}")
    if all(t.is_cpu and t.dtype in _NATIVE_DTYPES for t in tensors):
        # (imported here: the executor's thread count reads its environment variable,
        # whose error belongs to the first call that runs, not to `import snn_ipu`)
        from .backends.emulator_threads import get_num_threads

        # numpy(force=True): detached; a non-contiguous tensor comes back strided and
        # the native pass takes it made contiguous
        return _C.first_out_of_range([t.numpy(force=True) for t in tensors], list(ranges),
                                     get_num_threads())
    for i, (t, value_range) in enumerate(zip(tensors, ranges)):
        if _outside(t, value_range):
            return i
    return -1


def first_nonfinite(tensors: Sequence[torch.Tensor]) -> int:
    """The index of the first of ``tensors`` holding a NaN or inf, or -1."""
    return first_out_of_range(tensors, [FINITE] * len(tensors))
