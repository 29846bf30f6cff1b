"""Spike-list overflow: more entries than a list's capacity, and what a policy does.

A list holds, per (t, b), the spikes and then the gradient-eligible neurons, up to its
capacity K. More is an overflow, never silent: ``"error"`` raises, ``"drop"`` keeps the
first K entries (spikes first, lowest ids first) and warns, ``"grow"`` (not on the IPU
backends) raises the capacity to fit.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple, Optional, Tuple

from ._codes import OVERFLOWS

__all__ = ["OVERFLOW_POLICIES", "Overflow", "SpikeOverflowError", "check_overflow_policy",
           "raise_or_warn_overflow", "warn_if_export_loses_drops"]

OVERFLOW_POLICIES = tuple(OVERFLOWS)  # "error", "drop", "grow"


class SpikeOverflowError(RuntimeError):
    """More entries (spikes, then eligible neurons) than a list's capacity."""


class Overflow(NamedTuple):
    """What did not fit: totals, and the first (t, b) where it happened."""

    spikes_dropped: int
    eligible_dropped: int
    first: Optional[Tuple[int, int, int, int]]  # (t, b, spikes, entries needed)


def check_overflow_policy(policy: str) -> str:
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; choose one of {OVERFLOW_POLICIES}")
    return policy


def raise_or_warn_overflow(
    where: str, capacity: int, overflow: Overflow, policy: str, warn: bool = True,
    note: str = "", stacklevel: int = 3, planned: bool = False,
) -> None:
    """Applies the overflow policy for a list whose entries did not all fit; ``note``
    ends the warning (how often it comes, where the totals are); ``stacklevel`` points
    the warning at the caller's caller (the user's code). ``planned``: the capacity was
    not the user's but the planner's estimate (a layer with ``max_spikes=None`` on a
    backend whose lists have a static size)."""
    if overflow.first is None:
        return
    t, b, spikes, needed = overflow.first
    what = (f"the planner's estimated capacity {capacity} (the layer's max_spikes is None; "
            "the IPU's lists have a static size)" if planned
            else f"spike list capacity max_spikes={capacity}")
    detail = (
        f"{where}: {what} exceeded at timestep {t}, "
        f"sample {b}: {spikes} spikes and {needed - spikes} gradient-eligible neurons "
        f"need {needed} entries"
    )
    if policy == "error":
        raise SpikeOverflowError(detail + (
            f". Set the layer's max_spikes (at least {needed} here: layer.max_spikes = "
            f"{needed}, or max_spikes= in its constructor), or overflow='drop' to discard "
            "the excess." if planned else
            ". Raise max_spikes, use overflow='grow' (not on the IPU backends) or "
            "overflow='drop' to discard the excess."))
    if policy == "drop" and warn:
        warnings.warn(
            detail + f"; dropped {overflow.spikes_dropped} spikes and "
            f"{overflow.eligible_dropped} eligible entries in this call{note}",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


def warn_if_export_loses_drops(layer, where: str, target: str) -> None:
    """Warns where ``layer`` drops what its list cannot hold (``max_spikes`` with
    ``overflow="drop"``) and is exported to ``target``, which has no list capacity: a
    spike the layer drops still resets its neuron but reaches no other layer, and the
    exported network passes every spike on, so the two compute alike only while the
    layer drops nothing."""
    capacity = getattr(layer, "max_spikes", None)
    if capacity is None or getattr(layer, "overflow", None) != "drop":
        return
    dropped = layer.stats.get("total_spikes_dropped", 0)
    warnings.warn(
        f"{where}: {layer.name} has max_spikes={capacity} with overflow='drop', which "
        f"{target} cannot express: the exported network passes on every spike the layer "
        f"drops (it has dropped {dropped} spikes so far), so its outputs differ wherever "
        "the layer would drop",
        UserWarning, stacklevel=3)
