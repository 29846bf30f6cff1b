"""Event streams (tonic's structured arrays, SHD's ``times``/``units`` pairs) binned
straight into spike lists, without the dense ``[T, B, N]`` tensor.

Time is cut into bins of width ``dt`` starting at ``t_start``: bin ``i`` holds the
events with ``t_start + i*dt <= t < t_start + (i+1)*dt`` (the edges are computed as
``t_start + i*dt``, as tonic's ``ToFrame(time_window=dt)`` draws them). A neuron with
several events in one bin spikes once in it: spikes are binary, so the extra events of
a bin are merged, never counted (``SparseSpikes.values`` stays 0/1).

Times are in whatever unit the events use (tonic: microseconds; SHD: seconds); ``dt``,
``duration`` and ``t_start`` are in the same unit.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ._memory import require
from ._numbers import MAX_SIZE, whole_number
from .lists import _lists_from_entries
from .overflow import check_overflow_policy, raise_or_warn_overflow
from .spikes import SparseSpikes, capacity_or_none

__all__ = ["events_to_spikes", "flat_neuron_ids", "OUTSIDE_POLICIES"]

OUTSIDE_POLICIES = ("error", "drop")

# One sample: a structured array with fields t, x (, y) (, p), or a (times, units) pair.
Sample = Union[np.ndarray, Tuple[Sequence[float], Sequence[int]]]


def _sensor(sensor_size) -> Tuple[int, int, int]:
    """tonic's ``sensor_size`` (W, H, P) as three positive ints."""
    if sensor_size is None or len(sensor_size) not in (1, 2, 3):
        raise ValueError(
            f"sensor_size must be tonic's (width, height, polarities), got {sensor_size!r}"
        )
    sizes = tuple(sensor_size) + (1,) * (3 - len(sensor_size))
    checked = tuple(whole_number(s, 1) for s in sizes)
    if None in checked:
        raise ValueError(f"sensor_size must hold positive integers, got {sensor_size!r}")
    return checked  # type: ignore[return-value]


def flat_neuron_ids(events: np.ndarray, sensor_size, where: str = "events") -> np.ndarray:
    """The input neuron of each event of a tonic-style structured array: the sensor
    ``(W, H, P)`` flattened in the order of tonic's frames ``[P, H, W]``,
    ``id = (p * H + y) * W + x``. A single-polarity sensor (``P == 1``) takes any one
    polarity value, as tonic's ``ToFrame`` does (its SHD events carry ``p = 1``)."""
    width, height, polarities = _sensor(sensor_size)
    names = events.dtype.names or ()
    if "x" not in names:
        raise ValueError(f"{where}: a structured event array needs an 'x' field, has {names}")
    x = _integer_field(events["x"], "x", width, where)
    y = np.zeros_like(x)
    if "y" in names:
        y = _integer_field(events["y"], "y", height, where)
    elif height != 1:
        raise ValueError(f"{where}: sensor_size has height {height} but the events have no 'y'")
    p = np.zeros_like(x)
    if "p" in names:
        raw = np.asarray(events["p"])
        if polarities == 1:
            if np.unique(raw).size > 1:
                raise ValueError(
                    f"{where}: sensor_size has one polarity but the events hold "
                    f"{np.unique(raw).size} (pass sensor_size with 2 polarities)"
                )
        else:
            p = _integer_field(raw, "p", polarities, where)
    elif polarities != 1:
        raise ValueError(
            f"{where}: sensor_size has {polarities} polarities but the events have no 'p'"
        )
    return (p * height + y) * width + x


def _integer_field(values, name: str, size: int, where: str) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype == np.bool_:
        values = values.astype(np.int64)
    if not np.issubdtype(values.dtype, np.integer):
        if not np.issubdtype(values.dtype, np.floating) or not np.all(
                np.isfinite(values) & (values == np.floor(values))):
            raise ValueError(f"{where}: field {name!r} must hold whole numbers, got {values.dtype}")
    values = values.astype(np.int64)
    if values.size and (values.min() < 0 or values.max() >= size):
        raise ValueError(
            f"{where}: {name} = {int(values.min() if values.min() < 0 else values.max())} "
            f"outside the sensor's [0, {size})"
        )
    return values


def _times_and_ids(sample, num_neurons: Optional[int], sensor_size, where: str):
    """(times float64 [E], neuron ids int64 [E]) of one sample."""
    if isinstance(sample, np.ndarray) and sample.dtype.names is not None:
        if "t" not in sample.dtype.names:
            raise ValueError(f"{where}: a structured event array needs a 't' field, has "
                             f"{sample.dtype.names}")
        if sensor_size is None:
            raise ValueError(f"{where}: structured (tonic) events need sensor_size=(W, H, P)")
        times = np.asarray(sample["t"], dtype=np.float64)
        return times, flat_neuron_ids(sample, sensor_size, where)
    if isinstance(sample, (tuple, list)) and len(sample) == 2:
        times, units = (np.asarray(a) for a in sample)
        if times.ndim != 1 or units.ndim != 1 or times.shape != units.shape:
            raise ValueError(
                f"{where}: times and units must be 1-d arrays of one length, got shapes "
                f"{times.shape} and {units.shape}"
            )
        if times.size and not (np.issubdtype(times.dtype, np.floating)
                               or np.issubdtype(times.dtype, np.integer)):
            raise ValueError(f"{where}: times must be numbers, got {times.dtype}")
        ids = _integer_field(units, "units", num_neurons, where)
        return times.astype(np.float64), ids
    raise TypeError(
        f"{where}: a sample must be a structured event array (fields t, x, y, p) or a "
        f"(times, units) pair, got {type(sample).__name__}"
    )


def _num_steps_of(dt: float, duration: float) -> int:
    """Bins of width dt that cover duration (a ratio a rounding step above a whole
    number counts as that number: 0.7 / 0.07 is 10.000000000000002)."""
    ratio = duration / dt
    _check_steps(ratio, f"duration={duration} with dt={dt}")
    nearest = round(ratio)
    if nearest >= 1 and math.isclose(ratio, nearest, rel_tol=1e-9):
        return int(nearest)
    return max(1, math.ceil(ratio))


def _positive(name: str, value) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def events_to_spikes(
    events: Union[Sample, Sequence[Sample]],
    num_neurons: Optional[int] = None,
    *,
    sensor_size=None,
    num_steps: Optional[int] = None,
    dt: Optional[float] = None,
    duration: Optional[float] = None,
    t_start: Union[float, str] = 0.0,
    max_spikes: Optional[int] = None,
    overflow: str = "error",
    outside: str = "error",
) -> SparseSpikes:
    """Bins a batch of event streams into time-major ``SparseSpikes [T, B, K]``.

    Args:
        events: one sample or a sequence of samples (the batch, of any lengths). A
            sample is tonic's structured array (fields ``t``, ``x``, optionally ``y``
            and ``p``; needs ``sensor_size``) or a ``(times, units)`` pair (SHD).
        num_neurons: input neurons; for tonic events ``W * H * P`` of ``sensor_size``
            (given or not).
        sensor_size: tonic's ``(W, H, P)``; neuron ``(p * H + y) * W + x``.
        num_steps, dt, duration: the time grid; give ``dt`` or ``duration`` (with
            ``num_steps``, or both). ``dt`` alone makes as many steps as the latest
            event of the batch needs (then ``T`` varies between batches; the IPU
            needs a fixed ``num_steps``).
        t_start: time of the start of bin 0, or ``"first"``: each sample's own first
            event (tonic's ``ToFrame`` starts its frames there; docs/data.md,
            "Matching tonic's ToFrame").
        max_spikes, overflow: list capacity and its policy, as in
            :meth:`SparseSpikes.from_dense`.
        outside: events before ``t_start`` or at/after the end of the last bin:
            ``"error"`` (default) or ``"drop"`` (their number is the list's
            ``events_outside``).

    Several events of one neuron in one bin make one spike.
    """
    check_overflow_policy(overflow)
    if outside not in OUTSIDE_POLICIES:
        raise ValueError(f"outside must be one of {OUTSIDE_POLICIES}, got {outside!r}")
    capacity = capacity_or_none(max_spikes)
    if sensor_size is not None:
        width, height, polarities = _sensor(sensor_size)
        sensor_neurons = width * height * polarities
        if num_neurons is not None and whole_number(num_neurons, 1) != sensor_neurons:
            raise ValueError(
                f"num_neurons={num_neurons!r} disagrees with sensor_size {tuple(sensor_size)} "
                f"({sensor_neurons} neurons)"
            )
        num_neurons = sensor_neurons
    if num_neurons is None or whole_number(num_neurons, 1) is None:
        raise ValueError(f"num_neurons must be a positive integer, got {num_neurons!r}")
    num_neurons = whole_number(num_neurons, 1)
    samples = _as_batch(events)
    dt, duration = _positive("dt", dt), _positive("duration", duration)
    if num_steps is not None:
        num_steps = whole_number(num_steps, 1)
        if num_steps is None:
            raise ValueError("num_steps must be a positive integer")
    from_first = isinstance(t_start, str) and t_start == "first"
    if from_first:
        t_start = 0.0
    elif isinstance(t_start, (bool, np.bool_)) or not isinstance(
            t_start, (int, float, np.number)) or not math.isfinite(t_start):
        raise ValueError(f"t_start must be a finite number or 'first', got {t_start!r}")

    per_sample = [_times_and_ids(s, num_neurons, sensor_size, f"sample {b}")
                  for b, s in enumerate(samples)]
    for b, (times, _) in enumerate(per_sample):
        if times.size and not np.all(np.isfinite(times)):
            raise ValueError(f"sample {b}: event times contain NaN or inf")
    if from_first:  # each sample's grid starts at its own first event
        per_sample = [(t - t.min() if t.size else t, ids) for t, ids in per_sample]

    if dt is None and duration is None:
        raise ValueError("give the time grid: dt, or duration (with num_steps), in the "
                         "unit of the event times")
    if dt is None:
        if num_steps is None:
            raise ValueError("duration needs num_steps (or give dt)")
        dt = duration / num_steps
    elif duration is not None:
        steps = _num_steps_of(dt, duration)
        if num_steps is not None and num_steps != steps:
            raise ValueError(f"num_steps={num_steps} disagrees with duration/dt = "
                             f"{duration}/{dt} ({steps} bins)")
        num_steps = steps
    elif num_steps is None:
        latest = max((float(t.max()) for t, _ in per_sample if t.size), default=t_start)
        steps = (latest - t_start) / dt
        _check_steps(steps, f"the latest event (t={latest}) with dt={dt} from t_start={t_start}")
        num_steps = max(1, int(math.floor(steps)) + 1)
        while t_start + num_steps * dt <= latest:  # the edges as the binning draws them
            num_steps += 1
    _check_steps(num_steps, "the time grid")
    num_events = sum(int(t.size) for t, _ in per_sample)
    _require_memory(num_steps, len(per_sample), num_events)
    edges = t_start + np.arange(num_steps + 1, dtype=np.float64) * dt
    if duration is not None:
        # the grid is [t_start, t_start + duration), however num_steps * dt rounds: one
        # ulp short (duration=2.9 in 9 steps) or past it (0.3 in steps of 0.1 took an
        # event at t=0.3, which the same grid given as 3 steps left out)
        edges[-1] = t_start + duration

    batch = len(per_sample)
    keys, dropped_outside = [], 0
    for b, (times, ids) in enumerate(per_sample):
        steps = np.searchsorted(edges, times, side="right") - 1
        inside = (steps >= 0) & (steps < num_steps)
        if not inside.all():
            if outside == "error":
                first = times[~inside][0]
                raise ValueError(
                    f"sample {b}: {int((~inside).sum())} events outside the time grid "
                    f"[{t_start}, {edges[-1]}) (first at t={first}); lengthen the grid "
                    "(duration, num_steps or t_start) or pass outside='drop'"
                )
            dropped_outside += int((~inside).sum())
            steps, ids = steps[inside], ids[inside]
        keys.append((steps * batch + b) * num_neurons + ids)
    # unique: sorted by (t, b, neuron), each neuron once per bin
    flat = np.unique(np.concatenate(keys)) if keys else np.zeros(0, np.int64)
    rows = torch.from_numpy(flat // num_neurons)
    neurons = torch.from_numpy(flat % num_neurons)
    ids, counts, ovf = _lists_from_entries(num_steps, batch, (rows, neurons), None, capacity,
                                           overflow)
    raise_or_warn_overflow("SparseSpikes.from_events", ids.shape[-1], ovf, overflow)
    out = SparseSpikes._made(ids, counts, num_neurons)  # one entry per (bin, neuron)
    out.dropped = ovf.spikes_dropped
    out.events_outside = dropped_outside
    out.dt = dt
    return out


def _check_steps(steps: float, what: str) -> None:
    """Time grids reach the layers as int32 step counts: a longer one (an event time
    in another unit, a garbage float such as 1e25) is refused before anything is
    allocated."""
    if not steps < MAX_SIZE:
        raise ValueError(
            f"{what} needs {steps:.4g} time steps, more than the 2**31 - 1 a list can hold; "
            "check the unit of the event times (tonic: microseconds; SHD: seconds) and of "
            "dt/duration, or give num_steps and outside='drop'"
        )


def _require_memory(num_steps: int, batch: int, num_events: int) -> None:
    """Memory pre-flight of the binning (as the layers' own, snn_ipu._memory): the bin
    edges (8 bytes a step); each event's key through np.unique and its row and neuron
    (48 bytes); and per (step, sample) the row counts and the int32 counts [T, B, 2]
    (48 bytes) and at least one list entry (id, value and mask: 16 bytes)."""
    needed = 8 * (num_steps + 1) + 48 * num_events + 64 * num_steps * batch
    require("SparseSpikes.from_events", needed,
            f"{num_steps} steps of {batch} samples; use a coarser dt, a shorter duration or "
            "fewer samples per batch")


def _as_batch(events) -> list:
    """A sequence of samples, whether ``events`` is one sample or a batch."""
    if isinstance(events, np.ndarray) and events.dtype.names is not None:
        return [events]
    if isinstance(events, tuple) and len(events) == 2 and all(
            isinstance(a, np.ndarray) and a.dtype.names is None and a.ndim == 1
            for a in events):
        return [events]  # one (times, units) pair
    if isinstance(events, tuple) and len(events) == 2 and all(
            isinstance(a, (list, tuple)) and a and all(np.isscalar(v) for v in a)
            for a in events):
        # a batch's samples are event arrays or pairs, never numbers: read as a batch,
        # this pair failed with "times and units must be 1-d arrays ... got shapes ()"
        raise TypeError(
            "events: a (times, units) pair of Python lists reads as a batch of two "
            "samples; pass one sample's times and units as numpy arrays "
            "(np.asarray(times), np.asarray(units)), or a batch as a list of such pairs"
        )
    if isinstance(events, (list, tuple)):
        if not events:
            raise ValueError("events: the batch is empty (no samples)")
        return list(events)
    raise TypeError(
        "events must be a structured event array, a (times, units) pair, or a list of "
        f"them, got {type(events).__name__}"
    )
