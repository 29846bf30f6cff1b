"""snn_ipu: sparse, recurrent spiking neural networks trained with BPTT.

Spikes travel as fixed-capacity index lists (:class:`SparseSpikes`); layers
(:class:`LIFLayer`, :class:`SynapticLayer`, :class:`ReadoutLayer`) run their
whole time loop in a backend: dense PyTorch (``reference``), the C++ IPU
emulator (``emulator``, the default on a CPU) or Poplar on an IPU (``ipu``).
"""

# torch first: the extension (snn_ipu._C) then binds to the OpenMP runtime torch
# loaded, so both share one thread team instead of competing for the cores.
import torch  # noqa: F401, I001

from . import data, encoding, events, losses, plot, regularizers, surrogate
from .dropout import SpikeDropout
from .interop import export_to_nir, from_snntorch, import_from_nir, to_snntorch
from .layers import LayerState, LIFLayer, ReadoutLayer, SynapticLayer
from .pipelining import pipeline
from .planning import PlanError, PlanReport, place, plan
from .overflow import SpikeOverflowError
from .spikes import SparseSpikes

__version__ = "0.1.0"

__all__ = [
    "LayerState",
    "LIFLayer",
    "PlanError",
    "PlanReport",
    "ReadoutLayer",
    "SparseSpikes",
    "SpikeDropout",
    "SpikeOverflowError",
    "SynapticLayer",
    "data",
    "encoding",
    "events",
    "export_to_nir",
    "from_snntorch",
    "import_from_nir",
    "losses",
    "pipeline",
    "place",
    "plan",
    "plot",
    "regularizers",
    "surrogate",
    "to_snntorch",
]
