"""Memory pre-flight: a layer call's largest buffers against the memory that is free.

A layer whose lists or dense state do not fit would otherwise be ended by the
kernel's OOM killer, with no Python error. These checks raise a MemoryError naming
the size and what to change instead:

* before a call, the buffers whose size is known from the shapes alone
  (:func:`layer_call_bytes`, the formula of docs/reliability.md);
* during an emulator call, the buffers that grow with activity (the tiles' list
  histories) and the ``[T, B, K]`` outputs, against the same budget
  (``popops_ext/host/MemoryBudget.hpp``);
* the emulator's dense buffers of every step that no list bounds, where they are
  made: the dense input path's input and currents, and the backward pass's dL/dI.

"Free" is ``MemAvailable + SwapFree`` from ``/proc/meminfo`` (the pages the kernel
can hand out without killing anything), read at most once a second.
"""

from __future__ import annotations

import os
import time
from typing import Optional

__all__ = ["available_bytes", "layer_call_bytes", "require"]

_READ_EVERY_SECONDS = 1.0
_last_read = (-_READ_EVERY_SECONDS, None)


def _read_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        kib = int(fields["MemAvailable"].split()[0]) + int(
            fields.get("SwapFree", "0 kB").split()[0])
        return kib * 1024
    except (OSError, KeyError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def available_bytes() -> Optional[int]:
    """Bytes the process can still allocate without the OOM killer stepping in, or
    None where the platform does not say."""
    global _last_read
    now = time.monotonic()
    if now - _last_read[0] >= _READ_EVERY_SECONDS:
        _last_read = (now, _read_available())
    return _last_read[1]


def layer_call_bytes(
    steps: int, batch: int, out_features: int, capacity: Optional[int], lists_everyone: bool,
    dense_state: int,
) -> int:
    """The bytes a spiking or readout layer's forward pass allocates whatever its
    activity: every neuron-step listed (8 bytes in the tiles' histories, 12 in the
    output list: id, membrane, value) where every neuron is listed (exact gradients
    in training), else a ``[T, B, K]`` output of ``capacity`` entries (12 bytes each);
    ``dense_state`` float32 ``[T, B, out]`` arrays (a kept membrane and synaptic
    history: 0, 1 or 2). The dense input path's buffers, whose use depends on the
    input's density, are checked where they are made (the emulator's ``_dense_input``)."""
    neuron_steps = steps * batch * out_features
    if lists_everyone:
        lists = neuron_steps * (8 + 12)
    else:
        lists = steps * batch * (capacity or 0) * 12
    return lists + neuron_steps * 4 * dense_state


def require(where: str, needed: int, advice: str) -> None:
    """Raises MemoryError when ``needed`` bytes are more than is free."""
    free = available_bytes()
    if free is not None and needed > free:
        raise MemoryError(
            f"{where}: this call needs at least {gib(needed)} of memory, more than the "
            f"{gib(free)} free; {advice}"
        )


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
