"""Training checkpoints: written atomically, read back with their random states.

A checkpoint is one ``torch.save`` file holding a dict: ``format`` and ``version``,
the ``config`` that built the model and its data, the ``model`` and ``optimizer``
state dicts, the number of the last finished ``epoch``, the per-epoch ``metrics``,
and ``rng`` (the states of torch's, numpy's and Python's global generators). The
data order of an epoch is a pure function of the seed and the epoch number, so
resuming after epoch ``e`` replays epochs ``e+1, ...`` exactly.

Writes go to a temporary file in the same folder, which is flushed to disk and then
renamed over the target: a process killed mid-write leaves the previous checkpoint
whole (a rename within one file system is atomic).
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any, Dict, Union

import numpy as np
import torch

__all__ = ["save_checkpoint", "load_checkpoint", "rng_state", "set_rng_state",
           "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION"]

CHECKPOINT_FORMAT = "snn_ipu.checkpoint"
CHECKPOINT_VERSION = 1

PathLike = Union[str, os.PathLike]


def rng_state() -> Dict[str, Any]:
    """The global random generators' states (torch CPU, numpy, Python)."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(path: PathLike, payload: Dict[str, Any]) -> Path:
    """Writes ``payload`` (plus format and version) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **payload}
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        # the old checkpoint is untouched; leave no half-written file behind
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path


def load_checkpoint(path: PathLike) -> Dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint` (on the CPU)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    # weights_only=False: the file holds numpy and Python RNG states besides tensors;
    # load only checkpoints you trust, as with any pickle.
    data = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an snn_ipu checkpoint")
    if data.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {data.get('version')} is not "
                         f"{CHECKPOINT_VERSION}, which this snn_ipu reads")
    return data
