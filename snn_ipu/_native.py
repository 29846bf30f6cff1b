"""The one importer of snn_ipu's compiled extension: ``from ._native import _C``,
and the bridge of tensors to the numpy arrays it takes."""

from __future__ import annotations

import torch

try:
    from . import _C
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "snn_ipu's C++ extension is not built; run `make build` (or `pip install .`) in "
        f"the repository ({exc})"
    ) from exc

__all__ = ["_C", "numpy_view"]


def numpy_view(t: torch.Tensor):
    """A tensor's data as a C-contiguous numpy array for the native code (copied only
    where it is not contiguous)."""
    return t.detach().contiguous().numpy()
