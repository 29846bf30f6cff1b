"""The integer codes of neuron models, resets, surrogates, overflow policies and the
value ranges a layer checks, by name: taken from the extension
(``codelets/Codes.hpp`` is their only definition)."""

from __future__ import annotations

from typing import Dict

from ._native import _C

__all__ = ["MODELS", "OVERFLOWS", "RESETS", "SURROGATES", "VALUE_RANGES"]

MODELS: Dict[str, int] = dict(_C.codes["models"])
RESETS: Dict[str, int] = dict(_C.codes["resets"])
SURROGATES: Dict[str, int] = dict(_C.codes["surrogates"])
OVERFLOWS: Dict[str, int] = dict(_C.codes["overflow_policies"])
VALUE_RANGES: Dict[str, int] = dict(_C.codes["value_ranges"])
