"""Spike encoders with the semantics of ``snntorch.spikegen``.

All encoders return dense, time-major 0/1 float tensors ``[T, ...]``; turn one into
the sparse format with ``SparseSpikes.from_dense(x)`` (flatten feature dims first:
a layer takes ``[T, B, in_features]``).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ._devices import values_readable
from ._numbers import flag, real_number, whole_number

__all__ = ["rate", "latency", "latency_times", "delta"]


def _count(name: str, value: int, minimum: int) -> int:
    """An integer argument (a Python or numpy int, not a bool or a float) >= minimum."""
    number = whole_number(value, minimum)
    if number is None:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


def _finite(name: str, data: torch.Tensor) -> None:
    if data.dtype.is_floating_point and values_readable(data) and not bool(
            torch.isfinite(data).all()):
        raise ValueError(f"{name} contains NaN or inf")


def rate(
    data: torch.Tensor,
    num_steps: Optional[int],
    gain: float = 1.0,
    offset: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    r"""Rate (Bernoulli / Poisson-like) coding, as ``snntorch.spikegen.rate``.

    .. math::
        S_t \sim \mathrm{Bernoulli}\big(\mathrm{clip}(g \cdot x + o,\ 0,\ 1)\big),
        \qquad t = 0, \dots, T-1 \text{ independently}

    With ``generator=None`` the global torch RNG is used and, for the same seed, the
    result equals ``snntorch.spikegen.rate(data, num_steps, gain, offset)`` bit for bit
    (float32, float16, bfloat16 and float64 data). Time-varying data (``num_steps=None``)
    takes ``gain`` and ``offset`` too; snnTorch 1.0's ``time_var_input=True`` ignores
    them, so the two agree there for gain 1 and offset 0. Probabilities beyond [0, 1],
    infinite ones included, are clipped; NaN is an error. Integer data (uint8 pixels)
    is taken as float32 first, so that an integer gain or offset cannot wrap it.

    :param data: intensities, any shape; already time-major ``[T, ...]`` if
        ``num_steps`` is None
    :param num_steps: steps to repeat static data over, or None for time-varying data
    :param gain: multiplies the data before clipping to [0, 1]
    :param offset: added after the gain
    :param generator: torch.Generator for reproducible draws
    :return: float 0/1 ``[num_steps, *data.shape]`` (or ``data.shape`` when time-varying)
    """
    for name, value in (("gain", gain), ("offset", offset)):
        if not isinstance(value, torch.Tensor):
            real_number(name, value)  # "2" or None fails with a message naming neither
    if not data.is_floating_point():
        # integer data (uint8 pixels) times an integer gain stays integer and wraps:
        # 128 * 2 is 0 in uint8, a pixel that should always fire would never fire.
        # float32 is what torch promotes such data to for a float gain, so the draws
        # stay snnTorch's there.
        data = data.float()
    if num_steps is None:
        probabilities = data * gain + offset
    else:
        num_steps = _count("num_steps", num_steps, 1)
        # repeat, not expand: same memory layout as snnTorch, hence identical draws.
        probabilities = data.repeat(num_steps, *([1] * data.dim())) * gain + offset
    if values_readable(probabilities) and bool(torch.isnan(probabilities).any()):
        raise ValueError("rate coding needs data * gain + offset without NaN")
    probabilities = probabilities.clamp(0.0, 1.0)
    # Drawn in float64 for float64 data, as snnTorch draws (float64 takes other random
    # numbers); float32 for every other dtype gives snnTorch's draws as well.
    if probabilities.dtype != torch.float64:
        probabilities = probabilities.float()
    return torch.bernoulli(probabilities, generator=generator).float()


def latency_times(
    data: torch.Tensor,
    num_steps: int,
    *,
    tau: float = 1.0,
    threshold: float = 0.01,
    linear: bool = False,
    normalize: bool = False,
    first_spike_time: int = 0,
) -> torch.Tensor:
    r"""Real-valued spike times of :func:`latency` (``snntorch.spikegen.latency_code``).

    Logarithmic code (an RC circuit charged by a constant input x reaching threshold θ):

    .. math::
        t(x) = \tau \ln\frac{x}{x - \theta}, \qquad x \leftarrow \max(x, \theta + 10^{-7})

    Linear code: :math:`t(x) = \min(\tau (1 - x),\ \tau (1 - \theta))`.
    ``normalize`` rescales so that the latest possible spike lands on step ``T - 1``
    (linear: :math:`\tau = T - 1 - t_0`; log: divide by the largest time in ``data``).
    Both add ``first_spike_time`` :math:`t_0`.

    The arguments after ``num_steps`` are keyword-only: snnTorch takes ``threshold``
    before ``tau``, so the same positional call would mean something else here.
    """
    linear, normalize = flag("linear", linear), flag("normalize", normalize)
    threshold, tau = real_number("threshold", threshold), real_number("tau", tau)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and positive, got {tau}")
    num_steps = _count("num_steps", num_steps, 1)
    first_spike_time = _count("first_spike_time", first_spike_time, 0)
    if first_spike_time > num_steps - 1:
        raise ValueError(
            f"first_spike_time must be in [0, {num_steps - 1}], got {first_spike_time}"
        )
    _finite("latency coding data", data)
    if data.numel() and values_readable(data) and (
            float(data.min()) < 0.0 or float(data.max()) > 1.0):
        raise ValueError(
            f"latency coding needs data in [0, 1], got [{float(data.min())}, {float(data.max())}]"
        )
    data = data.float()
    if data.numel() == 0:
        return data + first_spike_time
    if linear:
        if normalize:
            tau = num_steps - 1 - first_spike_time
        return (-tau * (data - 1)).clamp_max(-tau * (threshold - 1)) + first_spike_time
    saturated = data.clamp_min(threshold + 1e-7)
    times = tau * torch.log(saturated / (saturated - threshold))
    if normalize:
        times = times * (num_steps - first_spike_time - 1) / times.max()
    return times + first_spike_time


def latency(
    data: torch.Tensor,
    num_steps: int,
    *,
    tau: float = 1.0,
    threshold: float = 0.01,
    linear: bool = False,
    normalize: bool = False,
    clip: bool = False,
    first_spike_time: int = 0,
) -> torch.Tensor:
    r"""Time-to-first-spike coding, as ``snntorch.spikegen.latency``: one spike per
    feature at step ``round(t(x))`` of :func:`latency_times`; bright features fire first.

    .. math::
        S_{t} = [\, t = \mathrm{round}(t(x)) \,]

    Features below ``threshold`` saturate and fire at the latest time, or not at all
    with ``clip=True``. Spike times beyond ``num_steps - 1`` are an error (lower ``tau``
    or pass ``normalize=True``), as in snnTorch without ``bypass``. The arguments after
    ``num_steps`` are keyword-only (snnTorch's positional order is threshold, tau).

    :param data: intensities in [0, 1], any shape
    :param num_steps: number of steps T
    :param tau: RC time constant (log code) or slope (linear code)
    :param threshold: input level below which a feature saturates
    :param linear: linear instead of logarithmic code
    :param normalize: rescale times to span ``[first_spike_time, T - 1]``
    :param clip: drop the spikes of features below ``threshold``
    :param first_spike_time: delay added to every spike time
    :return: float 0/1 ``[num_steps, *data.shape]``
    """
    times = latency_times(data, num_steps, tau=tau, threshold=threshold, linear=linear,
                          normalize=normalize, first_spike_time=first_spike_time)
    num_steps = _count("num_steps", num_steps, 1)
    # torch.round is round-half-to-even, like snnTorch's.
    steps = torch.round(times).long()
    if steps.numel() and values_readable(steps) and int(steps.max()) > num_steps - 1:
        raise ValueError(
            f"latest spike time {int(steps.max())} does not fit in num_steps={num_steps}; "
            "decrease tau or pass normalize=True"
        )
    spikes = torch.zeros((num_steps, *data.shape), dtype=torch.float32, device=data.device)
    spikes.scatter_(0, steps.unsqueeze(0), 1.0)
    if clip:
        spikes = spikes * ~(data < threshold)
    return spikes


def delta(
    data: torch.Tensor, threshold: float = 0.1, padding: bool = False, off_spike: bool = False
) -> torch.Tensor:
    r"""Change detection on time-major data, as ``snntorch.spikegen.delta``.

    .. math::
        S_t = [\, x_t - x_{t-1} \ge \theta \,] \;-\; [\, x_t - x_{t-1} \le -\theta \,]
              \cdot \mathbb{1}_{\text{off\_spike}}

    :param data: ``[T, ...]``
    :param threshold: minimal change θ that emits a spike (finite, > 0)
    :param padding: take :math:`x_{-1} = x_0` (no spike at t=0) instead of 0
    :param off_spike: emit -1 for decreases (the output is then not 0/1)
    :return: float ``[T, ...]``
    """
    padding, off_spike = flag("padding", padding), flag("off_spike", off_spike)
    if data.dim() == 0 or data.shape[0] == 0:
        raise ValueError("delta needs time-major data with at least one step")
    if not (math.isfinite(threshold) and threshold > 0):
        # at or below 0 an unchanged input spikes, and off_spike cancels every spike
        raise ValueError(f"delta's threshold must be finite and > 0, got {threshold}")
    _finite("delta's data", data)
    if not data.is_floating_point():
        # integer frames (uint8 pixels): their differences wrap around in their dtype
        data = data.to(torch.float64 if data.element_size() > 2 else torch.float32)
    first = data[:1] if padding else torch.zeros_like(data[:1])
    previous = torch.cat((first, data[:-1]))
    change = data - previous
    spikes = (change >= threshold).to(torch.float32)
    if off_spike:
        spikes = spikes - (change <= -threshold).to(torch.float32)
    return spikes

