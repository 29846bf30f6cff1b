"""The files a command reads and writes: checked before any work, and locked while a run
writes them.

* :func:`output_folder`: a folder to write into (``plot --out``, ``bench --out``), not a
  file of that name.
* :func:`writable_file`: a file a run will write (a checkpoint, a metrics log), checked
  before training, so that a bad path does not lose the first epoch's work.
* :func:`distinct_files`: no two of a command's paths name the same file (by resolved
  path, and by inode for files that exist: a hard or symbolic link counts), so that a
  metrics log never overwrites the checkpoint being resumed.
* :class:`FileLocks`: an exclusive ``fcntl`` lock on each written file, held for the
  whole run, so that a second run writing the same checkpoint or log is refused instead
  of interleaving with the first. The lock is a hidden file beside the target
  (``.NAME.lock``), removed when the run ends.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

__all__ = ["FileInUseError", "FileLocks", "distinct_files", "is_locked_by_us", "lock_path",
           "output_folder", "writable_file"]

PathLike = Union[str, os.PathLike]


class FileInUseError(ValueError):
    """Another process holds the lock of a file this run would write."""


def output_folder(path: PathLike, what: str) -> Path:
    """``path`` as a folder to write into, created if missing; a ValueError naming
    ``what`` when it is a file (or lies under one)."""
    path = Path(path)
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ValueError(f"{what} {path}: {folder} is a file, not a folder")
            break
    path.mkdir(parents=True, exist_ok=True)
    return path


def writable_file(path: PathLike, what: str) -> Path:
    """Checks that ``path`` can be written as a file (its folder is created): not a
    folder, its folder not a file, the folder writable. Writes nothing but the folder."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; name a file (e.g. {path / 'model.pt'})")
    output_folder(path.parent, f"{what} {path}:")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path} is not writable")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: cannot write into the folder {path.parent}")
    return path


def _identity(path: Path) -> Tuple:
    """What makes two paths the same file: the inode when it exists, else the resolved
    path (a file about to be created)."""
    try:
        st = path.stat()
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", str(path.resolve()))


def _keys(path: Path) -> set:
    """Keys that two paths naming one file share: the inode (or the resolved path of a
    file about to be created) and the resolved path."""
    return {_identity(path), ("path", str(path.resolve()))}


def distinct_files(named: Sequence[Tuple[str, Optional[PathLike]]],
                   allowed: Iterable[Tuple[str, str]] = ()) -> None:
    """A ValueError when two of ``named`` (``(option, path)``; None skipped) name one
    file, unless the pair of options is ``allowed`` (e.g. resuming a checkpoint in
    place: ``("--resume", "--save")``)."""
    allowed = {frozenset(pair) for pair in allowed}
    seen: Dict[Tuple, Tuple[str, Path]] = {}
    for option, path in named:
        if path is None:
            continue
        path = Path(path)
        keys = _keys(path)
        for key in keys:
            if key in seen:
                other, other_path = seen[key]
                if frozenset((other, option)) not in allowed:
                    raise ValueError(
                        f"{other} {other_path} and {option} {path} are the same file; "
                        f"{option} would overwrite it: give it a path of its own"
                    )
        for key in keys:
            seen.setdefault(key, (option, path))


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name one file (an existing one by its inode)."""
    return bool(_keys(Path(a)) & _keys(Path(b)))


def refuse_replacing(named: Sequence[Tuple[str, Optional[PathLike]]], advice: str) -> None:
    """A ValueError for the first of ``named`` (``(option, path)``; None skipped) that
    exists already: a run would replace another run's file."""
    for option, path in named:
        if path is not None and Path(path).exists():
            raise ValueError(f"{option} {path} exists (another run's?): this run would replace "
                             f"it; {advice}")


def lock_path(path: PathLike) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


# resolved target path -> the open lock file of this process
_held: Dict[str, int] = {}


def is_locked_by_us(path: PathLike) -> bool:
    return str(Path(path).resolve()) in _held


def _acquire(target: Path) -> int:
    import fcntl

    lock = lock_path(target)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise FileInUseError(
                    f"{target} is being written by another run (process {holder or '?'}, "
                    f"lock {lock}); wait for it to end, or give this run another path"
                ) from None
            raise
        # the holder before us may have removed the lock file after we opened it: then
        # our lock is on a file nobody else will see; take the one at the path instead
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            return fd
        os.close(fd)


class FileLocks:
    """``with FileLocks(paths):`` holds an exclusive lock on each path (None skipped;
    one the process already holds is not taken twice)."""

    def __init__(self, paths: Iterable[Optional[PathLike]]) -> None:
        self.targets = []
        for p in paths:
            if p is not None and str(Path(p).resolve()) not in self.targets:
                self.targets.append(str(Path(p).resolve()))
        self._taken = []

    def __enter__(self) -> FileLocks:
        try:
            for target in self.targets:
                if target in _held:
                    continue
                _held[target] = _acquire(Path(target))
                self._taken.append(target)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for target in reversed(self._taken):
            fd = _held.pop(target)
            try:
                os.unlink(lock_path(target))  # still ours: nobody else holds it
            except FileNotFoundError:
                pass
            os.close(fd)
        self._taken = []
