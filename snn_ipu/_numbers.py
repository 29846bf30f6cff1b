"""Checks of numeric and flag arguments shared by the public modules.

Flags and numbers are taken as they are, never coerced: ``bool("no")`` is True and
``float("0.1")`` parses a string, so a misspelt argument would silently change what a
layer does.
"""

from __future__ import annotations

import numbers
import operator
from typing import Optional

import numpy as np
import torch


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError, and a ValueError as the package's
    other argument checks raise (as numpy's AxisError is both a ValueError and an
    IndexError), so either ``except`` catches it."""


# Sizes and counts reach the native code as int32/uint32 and as products of them.
MAX_SIZE = 2**31 - 1


def whole_number(value, minimum: int, whole_floats: bool = False) -> Optional[int]:
    """``value`` as an int when it is a whole number >= ``minimum`` (a Python or numpy
    int; with ``whole_floats`` also a float such as 4.0), else None. A bool is never
    one: True would silently mean 1."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        number = operator.index(value)
    except TypeError:
        if not (whole_floats and isinstance(value, float) and value.is_integer()):
            return None
        number = int(value)
    return number if number >= minimum else None


def positive_size(name: str, value, minimum: int = 1) -> int:
    """A whole number in [minimum, 2**31) (a Python or numpy int)."""
    number = whole_number(value, minimum)
    if number is None or number > MAX_SIZE:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what} (below 2**31), got {value!r}")
    return number


# torch's generators take a seed in [-2**63, 2**64); a run's seed is kept in [0, 2**63)
MAX_SEED = 2**63 - 1


def generator_seed(value: int) -> int:
    """A seed derived from a run's seed (e.g. ``seed * 1_000_003 + epoch``) as torch's
    generators take it: modulo 2**64, the two's complement torch itself applies to a
    negative seed. Values that fitted before keep their generator (and so their runs);
    larger ones wrap instead of raising "Overflow when unpacking" mid-run."""
    return int(value) % 2**64


def flag(name: str, value) -> bool:
    """A bool (Python or numpy), never a truthy stand-in such as ``"no"`` or ``1``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentTypeError(f"{name} must be True or False, got {value!r}")


def real_number(name: str, value) -> float:
    """A real number (Python, numpy or 0-d tensor), not a bool or a string."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_complex \
            and value.dtype != torch.bool:
        return float(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a number, got {value!r}")
    return float(value)
