"""Any tonic dataset (N-MNIST, DVS Gesture, SHD through tonic, ...) as input to the
layers.

tonic gives each sample as a structured numpy array of events (fields ``t``, ``x``,
optionally ``y``, ``p``; ``t`` in microseconds) and describes the sensor by
``sensor_size = (W, H, P)``. :class:`TonicEvents` flattens that sensor into
``W * H * P`` input neurons, neuron ``(p * H + y) * W + x`` (the order of tonic's
frames ``[P, H, W]``), optionally after pooling:

* ``pool=(kx, ky)``: each block of ``kx x ky`` pixels becomes one input neuron, which
  spikes in a bin when any of its pixels has an event there (a max-pool of the binary
  frames; DVS Gesture's 128x128x2 with ``pool=(4, 4)`` is 32x32x2 = 2048 inputs).
  Sensor sides that are not multiples of the block get a last, partial block.
* ``merge_polarity=True``: ON and OFF events drive the same neuron (``P`` becomes 1).

The events keep their times; binning into steps happens in the collate function
(:class:`~snn_ipu.data.EventCollate` with ``sensor_size=adapter.sensor_size``), so
the same adapter serves any time grid.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np
import torch.utils.data

from .._numbers import flag, whole_number
from ..events import flat_neuron_ids

__all__ = ["TonicEvents"]


class TonicEvents(torch.utils.data.Dataset):
    """Wraps a tonic dataset (or anything indexable giving ``(events, target)`` with a
    ``sensor_size``): ``adapter[i]`` is ``(events, label)`` with the events mapped onto
    the pooled sensor ``adapter.sensor_size`` (fields ``t``, ``x``, ``y``, ``p``).

    :param dataset: the tonic dataset (its transforms, if any, must leave events)
    :param sensor_size: ``(W, H, P)``; default: ``dataset.sensor_size``
    :param pool: ``(kx, ky)`` pixels per input neuron (default: none)
    :param merge_polarity: one neuron for both polarities
    """

    def __init__(
        self,
        dataset,
        sensor_size: Optional[Sequence[int]] = None,
        pool: Optional[Tuple[int, int]] = None,
        merge_polarity: bool = False,
    ) -> None:
        if sensor_size is None:
            sensor_size = getattr(dataset, "sensor_size", None)
            if sensor_size is None:
                raise ValueError(
                    f"{type(dataset).__name__} has no sensor_size; pass sensor_size=(W, H, P)"
                )
        sizes = tuple(sensor_size) + (1,) * (3 - len(tuple(sensor_size)))
        if len(sizes) != 3 or any(whole_number(s, 1) is None for s in sizes):
            raise ValueError(f"sensor_size must be (W, H, P) of positive ints, got {sensor_size!r}")
        self.dataset = dataset
        self.source_size = tuple(int(s) for s in sizes)
        if pool is None:
            pool = (1, 1)
        if len(pool) != 2 or any(whole_number(k, 1) is None for k in pool):
            raise ValueError(f"pool must be (kx, ky) of positive ints, got {pool!r}")
        self.pool = (int(pool[0]), int(pool[1]))
        self.merge_polarity = flag("merge_polarity", merge_polarity)
        width, height, polarities = self.source_size
        self.sensor_size = (
            math.ceil(width / self.pool[0]),
            math.ceil(height / self.pool[1]),
            1 if self.merge_polarity else polarities,
        )

    @property
    def num_inputs(self) -> int:
        w, h, p = self.sensor_size
        return w * h * p

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        events, target = self.dataset[index]
        return self.map_events(events, f"sample {index}"), target

    def map_events(self, events: np.ndarray, where: str = "events") -> np.ndarray:
        """The events on the pooled sensor (checked against the source sensor)."""
        if not isinstance(events, np.ndarray) or events.dtype.names is None:
            raise TypeError(
                f"{where}: expected tonic's structured event array, got "
                f"{type(events).__name__} (a tonic transform such as ToFrame turns events "
                "into frames: leave binning to EventCollate)"
            )
        if "t" not in events.dtype.names:
            raise ValueError(f"{where}: events have no 't' field ({events.dtype.names})")
        # the checks and the flat id on the source sensor, then split it back up
        ids = flat_neuron_ids(events, self.source_size, where)
        width, height, polarities = self.source_size
        x, rest = ids % width, ids // width
        y, p = rest % height, rest // height
        out = np.empty(len(events), dtype=[("t", events.dtype["t"]), ("x", np.int64),
                                            ("y", np.int64), ("p", np.int64)])
        out["t"] = events["t"]
        out["x"] = x // self.pool[0]
        out["y"] = y // self.pool[1]
        out["p"] = 0 if self.merge_polarity or polarities == 1 else p
        return out

    def __repr__(self) -> str:
        return (f"TonicEvents({type(self.dataset).__name__}, sensor {self.source_size} -> "
                f"{self.sensor_size}, pool={self.pool}, merge_polarity={self.merge_polarity})")
