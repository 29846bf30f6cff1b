"""The one importer of snn_ipu's compiled extension: ``from ._native import _C``,
and the bridge of tensors to the numpy arrays it takes (``numpy_view``).

setup.py builds the extension once per instruction-set level (see its
docstring); this module loads the best build the running CPU supports, so
that one wheel or shared install runs on every machine of a cluster while the
AVX2 kernels run wherever they can.

``SNN_IPU_ARCH`` (read at import) forces a build: ``baseline`` (the portable
one: x86-64-v2, or the generic build elsewhere), ``x86-64-v3`` or ``native``;
``auto`` (the default) picks. ``build`` names the build that was loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType
from typing import Dict, List, Tuple

import torch

__all__ = ["ARCH_ENV", "BUILDS", "NativeBuildError", "_C", "build", "numpy_view"]

ARCH_ENV = "SNN_IPU_ARCH"

# build name -> (module, x86-64 level it needs; 0: any CPU of its architecture)
BUILDS: Dict[str, Tuple[str, int]] = {
    "native": ("_C_native", 0),
    "x86-64-v3": ("_C_x86_64_v3", 3),
    "x86-64-v2": ("_C_x86_64_v2", 2),
    "generic": ("_C_generic", 0),
}
_BASELINES = ("x86-64-v2", "generic")
_CHOICES = ("auto", "baseline", *BUILDS)


class NativeBuildError(ImportError):
    """No build of the extension can run here (or the one asked for is missing)."""


def _present() -> List[str]:
    return [name for name, (module, _) in BUILDS.items()
            if importlib.util.find_spec(f"{__package__}.{module}") is not None]


def _cpu_level() -> int:
    from . import _cpu

    return int(_cpu.x86_64_level())


def choose(requested: str, present: List[str], cpu_level: int) -> str:
    """The build to load: ``requested`` (an ``SNN_IPU_ARCH`` value) among the
    ``present`` builds on a CPU of x86-64 level ``cpu_level`` (0: not x86-64)."""
    if requested not in _CHOICES:
        raise NativeBuildError(
            f"{ARCH_ENV}={requested!r} is not one of {', '.join(_CHOICES)}")
    if not present:
        raise NativeBuildError(
            "snn_ipu's C++ extension is not built; run `make build` (or `pip install .`) "
            "in the repository")

    def runs(name: str) -> bool:
        return cpu_level >= BUILDS[name][1]

    if requested == "auto":
        # native is built alone and for this machine; otherwise the most capable level.
        for name in ("native", "x86-64-v3", "x86-64-v2", "generic"):
            if name in present and runs(name):
                return name
        raise NativeBuildError(
            f"this CPU (x86-64 level {cpu_level}) cannot run the installed builds "
            f"({', '.join(present)}): x86-64-v2 needs SSE4.2 and POPCNT; rebuild on this "
            "machine with SNN_IPU_NATIVE=1")
    wanted = [b for b in _BASELINES if b in present] if requested == "baseline" else (
        [requested] if requested in present else [])
    if not wanted:
        raise NativeBuildError(
            f"{ARCH_ENV}={requested}: that build is not installed (installed: "
            f"{', '.join(present)}); builds with SNN_IPU_NATIVE=1 hold the native one alone")
    if not runs(wanted[0]):
        raise NativeBuildError(
            f"{ARCH_ENV}={requested}: this CPU (x86-64 level {cpu_level}) cannot run the "
            f"{wanted[0]} build")
    return wanted[0]


def _load() -> Tuple[str, ModuleType]:
    requested = os.environ.get(ARCH_ENV, "auto").strip().lower() or "auto"
    name = choose(requested, _present(), _cpu_level())
    return name, importlib.import_module(f"{__package__}.{BUILDS[name][0]}")


build, _C = _load()


def numpy_view(t: torch.Tensor):
    """A tensor's data as a C-contiguous numpy array for the native code (copied only
    where it is not contiguous)."""
    if t.is_cpu and t.is_contiguous():
        # one call where detach, contiguous and numpy are three: this runs ~30 times
        # per layer call
        return t.numpy(force=True)
    return t.detach().contiguous().numpy()
