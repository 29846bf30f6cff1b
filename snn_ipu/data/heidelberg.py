"""The Spiking Heidelberg Digits (SHD) and Spiking Speech Commands (SSC) datasets,
read lazily from their official HDF5 files (Cramer, Stradmann, Schemmel & Zenke
(2022), "The Heidelberg Spiking Data Sets for the Systematic Evaluation of Spiking
Neural Networks", IEEE TNNLS 33(7)).

Nothing is downloaded here: fetch the files from the Zenke lab's dataset page
(``shd_train.h5.gz``, ``shd_test.h5.gz``, ``ssc_{train,valid,test}.h5.gz``),
decompress them (``gunzip``) into one folder and pass it as ``root``. The layout read::

    spikes/times   float (vlen), one array per sample: spike times in seconds
    spikes/units   int (vlen), one array per sample: the channel (0..699) of each spike
    labels         int [N]: the class of each sample
    extra/keys     bytes [C]: the name of each class (e.g. b"english-zero")
    extra/speaker  int [N]: the speaker of each sample
    extra/meta_info/{gender, age, body_height}: per speaker

A sample is ``((times, units), label)``: the event pair that
:meth:`SparseSpikes.from_events` and :class:`EventCollate` bin into spikes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch.utils.data

__all__ = ["HeidelbergDataset", "SHD", "SSC", "NUM_CHANNELS"]

NUM_CHANNELS = 700  # cochlea model channels: the input neurons of both datasets


def _h5py():
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading SHD/SSC needs h5py: pip install 'snn_ipu[data]' (or h5py)"
        ) from exc
    return h5py


class HeidelbergDataset(torch.utils.data.Dataset):
    """One split of SHD or SSC: ``dataset[i]`` is ``((times, units), label)``.

    The file is opened on first access in each process (so a DataLoader's workers
    each open their own handle) and samples are read one at a time: a split is never
    loaded whole. ``labels`` and ``speakers`` are read once, on first use.
    """

    prefix = ""
    splits: Tuple[str, ...] = ()
    num_classes = 0
    num_inputs = NUM_CHANNELS

    def __init__(self, root: Union[str, os.PathLike], split: str = "train") -> None:
        if split not in self.splits:
            raise ValueError(f"{type(self).__name__}: split must be one of {self.splits}, "
                             f"got {split!r}")
        self.split = split
        self.path = Path(root) / f"{self.prefix}_{split}.h5"
        if not self.path.is_file():
            packed = self.path.with_name(self.path.name + ".gz")
            hint = (f"; {packed.name} is there: decompress it first (gunzip {packed})"
                    if packed.is_file() else
                    "; download it from the Zenke lab's Heidelberg spiking datasets page "
                    "and gunzip it into that folder (nothing is downloaded here)")
            raise FileNotFoundError(f"{type(self).__name__}: no {self.path}{hint}")
        self._file = None
        self._pid: Optional[int] = None
        self._labels: Optional[np.ndarray] = None
        self._check_layout()

    # -- file access ------------------------------------------------------------------
    def _handle(self):
        if self._file is None or self._pid != os.getpid():
            try:
                self._file = _h5py().File(self.path, "r")
            except OSError as exc:  # h5py's message does not name the file
                raise OSError(f"{type(self).__name__}: {self.path} is not a readable HDF5 "
                              f"file ({exc}); a download still gzipped or cut short? (the "
                              "files are .h5.gz: gunzip them)") from None
            self._pid = os.getpid()
        return self._file

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_file"] = None  # h5py handles do not pickle; each process opens its own
        return state

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _check_layout(self) -> None:
        f = self._handle()
        where = f"{self.path}"
        for name in ("spikes/times", "spikes/units", "labels"):
            if name not in f:
                raise ValueError(f"{where}: no '{name}' dataset; not an SHD/SSC file in the "
                                 "official layout (spikes/times, spikes/units, labels, extra/...)")
        for name in ("spikes/times", "spikes/units"):
            # a padded [N, L] array would read its padding as events at t=0, unit 0
            if f[name].ndim != 1 or _h5py().check_vlen_dtype(f[name].dtype) is None:
                raise ValueError(
                    f"{where}: '{name}' is a {f[name].ndim}-d {f[name].dtype} array of shape "
                    f"{f[name].shape}, not the official layout's one variable-length array "
                    "per sample; write each sample's events without padding (h5py.vlen_dtype)"
                )
        if f["labels"].ndim != 1:
            raise ValueError(f"{where}: 'labels' has shape {f['labels'].shape}; the official "
                             "layout has one label per sample, shape [N] (reshape it)")
        lengths = {n: len(f[n]) for n in ("spikes/times", "spikes/units", "labels")}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"{where}: datasets of different lengths {lengths}")

    # -- metadata -----------------------------------------------------------------------
    @property
    def labels(self) -> np.ndarray:
        """int64 ``[N]``: every sample's class."""
        if self._labels is None:
            labels = np.asarray(self._handle()["labels"][()])
            if not np.issubdtype(labels.dtype, np.integer):
                raise ValueError(f"{self.path}: labels must be integers, got {labels.dtype}")
            labels = labels.astype(np.int64)
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(f"{self.path}: labels must lie in [0, {self.num_classes}), "
                                 f"got [{labels.min()}, {labels.max()}]")
            self._labels = labels
        return self._labels

    @property
    def classes(self) -> List[str]:
        """Class names from ``extra/keys`` (``label -> name``), or ``"0"``, ``"1"``, ..."""
        f = self._handle()
        if "extra/keys" not in f:
            return [str(c) for c in range(self.num_classes)]
        return [k.decode() if isinstance(k, bytes) else str(k) for k in f["extra/keys"][()]]

    @property
    def speakers(self) -> Optional[np.ndarray]:
        """int64 ``[N]``: every sample's speaker (``extra/speaker``), or None."""
        f = self._handle()
        if "extra/speaker" not in f:
            return None
        return np.asarray(f["extra/speaker"][()]).astype(np.int64)

    def meta_info(self) -> Dict[str, np.ndarray]:
        """``extra/meta_info``'s per-speaker arrays (gender, age, body_height)."""
        f = self._handle()
        if "extra/meta_info" not in f:
            return {}
        group = f["extra/meta_info"]
        return {name: np.asarray(group[name][()]) for name in group}

    # -- samples ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._handle()["labels"])

    def __getitem__(self, index: int) -> Tuple[Tuple[np.ndarray, np.ndarray], int]:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for {n} samples")
        index = index % n
        f = self._handle()
        times = np.asarray(f["spikes/times"][index])
        units = np.asarray(f["spikes/units"][index])
        where = f"{self.path} sample {index}"
        if times.shape != units.shape or times.ndim != 1:
            raise ValueError(f"{where}: times {times.shape} and units {units.shape} differ")
        if not np.issubdtype(units.dtype, np.integer):
            raise ValueError(f"{where}: units must be integers, got {units.dtype}")
        if units.size and (units.min() < 0 or units.max() >= self.num_inputs):
            raise ValueError(f"{where}: units must lie in [0, {self.num_inputs}), got "
                             f"[{units.min()}, {units.max()}]")
        # float16 in the official files; float64 so that binning rounds only once
        times = times.astype(np.float64)
        if times.size and not (np.all(np.isfinite(times)) and times.min() >= 0):
            raise ValueError(f"{where}: spike times must be finite and >= 0")
        return (times, units.astype(np.int64)), int(self.labels[index])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.path.parent)!r}, split={self.split!r})"


class SHD(HeidelbergDataset):
    """Spiking Heidelberg Digits: 20 classes (spoken digits 0-9 in English and German),
    700 input channels; splits ``train`` and ``test`` (``shd_{split}.h5``)."""

    prefix = "shd"
    splits = ("train", "test")
    num_classes = 20


class SSC(HeidelbergDataset):
    """Spiking Speech Commands: 35 classes, 700 input channels; splits ``train``,
    ``valid`` and ``test`` (``ssc_{split}.h5``)."""

    prefix = "ssc"
    splits = ("train", "valid", "test")
    num_classes = 35
