"""What a layer takes as input: a :class:`~snn_ipu.SparseSpikes` or a dense binary
``[T, B, N]`` tensor, checked and turned into a list."""

from __future__ import annotations

import torch

from ._compile import refuse_transforms
from ._devices import values_readable
from .lists import listed_mask
from .spikes import SparseSpikes

__all__ = ["as_sparse", "check_list_once"]


def _require_steps_and_samples(steps: int, batch: int, where: str) -> None:
    if steps < 1 or batch < 1:
        raise ValueError(
            f"{where}: input has T={steps} timesteps and B={batch} samples; a layer needs "
            "at least one of each"
        )


def check_list_once(spikes: SparseSpikes, where: str) -> None:
    """A list not checked since its ids, counts or values were set (built with
    ``validate=False``, or any of them replaced) is checked in full here, the same on
    every backend: shapes, counts, ids in range and unique, and the values at the
    listed entries. Every backend takes spikes as 1s (the emulator adds whole weight
    rows, where the reference's dense product would scale by a graded value), so a
    graded value, or a spike whose value a mask set to 0, is refused; the losses check
    a list so too (its counts would count graded and eligible-only values)."""
    if spikes.values_checked:
        return
    try:
        spikes._check_shapes()
        if not values_readable(spikes.ids, spikes.values, spikes.counts):
            return
        spikes._check_counts_and_ids()
        spikes._check_unique()
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: input list: {exc}") from None
    counts = spikes.counts.long()
    spike = listed_mask(counts, spikes.capacity, 0)
    off = listed_mask(counts, spikes.capacity, 1) & (spikes.values.detach() != spike.to(
        spikes.values.dtype))
    if bool(off.any()):
        t, b, k = (int(i) for i in off.nonzero()[0])
        what = ("(a spike): spikes must have value 1" if bool(spike[t, b, k]) else
                "(eligible-only): eligible-only entries must have value 0")
        raise ValueError(
            f"{where}: input list value {float(spikes.values[t, b, k]):f} at t={t}, b={b}, "
            f"k={k} {what} (graded spikes are not supported; to drop spikes, "
            "snn_ipu.SpikeDropout or SparseSpikes.from_dense(x.to_dense() * mask))"
        )
    spikes._checked = True


def as_sparse(x, num_neurons: int, where: str) -> SparseSpikes:
    """Accepts a SparseSpikes or a dense binary [T, B, N] tensor for a layer input."""
    refuse_transforms(where, values_readable(x.values if isinstance(x, SparseSpikes) else x))
    if isinstance(x, SparseSpikes):
        if x.num_neurons != num_neurons:
            raise ValueError(
                f"{where}: input has {x.num_neurons} neurons but in_features={num_neurons}"
            )
        check_list_once(x, where)
        _require_steps_and_samples(x.num_steps, x.batch_size, where)
        return x
    if isinstance(x, torch.Tensor):
        if x.dim() != 3:
            raise ValueError(
                f"{where}: input must be SparseSpikes or dense spikes [T, B, {num_neurons}], "
                f"got shape {tuple(x.shape)}"
            )
        if x.shape[-1] != num_neurons:
            raise ValueError(
                f"{where}: input has {x.shape[-1]} features but in_features={num_neurons}"
            )
        _require_steps_and_samples(x.shape[0], x.shape[1], where)
        # A dense input that requires grad gets its full gradient: list every neuron.
        everything = torch.ones_like(x, dtype=torch.bool) if x.requires_grad else None
        return SparseSpikes.from_dense(x, eligible=everything)
    raise TypeError(
        f"{where}: input must be SparseSpikes or a torch.Tensor, got {type(x).__name__}"
    )
