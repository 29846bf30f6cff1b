"""Checks of numeric arguments shared by the public modules."""

from __future__ import annotations

import operator
from typing import Optional


def whole_number(value, minimum: int, whole_floats: bool = False) -> Optional[int]:
    """``value`` as an int when it is a whole number >= ``minimum`` (a Python or numpy
    int; with ``whole_floats`` also a float such as 4.0), else None. A bool is never
    one: True would silently mean 1."""
    if isinstance(value, bool):
        return None
    try:
        number = operator.index(value)
    except TypeError:
        if not (whole_floats and isinstance(value, float) and value.is_integer()):
            return None
        number = int(value)
    return number if number >= minimum else None
