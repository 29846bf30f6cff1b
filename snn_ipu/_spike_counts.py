"""``SparseSpikes.spike_counts`` in native code on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.autograd import forward_ad

from ._native import _C, numpy_view
from .lists import listed_only

if TYPE_CHECKING:
    from .spikes import SparseSpikes


def _threads() -> int:
    # (imported here: the thread count reads its environment variable, whose error
    # belongs to the first call that runs, not to `import snn_ipu`)
    from .backends.emulator_threads import get_num_threads

    return get_num_threads()


class SpikeCounts(torch.autograd.Function):
    """``spike_counts`` of a list on the CPU in native code, which reads the listed
    entries alone: torch's scatter over the whole ``[T, B, K]`` list (the form for
    other devices, which graph compilers trace) reads every padding entry too, and
    took ~2 ms of a 13 ms training step at 1% activity (forward and backward)."""

    @staticmethod
    def takes(spikes: SparseSpikes) -> bool:
        # a forward-mode tangent (torch.func.jvp, forward_ad) takes torch's scatter,
        # which passes it on: this Function has no jvp
        return all(t.is_cpu for t in (spikes.ids, spikes.counts, spikes.values)) \
            and spikes.values.dtype in (torch.float32, torch.float64) \
            and forward_ad.unpack_dual(spikes.values).tangent is None

    @staticmethod
    def forward(ctx, ids, counts, values, num_neurons):
        # private copies, as the layers keep (docs/reliability.md): the user holds ids
        # and counts, and an in-range edit before backward would move the gradient
        ctx.save_for_backward(ids.clone(), counts.clone())
        try:
            counted = _C.spike_counts(
                numpy_view(ids), numpy_view(counts), numpy_view(values), num_neurons,
                _threads())
        except ValueError as exc:  # a list edited after validation
            raise ValueError(f"SparseSpikes.spike_counts: {exc}") from exc
        return torch.from_numpy(counted)

    @staticmethod
    def backward(ctx, grad):
        ids, counts = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: a form autograd can differentiate
            T, B, K = ids.shape
            idx = ids.long().permute(1, 0, 2).reshape(B, T * K)
            gathered = grad.gather(-1, idx).reshape(B, T, K).permute(1, 0, 2)
            return None, None, listed_only(gathered, counts), None
        return None, None, torch.from_numpy(_C.spike_counts_grad(
            numpy_view(ids), numpy_view(counts), numpy_view(grad), _threads())), None
