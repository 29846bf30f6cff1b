"""Training-time augmentation of spike lists: time jitter and spike deletion, done on
the lists themselves (no dense tensor).

Each sample draws its randomness from its own generator, seeded with the run's seed,
the epoch and the sample's index in the dataset: a sample is changed the same way
whichever batch, process or resumed run it lands in, so augmented training stays
reproducible, resumable bitwise and equal between one process and several.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .._numbers import generator_seed
from ..lists import _lists_from_entries
from ..spikes import SparseSpikes

__all__ = ["SpikeAugment"]


class SpikeAugment:
    """Moves each input spike by a whole number of steps drawn uniformly from
    ``[-jitter, jitter]`` (clamped to ``[0, T-1]``) and deletes each with probability
    ``drop``. Two spikes of one neuron that land in one step merge into one.

    :param jitter: largest shift, in steps (0: none)
    :param drop: probability of deleting a spike (0: none)
    """

    def __init__(self, jitter: int = 0, drop: float = 0.0) -> None:
        if isinstance(jitter, bool) or not isinstance(jitter, int) or jitter < 0:
            raise ValueError(f"jitter must be an integer >= 0, got {jitter!r}")
        if not 0.0 <= drop < 1.0:
            raise ValueError(f"drop must lie in [0, 1), got {drop!r}")
        self.jitter, self.drop = jitter, float(drop)

    @property
    def active(self) -> bool:
        return self.jitter > 0 or self.drop > 0

    def __call__(self, spikes: SparseSpikes, sample_ids: Sequence[int], seed: int,
                 epoch: int) -> SparseSpikes:
        """``spikes`` with each sample ``b`` (dataset index ``sample_ids[b]``) augmented."""
        if not self.active:
            return spikes
        if not spikes.values_checked:
            # Entries are keyed by (t, b, neuron): an id out of range would land in
            # another sample as a valid spike there, so the list is checked first.
            spikes.validate()
        T, B, K = spikes.ids.shape
        if len(sample_ids) != B:
            raise ValueError(f"{len(sample_ids)} sample ids for a batch of {B}")
        listed = torch.arange(K)[None, None, :] < spikes.counts[..., :1].long()
        t, b, k = listed.nonzero(as_tuple=True)  # entries in (t, b) order
        neurons = spikes.ids[t, b, k].long()
        order = torch.argsort(b, stable=True)  # each sample's entries together, by time
        t, b, neurons = t[order], b[order], neurons[order]
        per_sample = torch.bincount(b, minlength=B).tolist()
        new_t, keep = [], []
        for sample, count, chunk in zip(sample_ids, per_sample, torch.split(t, per_sample)):
            g = torch.Generator().manual_seed(
                generator_seed((seed * 1_000_003 + epoch) * 1_000_033 + int(sample)))
            shift = torch.randint(-self.jitter, self.jitter + 1, (count,), generator=g)
            kept = torch.rand(count, generator=g) >= self.drop
            new_t.append((chunk + shift).clamp(0, T - 1))
            keep.append(kept)
        t = torch.cat(new_t) if new_t else t
        mask = torch.cat(keep) if keep else torch.ones(0, dtype=torch.bool)
        t, b, neurons = t[mask], b[mask], neurons[mask]
        n = spikes.num_neurons
        keys = torch.unique((t * B + b) * n + neurons)  # sorted by (t, b, neuron), merged
        ids, counts, _ = _lists_from_entries(T, B, (keys // n, keys % n), None, None, "error")
        return SparseSpikes._made(ids, counts, n)
