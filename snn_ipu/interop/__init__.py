"""Models in and out: snnTorch networks (:mod:`.snntorch_models`) and the Neuromorphic
Intermediate Representation (:mod:`.nir_graphs`). snnTorch and nir are imported only
when these functions are called."""

from .nir_graphs import export_to_nir, import_from_nir
from .snntorch_models import from_snntorch, to_snntorch

__all__ = ["export_to_nir", "from_snntorch", "import_from_nir", "to_snntorch"]
