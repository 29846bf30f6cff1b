"""Datasets and batching.

* :mod:`~snn_ipu.data.randman`: the synthetic Randman task (generated, no download).
* :mod:`~snn_ipu.data.digits`: scikit-learn's bundled handwritten digits as spikes.
* :mod:`~snn_ipu.data.heidelberg`: SHD and SSC from their official HDF5 files.
* :mod:`~snn_ipu.data.tonic_adapter`: any tonic dataset (N-MNIST, DVS Gesture, ...).
* :mod:`~snn_ipu.data.collate`: DataLoader collate functions giving time-major
  :class:`~snn_ipu.SparseSpikes` batches, and :class:`~snn_ipu.data.SpikeLists`: a
  dataset's samples as fixed-capacity lists for a compiled (PopTorch) model.

Every batch a layer takes is time-major, ``[T, B, N]``.
"""

from .collate import EventCollate, SpikeLists, busiest_step, collate_dense, collate_labels
from .digits import digits_datasets, load_digits_spikes
from .heidelberg import SHD, SSC, HeidelbergDataset
from .randman import SpikeDataset, batches, make_randman, randman_times, split
from .tonic_adapter import TonicEvents

__all__ = [
    "EventCollate",
    "HeidelbergDataset",
    "SHD",
    "SSC",
    "SpikeDataset",
    "SpikeLists",
    "TonicEvents",
    "batches",
    "busiest_step",
    "collate_dense",
    "collate_labels",
    "digits_datasets",
    "load_digits_spikes",
    "make_randman",
    "randman_times",
    "split",
]
