"""Collate functions for ``torch.utils.data.DataLoader`` that give time-major batches.

A DataLoader's default collate stacks samples batch-first (``[B, T, N]``), while every
layer takes time-major input (``[T, B, N]``). These give ``(SparseSpikes [T, B, K],
labels [B])`` instead::

    loader = DataLoader(SHD(root), batch_size=64, shuffle=True,
                        collate_fn=EventCollate(700, num_steps=100, duration=1.4))
    for spikes, labels in loader:
        out = model(spikes)
"""

from __future__ import annotations

import numbers
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from ..events import events_to_spikes
from ..spikes import SparseSpikes

__all__ = ["EventCollate", "SpikeLists", "busiest_step", "collate_dense", "collate_labels"]


def _class_index(y) -> int:
    """A label as an int: an integer, or a float holding a whole number (``int()`` would
    truncate 2.7 to class 2); bools are refused."""
    if isinstance(y, torch.Tensor) and y.numel() == 1 or (
            isinstance(y, (np.ndarray, np.generic)) and y.size == 1):
        y = y.item()
    if isinstance(y, numbers.Integral) and not isinstance(y, bool):
        return int(y)
    if isinstance(y, numbers.Real) and not isinstance(y, bool) and float(y).is_integer():
        return int(y)
    raise TypeError(f"labels must be integer class indices, got {y!r}")


def collate_labels(labels: Sequence) -> torch.Tensor:
    """int64 ``[B]`` from a batch's labels (ints, numpy or 0-d tensors)."""
    return torch.as_tensor([_class_index(y) for y in labels], dtype=torch.int64)


class EventCollate:
    """Bins each batch of ``(events, label)`` samples into a time-major
    :class:`SparseSpikes` with :func:`snn_ipu.events.events_to_spikes` (same arguments:
    ``num_neurons`` or ``sensor_size``, ``num_steps``/``dt``/``duration``, ``t_start``,
    ``max_spikes``, ``overflow``, ``outside``). With ``outside="drop"`` the number of
    events that fell outside the grid is the list's ``events_outside``.
    """

    def __init__(self, num_neurons: Optional[int] = None, **grid) -> None:
        self.num_neurons = num_neurons
        self.grid = grid
        # the arguments are checked now rather than in a worker process mid-epoch;
        # ``outside`` too (an empty sample has no event outside the grid whatever it is)
        events_to_spikes([_empty_sample(grid)], num_neurons, **grid)

    def __call__(self, batch: Sequence[Tuple[object, object]]) -> Tuple[SparseSpikes, torch.Tensor]:
        if not batch:
            raise ValueError("EventCollate: empty batch")
        events, labels = zip(*batch)
        return events_to_spikes(list(events), self.num_neurons, **self.grid), \
            collate_labels(labels)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.grid.items())
        return f"EventCollate(num_neurons={self.num_neurons!r}, {args})"


def _empty_sample(grid: dict):
    if grid.get("sensor_size") is None:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.zeros(0, dtype=[("t", np.int64), ("x", np.int64), ("y", np.int64),
                              ("p", np.int64)])


def collate_dense(
    batch: Sequence[Tuple[torch.Tensor, object]], max_spikes: Optional[int] = None,
    overflow: str = "error",
) -> Tuple[SparseSpikes, torch.Tensor]:
    """Stacks ``(spikes, label)`` samples of dense 0/1 spikes ``[T, N]`` (time first)
    into a time-major ``SparseSpikes [T, B, K]`` and int64 labels ``[B]``."""
    if not batch:
        raise ValueError("collate_dense: empty batch")
    samples, labels = zip(*batch)
    for i, s in enumerate(samples):
        if not isinstance(s, torch.Tensor) or s.dim() != 2 or s.shape != samples[0].shape:
            raise ValueError(f"collate_dense: sample {i} must be a 2-d tensor [T, N] like "
                             f"sample 0 {tuple(samples[0].shape)}, got "
                             f"{getattr(s, 'shape', type(s).__name__)}")
    stacked = torch.stack(samples, 1)  # [T, B, N]
    return SparseSpikes.from_dense(stacked, max_spikes=max_spikes, overflow=overflow), \
        collate_labels(labels)


class SpikeLists(torch.utils.data.Dataset):
    """A dataset's samples as fixed-capacity spike lists, one sample at a time, for a
    compiled (PopTorch) model whose input shapes are fixed: item ``i`` is
    ``(ids [T, K] int32, counts [T, 2] int32, label)``, batch-first once a DataLoader
    stacks them (``poptorch.DataLoader`` splits every tensor on dim 0), never a dense
    ``[T, N]``.

    ``collate`` is the dataset's own (:class:`EventCollate`, :func:`collate_dense`, a
    Task's ``collate``): it lists each sample. ``capacity`` K: the most spikes of any
    step of any sample, found by one pass over ``datasets`` (default: this one) in
    chunks of ``chunk`` samples, unless given. A sample with more spikes in a step
    raises.
    """

    def __init__(self, dataset, collate, capacity: Optional[int] = None,
                 datasets: Sequence = (), chunk: int = 256) -> None:
        self.dataset, self.collate = dataset, collate
        if capacity is None:
            capacity = max(busiest_step(d, collate, chunk) for d in (dataset, *datasets))
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"SpikeLists: capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        spikes, label = self.collate([self.dataset[i]])
        most = int(spikes.counts[..., 1].max()) if spikes.counts.numel() else 0
        if most > self.capacity:
            raise ValueError(f"SpikeLists: sample {i} has {most} spikes in a step, more than "
                             f"the capacity K={self.capacity}")
        T = spikes.num_steps
        ids = torch.zeros(T, self.capacity, dtype=torch.int32)
        width = min(spikes.capacity, self.capacity)
        ids[:, :width] = spikes.ids[:, 0, :width]
        return ids, spikes.counts[:, 0].contiguous(), label[0]


def busiest_step(dataset, collate, chunk: int = 256) -> int:
    """The most spikes (and eligible entries) that any step of any sample of
    ``dataset`` lists, through its ``collate``: one chunk of samples at a time."""
    most = 0
    for start in range(0, len(dataset), chunk):
        spikes, _ = collate([dataset[i] for i in range(start, min(start + chunk, len(dataset)))])
        if spikes.counts.numel():
            most = max(most, int(spikes.counts[..., 1].max()))
    return max(most, 1)

