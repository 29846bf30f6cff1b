"""scikit-learn's bundled handwritten digits (``sklearn.datasets.load_digits``: 1,797
8x8 images, 16 grey levels, 10 classes) encoded as spikes: a real dataset that needs no
download.

The code is a linear latency (time-to-first-spike) code with ON and OFF channels, as an
event camera's two polarities: each pixel of grey level ``v`` (0-16) drives two input
neurons, ON firing once at step ``round((1 - v/16)(T - 1))`` (bright pixels first) and
OFF at step ``round((v/16)(T - 1))`` (blank pixels first); a fully bright pixel has no
OFF spike and a blank one no ON spike (:func:`snn_ipu.encoding.latency` with
``linear=True, normalize=True, clip=True``). Neuron ``p * 64 + 8 * row + column``
(``p`` = 0 ON, 1 OFF), tonic's flattening of a ``(8, 8, 2)`` sensor.

Why latency and not rate: it is deterministic (the same image gives the same spikes, so
runs and resumes reproduce without a seeded encoder), lossless for the 17 grey levels
once ``T >= 17``, and sparse (~91 spikes per sample in 128 x T neuron-steps, against
``T`` times more for a rate code of similar resolution), the regime the sparse layers are
built for. Why OFF too:
a blank pixel sends an ON neuron nothing, and a layer cannot respond to a missing input,
so the ON code alone hides where a stroke is absent; with both channels every pixel
speaks once (measured: 0.5-1 point of test accuracy).
"""

from __future__ import annotations

from typing import Tuple

import torch

from ..encoding import latency
from .randman import SpikeDataset, split

__all__ = ["load_digits_spikes", "digits_datasets", "DIGITS_INPUTS", "DIGITS_CLASSES"]

DIGITS_INPUTS = 128  # 64 pixels x (ON, OFF)
DIGITS_CLASSES = 10


def _sklearn_digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digits dataset needs scikit-learn: pip install 'snn_ipu[data]' "
            "(or scikit-learn)"
        ) from exc
    return load_digits(return_X_y=True)


def load_digits_spikes(num_steps: int = 10) -> Tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as ON/OFF latency-coded spikes (module docstring).

    :param num_steps: time steps T (17 or more keep every grey level apart; 10, the
        default, merges neighbouring levels, and generalised better than 20 in our runs)
    :return: (spikes float 0/1 ``[1797, T, 128]`` sample-major, labels int64 ``[1797]``)
    """
    images, labels = _sklearn_digits()
    intensity = torch.as_tensor(images, dtype=torch.float32) / 16.0  # [N, 64] in [0, 1]
    # threshold below the faintest grey level (1/16): level 0 is clipped, never fires
    code = dict(linear=True, normalize=True, clip=True, threshold=1.0 / 32)
    on = latency(intensity, num_steps, **code)  # [T, N, 64]
    off = latency(1.0 - intensity, num_steps, **code)
    spikes = torch.cat([on, off], -1)
    return spikes.transpose(0, 1).contiguous(), torch.as_tensor(labels, dtype=torch.int64)


def digits_datasets(
    num_steps: int = 10, test_fraction: float = 0.2, seed: int = 0
) -> Tuple[SpikeDataset, SpikeDataset]:
    """(train, test): a stratified split of the shuffled digits (``seed`` fixes the
    shuffle; the same seed gives the same split)."""
    spikes, labels = load_digits_spikes(num_steps)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    return split(spikes[order], labels[order], test_fraction=test_fraction)
