r"""Activity regularisers: penalties on how much a layer spikes, added to the loss.

``l1_rate_sparsity`` is ``snntorch.functional.reg.l1_rate_sparsity`` (a function here,
as the losses are)::

    snnTorch                                        snn_ipu
    SF.reg.l1_rate_sparsity(Lambda=1e-5)(spk)       l1_rate_sparsity(spk, 1e-5)

The activity bounds are the lower and upper spike-rate targets of Zenke & Vogels
(2021) and Cramer et al. (2022, the SHD paper): with the rate of neuron ``i`` in sample
``b`` taken as :math:`r_{b,i} = \frac{1}{T} \sum_t S_{t,b,i}` (spikes per step),

.. math::
    L_{\mathrm{lower}} = \frac{1}{B N} \sum_{b,i} \max(0,\ r_{\min} - r_{b,i})^2
    \qquad \text{(per neuron: silent neurons are pushed up)}

.. math::
    L_{\mathrm{upper}} = \frac{1}{B} \sum_b \max\big(0,\ \bar r_b - r_{\max}\big)^2,
    \qquad \bar r_b = \frac{1}{N} \sum_i r_{b,i}
    \qquad \text{(per layer: the population's mean rate is held down)}

``per_neuron`` switches either bound between the two forms. Every function takes a
:class:`~snn_ipu.SparseSpikes` or dense spikes ``[T, B, N]`` (``time_first=False``:
``[B, T, N]``) and is differentiable (through the list's values: the surrogate
gradient of the layer that made the spikes).
"""

from __future__ import annotations

import math

import torch

from ._numbers import flag, real_number
from .losses import SpikesLike, _is_sparse, spike_count

__all__ = ["l1_rate_sparsity", "lower_rate_penalty", "upper_rate_penalty", "spike_rates"]


def _steps(spikes: SpikesLike, time_first: bool) -> int:
    if _is_sparse(spikes):
        return spikes.num_steps
    return spikes.shape[0 if flag("time_first", time_first) else 1]


def spike_rates(spikes: SpikesLike, time_first: bool = True) -> torch.Tensor:
    """Spikes per step of each neuron in each sample, ``[B, N]`` (differentiable)."""
    return spike_count(spikes, time_first=time_first) / _steps(spikes, time_first)


def _non_negative(name: str, value: float) -> float:
    number = real_number(name, value)  # names the argument for a bool or a string
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def _rate(name: str, value: float) -> float:
    """A rate bound in spikes per step: a neuron spikes at most once a step, so a bound
    above 1 (a rate in Hz, say) is one a lower bound can never meet and an upper bound
    never reaches."""
    number = _non_negative(name, value)
    if number > 1:
        raise ValueError(
            f"{name} is in spikes per step, in [0, 1] (a neuron spikes at most once a step), "
            f"got {value!r}; for a rate in Hz pass rate * dt (dt: the step in seconds)")
    return number


def l1_rate_sparsity(spikes: SpikesLike, scale: float = 1e-5,
                     time_first: bool = True) -> torch.Tensor:
    r"""``scale`` times the total number of spikes, :math:`\lambda \sum_{t,b,i} S_{t,b,i}`
    (``snntorch.functional.reg.l1_rate_sparsity(Lambda=scale)``: a sum, so it grows with
    the batch, the sequence and the layer)."""
    _non_negative("scale", scale)
    return scale * spike_count(spikes, time_first=time_first).sum()


def lower_rate_penalty(spikes: SpikesLike, min_rate: float, per_neuron: bool = True,
                       time_first: bool = True) -> torch.Tensor:
    """Squared shortfall of the rate below ``min_rate`` spikes per step, in [0, 1] (module
    docstring); ``per_neuron=False`` bounds the layer's mean rate instead."""
    min_rate = _rate("min_rate", min_rate)
    rates = spike_rates(spikes, time_first)
    if not flag("per_neuron", per_neuron):
        rates = rates.mean(1)
    return torch.relu(min_rate - rates).pow(2).mean()


def upper_rate_penalty(spikes: SpikesLike, max_rate: float, per_neuron: bool = False,
                       time_first: bool = True) -> torch.Tensor:
    """Squared excess of the layer's mean rate over ``max_rate`` spikes per step, in
    [0, 1] (module docstring); ``per_neuron=True`` bounds every neuron's rate instead."""
    max_rate = _rate("max_rate", max_rate)
    rates = spike_rates(spikes, time_first)
    if not flag("per_neuron", per_neuron):
        rates = rates.mean(1)
    return torch.relu(rates - max_rate).pow(2).mean()
