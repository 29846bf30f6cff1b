"""Whether tensors hold a NaN or inf, the check a layer runs on its parameters on
every call: on the CPU all of them in one native pass over their bits, elsewhere one
torch sum per tensor (a NaN or inf makes the sum non-finite), confirmed by an exact
test since a huge but finite tensor can overflow the sum."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ._native import _C

__all__ = ["first_nonfinite"]

# The dtypes the native pass reads (numpy has no bfloat16).
_NATIVE_DTYPES = (torch.float32, torch.float16, torch.float64)


def first_nonfinite(tensors: Sequence[torch.Tensor]) -> int:
    """The index of the first of ``tensors`` holding a NaN or inf, or -1."""
    if all(t.device.type == "cpu" and t.dtype in _NATIVE_DTYPES for t in tensors):
        # numpy(force=True): detached; a non-contiguous tensor comes back strided and
        # the native pass takes it made contiguous
        return _C.first_nonfinite([t.numpy(force=True) for t in tensors])
    for i, t in enumerate(tensors):
        t = t.detach()
        if not math.isfinite(float(t.sum(dtype=torch.float32))) and not bool(
            torch.isfinite(t).all()
        ):
            return i
    return -1
