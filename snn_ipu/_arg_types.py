"""argparse ``type=`` checks shared by the command lines (``snn-ipu train/eval/plot/plan``
and ``snn-ipu bench``): each names the bound the text broke."""

from __future__ import annotations

import argparse
import math
from typing import Callable, Optional


def at_least(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An integer >= ``low`` (and <= ``high``, when given)."""
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {text}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {text}")
        return value

    return parse


def number(low: float, inclusive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= low if inclusive else value > low)):
            bound = f">= {low}" if inclusive else f"> {low}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text}")
        return value

    return parse


positive = number(0.0, inclusive=False)
non_negative = number(0.0, inclusive=True)


def decay(text: str) -> float:
    """A number in [0, 1]."""
    value = non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return value


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {text}")
    return value


class RateAndStrength(argparse.Action):
    """``RATE STRENGTH`` of a rate penalty (each ``type=non_negative``): the rate is in
    spikes per step, which a neuron can exceed only by a rate in the wrong unit (Hz)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .regularizers import _rate  # (torch, imported only where the option is given)

        rate, strength = values
        try:
            _rate("RATE", rate)
        except ValueError as exc:
            parser.error(f"argument {option_string}: {exc}")
        setattr(namespace, self.dest, [rate, strength])
