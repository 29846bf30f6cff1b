"""How many threads the emulator's executor runs on.

The executor runs on torch's own OpenMP thread team (one team for both, instead
of two competing for the cores), by default with as many threads as torch
(``torch.get_num_threads()``); ``SNN_IPU_NUM_THREADS`` (read at import) or
:func:`set_num_threads` override that. Results never depend on it: the tiles and
sample groups, which fix the order of every sum, are planned from the machine's
CPU count (``work_split.planning_threads``).
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import torch

__all__ = ["THREADS_ENV", "get_num_threads", "set_num_threads", "threads_for"]

THREADS_ENV = "SNN_IPU_NUM_THREADS"


def _available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _warn_if_oversubscribed(n: int, what: str) -> None:
    cores = _available_cores()
    if n > cores:
        warnings.warn(
            f"{what}={n} is more than the {cores} cores this process may use: the executor's "
            "threads then wait for each other at every join, which can make a step many "
            "times slower", RuntimeWarning, stacklevel=3,
        )


def _threads_from_environment() -> Optional[int]:
    text = os.environ.get(THREADS_ENV)
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer, got {text!r}")
    _warn_if_oversubscribed(n, THREADS_ENV)
    return n


# None: as many threads as torch's intra-op pool (torch.get_num_threads()), whose
# OpenMP team the executor runs on.
_requested_threads: Optional[int] = _threads_from_environment()
# OpenMP (libgomp) cannot start a thread team in a process forked after its parent
# used one: a forked DataLoader worker would wait forever. The child runs on one
# thread, as torch's own ops do there.
_in_forked_child = False


def _note_fork() -> None:
    global _in_forked_child
    _in_forked_child = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)


def set_num_threads(n: int) -> None:
    """Worker threads of the host executor (results do not depend on it). By default
    it uses as many as torch (``torch.get_num_threads()``); in a process forked after
    its parent ran the executor (a DataLoader worker), one."""
    global _requested_threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"number of threads must be a positive integer, got {n!r}")
    _warn_if_oversubscribed(n, "set_num_threads")
    _requested_threads = n


def get_num_threads() -> int:
    """The executor's threads: set_num_threads's, $SNN_IPU_NUM_THREADS's, or torch's."""
    if _in_forked_child:
        return 1
    return _requested_threads if _requested_threads is not None else torch.get_num_threads()


# Calls with less work than this (steps x samples x width) run on one thread: a
# fork/join of the thread team costs more than it saves there, and on a loaded machine
# a descheduled worker would stall every such call for a whole scheduler time slice.
MIN_PARALLEL_WORK = 1 << 16


def threads_for(steps: int, batch: int, width: int) -> int:
    """The threads of a layer call whose rows are ``width`` values wide: its neurons,
    or the K of a [T, B, K] array it writes whole where that is wider."""
    return get_num_threads() if steps * batch * width >= MIN_PARALLEL_WORK else 1


