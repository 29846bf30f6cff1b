"""Training checkpoints: written atomically, read back with their random states.

A checkpoint is one ``torch.save`` file holding a dict: ``format`` and ``version``,
the ``config`` that built the model and its data, the ``model`` and ``optimizer``
state dicts, the number of the last finished ``epoch``, the per-epoch ``metrics``,
and ``rng`` (the states of torch's, numpy's and Python's global generators). The
data order of an epoch is a pure function of the seed and the epoch number, so
resuming after epoch ``e`` replays epochs ``e+1, ...`` exactly.

Writes go to a temporary file in the same folder (``.NAME.XXXXXXXX.tmp``), which is
flushed to disk and then renamed over the target: a process killed mid-write leaves
the previous checkpoint whole (a rename within one file system is atomic). A write
holds the checkpoint's lock (:mod:`snn_ipu._paths`; a training run holds it for the
whole run), so the temporary files of a killed writer found beside the target are
leftovers and are removed. The file gets the mode of the checkpoint it replaces, or
for a new one the mode the umask gives (``0666 & ~umask``), as ``open()`` would.

On load the zip archive that ``torch.save`` writes is read whole and every member's
CRC-32 checked, so a damaged or truncated file is refused with a ``ValueError``
instead of loading damaged weights.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterable, Union

import numpy as np
import torch

__all__ = ["save_checkpoint", "save_atomically", "write_atomically", "load_checkpoint",
           "require_entries", "rng_state", "set_rng_state", "CHECKPOINT_FORMAT",
           "CHECKPOINT_VERSION"]

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


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."


def _remove_leftovers(path: Path) -> None:
    """Deletes the temporary files of earlier writes of ``path`` that were killed
    (SIGKILL, power loss): only names of our own pattern, and only while this process
    holds the checkpoint's lock, so no live writer's file is touched."""
    pattern = re.compile(re.escape(_temporary_prefix(path)) + r"[A-Za-z0-9_]{8}\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if pattern.fullmatch(name):
            try:
                if (path.parent / name).is_file():
                    os.unlink(path.parent / name)
            except OSError:
                pass


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask would race other threads)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_checkpoint(path: PathLike, payload: Dict[str, Any]) -> Path:
    """Writes ``payload`` (plus format and version) to ``path`` atomically (module
    docstring: lock, leftovers, mode)."""
    from ._paths import FileLocks, writable_file

    path = writable_file(path, "checkpoint")
    data = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **payload}
    with FileLocks([path]):
        _remove_leftovers(path)
        save_atomically(path, data)
    return path


def save_atomically(path: Path, obj: Any) -> None:
    """``torch.save(obj, path)``, written as :func:`write_atomically` writes."""
    write_atomically(path, lambda f: torch.save(obj, f))


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(f)`` into a temporary file in the same folder, flushed and renamed over
    ``path``: a process killed mid-write leaves the previous file (or none), never a
    truncated one, and a failed write leaves no temporary file. The file gets the mode
    of the one it replaces, or for a new one the umask's (module docstring)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    handle, temporary = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp",
                                         dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), mode)  # mkstemp's 0600 is not the user's choice
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        # the old file is untouched; leave no half-written file behind
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def _check_archive(path: Path) -> None:
    """Reads every member of the zip that torch.save wrote and checks its CRC-32."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError) as exc:
        size = path.stat().st_size
        raise ValueError(f"{path} is not a readable checkpoint ({size} bytes: empty, "
                         f"truncated or not a torch.save file: {exc})") from None
    if bad is not None:
        raise ValueError(f"{path} is damaged: {bad} fails its CRC check (the file was "
                         "changed after it was written; use another checkpoint)")


def load_checkpoint(path: PathLike) -> Dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint` (on the CPU), after
    checking the archive's CRCs."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    _check_archive(path)
    # weights_only=False: the file holds numpy and Python RNG states besides tensors;
    # load only checkpoints you trust, as with any pickle.
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a damaged pickle raises anything
        raise ValueError(f"{path} is not a readable checkpoint ({type(exc).__name__}: "
                         f"{exc})") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an snn_ipu checkpoint")
    if data.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {data.get('version')} is not "
                         f"{CHECKPOINT_VERSION}, which this snn_ipu reads")
    return data


def require_entries(data: Dict[str, Any], path: PathLike, entries: Iterable[str],
                    purpose: str) -> None:
    """A ValueError naming what ``data`` lacks for ``purpose`` (e.g. resuming needs the
    optimizer's state)."""
    missing = [name for name in entries if name not in data]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)}: it cannot be used to "
                         f"{purpose}")
