r"""Random-manifold ("Randman") spike-timing classification, generated offline.

After Zenke & Vogels (2021), "The remarkable robustness of surrogate gradient
learning for instilling complex function in spiking neural networks", Neural
Computation 33(4), and their ``randman`` package; re-implemented here (vectorised,
seeded with a ``torch.Generator``), not a copy, so the exact numbers differ.

Each class ``k`` owns a random smooth manifold of intrinsic dimension D embedded in
``num_inputs`` dimensions. Embedding coordinate i is a product over the manifold
dimensions of random 1-d Fourier series with a power-law spectrum:

.. math::
    f_i(x) = \prod_{d=1}^{D} \sum_{m=1}^{M-1} \frac{a_{idm}}{(m+1)^{\alpha}}
             \sin\!\big(2\pi (m\, \nu_{idm}\, x_d + \varphi_{idm})\big),
    \qquad a, \nu, \varphi \sim U(0, 1),\ x \sim U(0, 1)^D

(``M = ceil(prec^{-1/alpha})`` harmonics; larger ``alpha`` gives smoother manifolds
and an easier task). Each coordinate is min-max scaled to [0, 1] over the class's
samples and becomes a spike time: input neuron i fires once, at step
``floor(f_i(x) * T)`` (clipped to ``T - 1``), optionally jittered. With
``num_spikes > 1`` every neuron fires once per independent sub-manifold.

A sample is a dense 0/1 tensor ``[T, num_inputs]``; :func:`batches` yields the
time-major ``[T, B, num_inputs]`` batches the layers take.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional, Tuple

import torch
import torch.utils.data

from .._numbers import flag, whole_number

__all__ = ["make_randman", "randman_times", "SpikeDataset", "split", "batches"]


def _random_manifold_params(
    num_inputs: int, dim_manifold: int, num_harmonics: int, generator: torch.Generator
) -> torch.Tensor:
    """Amplitude, frequency, phase: float64 ``[3, num_inputs, dim_manifold, M]``."""
    params = torch.rand(
        3, num_inputs, dim_manifold, num_harmonics, generator=generator, dtype=torch.float64
    )
    # No constant term: a bias would only shift a coordinate, which min-max removes.
    params[0, :, :, 0] = 0.0
    return params


def _eval_manifold(x: torch.Tensor, params: torch.Tensor, alpha: float) -> torch.Tensor:
    """Points x ``[S, D]`` on the manifold -> embedding ``[S, num_inputs]``."""
    amplitude, frequency, phase = params  # each [N, D, M]
    num_harmonics = amplitude.shape[-1]
    harmonic = torch.arange(num_harmonics, dtype=torch.float64)
    spectrum = 1.0 / (harmonic + 1.0) ** alpha
    # [S, 1, D, 1] against [N, D, M] -> [S, N, D, M]
    argument = 2 * math.pi * (x[:, None, :, None] * harmonic * frequency + phase)
    series = (amplitude * spectrum * torch.sin(argument)).sum(-1)  # [S, N, D]
    return series.prod(-1)


def _min_max_scale(y: torch.Tensor) -> torch.Tensor:
    low = y.min(0, keepdim=True).values
    high = y.max(0, keepdim=True).values
    return (y - low) / (high - low).clamp_min(1e-12)


def randman_times(
    num_classes: int = 10,
    num_inputs: int = 100,
    num_samples_per_class: int = 100,
    dim_manifold: int = 1,
    alpha: float = 2.0,
    num_spikes: int = 1,
    seed: int = 0,
    prec: float = 1e-3,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Continuous spike times in [0, 1] before quantisation, grouped by class.

    :return: (times float64 ``[C * S, num_spikes, num_inputs]``, labels int64 ``[C * S]``)
    """
    for name, value, low in (
        ("num_classes", num_classes, 2),
        ("num_inputs", num_inputs, 1),
        # spike times are min-max scaled over a class's samples: one sample has no spread
        ("num_samples_per_class", num_samples_per_class, 2),
        ("dim_manifold", dim_manifold, 1),
        ("num_spikes", num_spikes, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    if not 0 < prec < 1:
        raise ValueError(f"prec must lie in (0, 1), got {prec}")
    num_harmonics = int(min(math.ceil(prec ** (-1.0 / alpha)), 1000))
    generator = torch.Generator().manual_seed(seed)
    times = []
    for _ in range(num_classes):
        x = torch.rand(
            num_samples_per_class, dim_manifold, generator=generator, dtype=torch.float64
        )
        per_spike = []
        for _ in range(num_spikes):
            params = _random_manifold_params(num_inputs, dim_manifold, num_harmonics, generator)
            per_spike.append(_min_max_scale(_eval_manifold(x, params, alpha)))
        times.append(torch.stack(per_spike, 1))
    labels = torch.arange(num_classes).repeat_interleave(num_samples_per_class)
    return torch.cat(times), labels


def make_randman(
    num_classes: int = 10,
    num_inputs: int = 100,
    num_steps: int = 50,
    num_samples_per_class: int = 100,
    dim_manifold: int = 1,
    alpha: float = 2.0,
    seed: int = 0,
    num_spikes: int = 1,
    jitter: float = 0.0,
    shuffle: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Builds a Randman spike dataset; the same arguments give the same tensors.

    .. math::
        S_{n,t,i} = [\, t = \min(\lfloor T \cdot f^{(k_n)}_i(x_n) + \epsilon \rfloor, T-1) \,],
        \qquad \epsilon \sim \mathcal{N}(0, \mathrm{jitter}^2)

    :param num_classes: number of classes (one manifold each)
    :param num_inputs: input neurons (embedding dimension)
    :param num_steps: time steps T
    :param num_samples_per_class: samples drawn from each class's manifold
    :param dim_manifold: intrinsic dimension D of each manifold (harder as it grows)
    :param alpha: spectral decay of the random functions (easier as it grows)
    :param seed: seed of everything random here
    :param num_spikes: spikes per input neuron and sample (one per sub-manifold)
    :param jitter: std of Gaussian spike-time noise, in steps (clipped into [0, T-1])
    :param shuffle: interleave the classes randomly (otherwise grouped by class)
    :return: (spikes float 0/1 ``[N, T, num_inputs]``, labels int64 ``[N]``)
    """
    shuffle = flag("shuffle", shuffle)
    steps = whole_number(num_steps, 1)
    if steps is None:
        # num_steps=True made a 1-step dataset; 8.5 failed in torch.zeros
        raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")
    num_steps = steps
    if not (math.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"jitter must be a finite number >= 0, got {jitter}")
    times, labels = randman_times(
        num_classes, num_inputs, num_samples_per_class, dim_manifold, alpha, num_spikes, seed
    )
    # Separate streams for noise and order: jitter changes neither manifolds nor order.
    noise = torch.Generator().manual_seed(seed + 0x5EED)
    steps = times * num_steps
    if jitter > 0:
        steps = steps + jitter * torch.randn(steps.shape, generator=noise, dtype=steps.dtype)
    steps = steps.floor().clamp(0, num_steps - 1).long()  # [N, num_spikes, num_inputs]
    num_samples = steps.shape[0]
    spikes = torch.zeros(num_samples, num_steps, num_inputs)
    # scatter (not add): coinciding spikes of one neuron merge into a single 0/1 event.
    spikes.scatter_(1, steps, 1.0)
    if shuffle:
        order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed + 1))
        spikes, labels = spikes[order], labels[order]
    return spikes, labels


class SpikeDataset(torch.utils.data.Dataset):
    """Sample-major spikes ``[N, T, in]`` with labels ``[N]``, for a DataLoader.

    Note that a DataLoader stacks samples batch-first, ``[B, T, in]``; transpose to
    time-major (``x.transpose(0, 1)``) before feeding a layer, or use :func:`batches`.
    """

    def __init__(self, spikes: torch.Tensor, labels: torch.Tensor) -> None:
        if spikes.dim() != 3:
            raise ValueError(f"spikes must have shape [N, T, in], got {tuple(spikes.shape)}")
        if labels.shape != (spikes.shape[0],):
            raise ValueError(
                f"labels must have shape [{spikes.shape[0]}], got {tuple(labels.shape)}"
            )
        self.spikes = spikes
        self.labels = labels

    def __len__(self) -> int:
        return self.spikes.shape[0]

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.spikes[index], self.labels[index]

    @property
    def num_steps(self) -> int:
        return self.spikes.shape[1]

    @property
    def num_inputs(self) -> int:
        return self.spikes.shape[2]

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1 if len(self) else 0


def split(
    spikes: torch.Tensor, labels: torch.Tensor, test_fraction: float = 0.2
) -> Tuple[SpikeDataset, SpikeDataset]:
    """(train, test) by a stratified split: the last ``test_fraction`` of each
    class's samples (in the given order) go to the test set, so both sets keep the
    class balance. Data from :func:`make_randman` is already shuffled.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if labels.dim() != 1 or spikes.shape[0] != labels.shape[0]:
        raise ValueError(
            f"split needs one label per sample: spikes {tuple(spikes.shape)}, labels "
            f"{tuple(labels.shape)}"
        )
    is_test = torch.zeros(labels.shape[0], dtype=torch.bool)
    for label in labels.unique():
        members = (labels == label).nonzero().squeeze(1)
        num_test = int(round(len(members) * test_fraction))
        if num_test:
            is_test[members[len(members) - num_test :]] = True
    num_test = int(is_test.sum())
    if num_test == 0 or num_test == labels.shape[0]:
        # an empty set evaluates to 0 / 0: a NaN accuracy and loss, with no error
        empty = "test" if num_test == 0 else "training"
        raise ValueError(
            f"split: test_fraction={test_fraction} of each class leaves the {empty} set "
            f"empty ({labels.shape[0]} samples in {len(labels.unique())} classes, rounded "
            "per class); use more samples per class or another test_fraction"
        )
    train = SpikeDataset(spikes[~is_test], labels[~is_test])
    test = SpikeDataset(spikes[is_test], labels[is_test])
    return train, test


def batches(
    spikes: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    shuffle: bool = False,
    generator: Optional[torch.Generator] = None,
    drop_last: bool = False,
) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """Yields time-major batches ``([T, B, in], [B])`` from ``[N, T, in]`` spikes.

    :param shuffle: visit samples in a random order drawn from ``generator``
    :param drop_last: skip a final batch smaller than ``batch_size`` (keeps shapes
        static, which the IPU needs)
    """
    shuffle, drop_last = flag("shuffle", shuffle), flag("drop_last", drop_last)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if spikes.dim() != 3 or labels.shape != (spikes.shape[0],):
        raise ValueError(
            f"need spikes [N, T, in] and labels [N], got {tuple(spikes.shape)} and "
            f"{tuple(labels.shape)}"
        )
    num_samples = spikes.shape[0]
    if shuffle:
        order = torch.randperm(num_samples, generator=generator)
    else:
        order = torch.arange(num_samples)
    for start in range(0, num_samples, batch_size):
        index = order[start : start + batch_size]
        if drop_last and len(index) < batch_size:
            return
        yield spikes[index].transpose(0, 1).contiguous(), labels[index]
