"""The checks of a layer's settings and neuron constants, shared by the layer types.

Each setting is checked where it is set (the constructor, or a notebook changing
``layer.backend`` later); the constants again on every forward call, since a
``fill_`` or ``.data`` edit or a loaded state dict can change them in between.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple, Union

import numpy as np
import torch

from ._numbers import ArgumentTypeError, real_number

__all__ = ["Setting", "check_constants", "check_grad_window", "check_loaded_constants",
           "decay", "neuron_constant", "one_of", "threshold_value"]

Scalar = Union[float, torch.Tensor]


def neuron_constant(name: str, value: Scalar, size: int) -> torch.Tensor:
    """A float32 copy of a per-neuron constant: a scalar, or one value per neuron."""
    if isinstance(value, (str, bytes, bool, np.bool_)):
        raise TypeError(f"{name} must be a number or a tensor of numbers, got {value!r}")
    try:
        raw = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a number or a tensor of numbers, got {type(value).__name__}"
        ) from None
    if raw.dtype == torch.bool or raw.is_complex():
        # a cast to float32 would take True as 1 and drop an imaginary part
        raise TypeError(f"{name} must hold real numbers, got a {type(value).__name__} of "
                        f"dtype {raw.dtype}")
    t = raw.detach().to(torch.float32).clone()
    if t.dim() > 1 or (t.dim() == 1 and t.numel() not in (1, size)):
        raise ValueError(f"{name} must be a scalar or have shape [{size}], got {tuple(t.shape)}")
    return t


def _bounds(values: torch.Tensor) -> Tuple[float, float]:
    """(min, max) in one pass: these checks run on every forward. A NaN anywhere makes
    both NaN, which every comparison below refuses."""
    if values.numel() == 0:
        return 0.0, 0.0
    if values.numel() == 1:  # a scalar constant, the usual one: no reduction
        v = float(values.reshape(()))
        return v, v
    low, high = torch.aminmax(values.float())
    return float(low), float(high)


def _check_decay(name: str, t: torch.Tensor) -> None:
    values = t.detach()
    low, high = _bounds(values)
    if not (low >= 0.0 and high <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {_shown(values)}")


def _check_threshold(t: torch.Tensor) -> None:
    values = t.detach()
    low, high = _bounds(values)
    if not (low > 0.0 and high < math.inf):
        raise ValueError(f"threshold must be finite and > 0, got {_shown(values)}")


def _shown(values: torch.Tensor) -> str:
    """The values of a small tensor, or its offending range for a large one."""
    if values.numel() <= 8:
        return str(values.tolist())
    return f"values from {float(values.min())} to {float(values.max())} (NaN: " \
        f"{bool(values.isnan().any())})"


def decay(name: str, value: Scalar, size: int) -> torch.Tensor:
    """A decay rate in [0, 1]: a scalar or one value per neuron."""
    t = neuron_constant(name, value, size)
    _check_decay(name, t)
    return t


def threshold_value(value: Scalar, size: int) -> torch.Tensor:
    t = neuron_constant("threshold", value, size)
    _check_threshold(t)
    return t


def check_constants(module: torch.nn.Module) -> None:
    """Fixed decays and thresholds (buffers): a ``fill_`` or ``.data`` edit, or a loaded
    state dict, can put any value there after the constructor's checks."""
    for name, value in module._buffers.items():  # (named_buffers' generator costs more)
        if value is None:
            continue
        if name == "threshold":
            _check_threshold(value)
        elif name in ("beta", "alpha"):
            _check_decay(name, value)


def check_loaded_constants(module: torch.nn.Module, incompatible_keys) -> None:
    """load_state_dict hook: the loaded constants, checked where they come in."""
    try:
        check_constants(module)
    except ValueError as exc:
        raise ValueError(f"{module.name}: loaded {exc}") from None


def one_of(what: str, choices) -> Callable[[str], str]:
    """The check of a setting that takes one of ``choices``."""
    def check(value: str) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"unknown {what} {value!r}; choose one of {tuple(choices)}")
        return value
    return check


def check_grad_window(value: Optional[float]) -> Optional[float]:
    if value is None:
        return None
    try:
        window = real_number("grad_window", value)
    except ArgumentTypeError:
        raise ArgumentTypeError(
            f"grad_window must be None or a number >= 0, got {value!r}") from None
    if not math.isfinite(window) or window < 0:
        raise ValueError(f"grad_window must be None or a finite number >= 0, got {value}")
    return window


class Setting:
    """A layer setting checked whenever it is set: in the constructor and when a
    notebook changes it later (``layer.backend = "reference"``)."""

    def __init__(self, check) -> None:
        self.check = check

    def __set_name__(self, owner, name: str) -> None:
        self.key = "_setting_" + name

    def __get__(self, layer, owner=None):
        return self if layer is None else layer.__dict__[self.key]

    def __set__(self, layer, value) -> None:
        state = layer.__dict__
        state[self.key] = self.check(value)
        # what a layer keeps from call to call on its settings (its call's config) is
        # made again after any of them changes
        state["_settings_version"] = state.get("_settings_version", 0) + 1
