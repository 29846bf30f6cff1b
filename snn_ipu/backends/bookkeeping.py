"""Per-layer statistics and overflow reporting shared by the backends."""

from __future__ import annotations

from ..spikes import Overflow, raise_or_warn_overflow


def apply_overflow(layer, capacity: int, overflow: Overflow) -> None:
    """Raises, warns once, or records, as the layer's overflow policy says."""
    raise_or_warn_overflow(
        layer.name, capacity, overflow, layer.overflow, warn=not layer.overflow_warned,
        note=" (warned once per layer; see the layer's stats for running totals)",
    )
    if overflow.first is not None and layer.overflow == "drop":
        layer.overflow_warned = True


def record_stats(
    layer,
    backend: str,
    num_steps: int,
    batch_size: int,
    total_spikes: int,
    capacity: int,
    needed_capacity: int,
    overflow: Overflow,
    eligible: int,
    **extra,
) -> None:
    """Updates ``layer.stats``: activity of this call and running drop counters.
    ``eligible``: the emitted list's eligible-only entries (the backward pass costs
    O(spikes + eligible))."""
    prev = layer.stats
    neuron_steps = max(1, num_steps * batch_size * layer.out_features)
    layer.stats = {
        "backend": backend,
        "activity": total_spikes / neuron_steps,
        "eligible_activity": eligible / neuron_steps,
        "spikes": total_spikes,
        "capacity": capacity,
        "needed_capacity": needed_capacity,
        "grew": layer.max_spikes is not None and capacity > layer.max_spikes,
        "spikes_dropped": overflow.spikes_dropped,
        "eligible_dropped": overflow.eligible_dropped,
        "total_spikes_dropped": prev.get("total_spikes_dropped", 0) + overflow.spikes_dropped,
        "total_eligible_dropped": prev.get("total_eligible_dropped", 0)
        + overflow.eligible_dropped,
        **extra,
    }
