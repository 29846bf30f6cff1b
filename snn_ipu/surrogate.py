"""Surrogate gradients for the spike non-linearity S = H(U - threshold).

Each surrogate is a small declarative description (a kind code and up to two
parameters), not a Python callback, so that the C++ emulator and the IPU
codelets evaluate exactly the same derivative as the reference backend. The
forward pass is always the strict Heaviside step ``(U - threshold) > 0``.

With ``x = U - threshold`` the derivatives dS/dU are:

=================  ======================================  ==================================
surrogate          dS/dU                                   snnTorch equivalent
=================  ======================================  ==================================
ATan(alpha)        (alpha/2) / (1 + (pi/2 * alpha * x)^2)  ``atan(alpha)``
FastSigmoid(k)     1 / (k*|x| + 1)^2                       ``fast_sigmoid(k)``
Sigmoid(k)         k * exp(-k x) / (exp(-k x) + 1)^2       ``sigmoid(k)``
Triangle(w, h)     h * max(0, 1 - |x| / w)                 none (``triangular`` is a step)
StraightThrough()  1                                       ``straight_through_estimator()``
=================  ======================================  ==================================
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass, fields
from typing import Tuple, Union

import torch

from ._codes import SURROGATES

__all__ = [
    "Surrogate",
    "ATan",
    "FastSigmoid",
    "Sigmoid",
    "Triangle",
    "StraightThrough",
    "get",
]


@dataclass(frozen=True)
class Surrogate:
    """Base class: ``kind`` is the surrogate's code in the native code (Codes.hpp);
    its dataclass fields are its parameters, each a finite number > 0, which the
    native code takes as ``params`` (the first is the shape: alpha, slope or width;
    the second Triangle's height). A subclass of a built-in surrogate may change its
    parameters' defaults, not its derivative: the native code evaluates the built-in
    one (:func:`get` refuses an override)."""

    kind = -1

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, _positive(f.name, getattr(self, f.name)))

    @property
    def params(self) -> Tuple[float, float]:
        values = [getattr(self, f.name) for f in fields(self)]
        return tuple(values + [0.0] * (2 - len(values)))

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        """dS/dU evaluated at ``x = U - threshold`` (reference implementation)."""
        raise NotImplementedError


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"surrogate parameter {name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"surrogate parameter {name} must be a finite number > 0, got {value}")
    as_float32 = ctypes.c_float(value).value
    if not math.isfinite(as_float32) or as_float32 <= 0:
        # 1e39 is inf there (NaN gradients), 1e-46 is 0 (Triangle's width: no gradient;
        # FastSigmoid's slope: the straight-through estimator)
        raise ValueError(
            f"surrogate parameter {name}={value} is {as_float32} in float32, in which the "
            "native code and the layers compute: it must be a finite number > 0 there "
            "(between about 1.4e-45 and 3.4e38)")
    return value


@dataclass(frozen=True)
class ATan(Surrogate):
    alpha: float = 2.0
    kind = SURROGATES["atan"]

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        return (self.alpha / 2) / (1 + (math.pi / 2 * self.alpha * x) ** 2)


@dataclass(frozen=True)
class FastSigmoid(Surrogate):
    slope: float = 25.0
    kind = SURROGATES["fast_sigmoid"]

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        return 1.0 / (self.slope * x.abs() + 1.0) ** 2


@dataclass(frozen=True)
class Sigmoid(Surrogate):
    slope: float = 25.0
    kind = SURROGATES["sigmoid"]

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        # In |x|, as the codelet: s * (1 - s) loses the tail for x > 0 to cancellation
        # (0 beyond k x ~ 17), and exp(-k x) alone overflows for x < 0.
        e = torch.exp(-self.slope * x.abs())
        return self.slope * e / (1 + e) ** 2


@dataclass(frozen=True)
class Triangle(Surrogate):
    width: float = 1.0
    height: float = 1.0
    kind = SURROGATES["triangle"]

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        return self.height * torch.clamp(1 - x.abs() / self.width, min=0)


@dataclass(frozen=True)
class StraightThrough(Surrogate):
    kind = SURROGATES["straight_through"]

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(x)


_BY_NAME = {
    "atan": ATan,
    "fast_sigmoid": FastSigmoid,
    "fastsigmoid": FastSigmoid,
    "sigmoid": Sigmoid,
    "triangle": Triangle,
    "straight_through": StraightThrough,
    "straightthrough": StraightThrough,
}


_BUILT_IN = (ATan, FastSigmoid, Sigmoid, Triangle, StraightThrough)
_BY_KIND = {cls.kind: cls for cls in _BUILT_IN}


def _check_native_form(surrogate: Surrogate) -> None:
    """A subclass may change its parameters' defaults, nothing else: the emulator, the
    IPU and the ipu_graph backend evaluate the derivative of the built-in class its
    ``kind`` names, in C++, while the reference (and Triton) backend calls the Python
    ``derivative``; an overridden one would train differently on each backend."""
    cls = type(surrogate)
    base = _BY_KIND.get(surrogate.kind)
    if cls is base:
        return
    if base is None or not isinstance(surrogate, base):
        what = "is not one of snn_ipu's surrogates (its kind names none it derives from)"
    elif cls.derivative is not base.derivative:
        what = f"overrides {base.__name__}.derivative"
    elif cls.params is not Surrogate.params or \
            [f.name for f in fields(cls)] != [f.name for f in fields(base)]:
        what = f"changes {base.__name__}'s parameters"
    else:
        return
    raise TypeError(
        f"surrogate {cls.__name__} {what}: the derivative runs in C++ on the emulator and "
        "the IPU, which take a surrogate's kind and parameters alone, so a custom one would "
        "be ignored there and used by the reference and triton backends; use ATan(), "
        "FastSigmoid(), Sigmoid(), Triangle() or StraightThrough() with their parameters "
        "(a subclass may change their defaults)"
    )


def get(surrogate: Union[str, Surrogate, None]) -> Surrogate:
    """A Surrogate from an instance, a name such as ``"atan"``, or None (ATan(2))."""
    if surrogate is None:
        return ATan()
    if isinstance(surrogate, type) and issubclass(surrogate, Surrogate):
        raise TypeError(
            f"surrogate must be an instance: pass {surrogate.__name__}() rather than the class "
            f"{surrogate.__name__}"
        )
    if isinstance(surrogate, Surrogate):
        if type(surrogate) is Surrogate:
            raise TypeError(
                "Surrogate is the abstract base class; use ATan(), FastSigmoid(), Sigmoid(), "
                "Triangle() or StraightThrough()"
            )
        _check_native_form(surrogate)
        return surrogate
    if isinstance(surrogate, str):
        key = surrogate.lower()
        if key not in _BY_NAME:
            raise ValueError(
                f"unknown surrogate {surrogate!r}; choose one of {sorted(set(_BY_NAME))} "
                "or pass an snn_ipu.surrogate instance"
            )
        return _BY_NAME[key]()
    raise TypeError(
        "surrogate must be an snn_ipu.surrogate.Surrogate or a name, got "
        f"{type(surrogate).__name__} (Python callbacks such as snntorch.surrogate.atan() "
        "cannot run in C++ or on the IPU)"
    )
