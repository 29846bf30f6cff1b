"""Dropout between spiking layers: ``nn.Dropout``'s place in an snnTorch network.

The layers take spikes as 1s (graded values are refused), so ``nn.Dropout``, which
scales what it keeps by ``1/(1-p)``, cannot go between them, and a mask written into a
list's ``values`` is refused too (a spike of value 0 is no spike on the emulator). A
:class:`SpikeDropout` removes the dropped spikes from the list itself.
"""

from __future__ import annotations

from typing import Union

import torch
from torch import nn

from ._numbers import real_number
from .lists import listed_mask, listed_only
from .spikes import SparseSpikes

__all__ = ["SpikeDropout"]


class SpikeDropout(nn.Module):
    """Drops each input spike with probability ``p`` in training (``model.train()``);
    passes the input unchanged in evaluation (``model.eval()``).

    Takes a :class:`~snn_ipu.SparseSpikes` or dense binary spikes ``[T, B, N]``
    (multiplied by a 0/1 mask). The mask is ``nn.Dropout``'s, over input units: each
    listed entry, spike or gradient-eligible, is dropped with probability ``p`` (the
    dropped ones leave the list: kept spikes first, then kept eligible entries, as a
    layer lists them), so the gradient is 0 at a dropped unit and passed on at a kept
    one, as the dense mask's.

    Unlike ``nn.Dropout`` the kept spikes are not scaled by ``1/(1-p)`` (a spike is 1),
    so in training the next layer receives ``(1 - p)`` of the spikes it receives in
    evaluation; where that shift matters, scale the next layer's weights by ``1 - p``
    for evaluation, or raise its threshold in training.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    @property
    def p(self) -> float:
        """The probability of dropping an entry, in [0, 1): checked when set, also after
        the constructor (a dropout schedule, a notebook)."""
        return self._p

    @p.setter
    def p(self, value: float) -> None:
        p = real_number("SpikeDropout: p", value)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"SpikeDropout: p must lie in [0, 1), got {p}")
        self._p = p

    def forward(self, x: Union[SparseSpikes, torch.Tensor]) -> Union[SparseSpikes, torch.Tensor]:
        if not self.training or self.p == 0.0:
            return x
        if isinstance(x, torch.Tensor):
            return x * (torch.rand(x.shape, device=x.device) >= self.p).to(x.dtype)
        if not isinstance(x, SparseSpikes):
            raise TypeError(f"SpikeDropout takes SparseSpikes or a torch.Tensor, got "
                            f"{type(x).__name__}")
        if x._dense_on_device is not None:
            # the ids and counts below come from the op's through integer ops alone,
            # which PopART's autodiff gives no gradient: the op's gradient would fail,
            # and every layer before it would be left untrained without a word
            raise ValueError(
                "SpikeDropout: this list was made by an IPU op (backend 'ipu' or "
                "'ipu_graph'); dropping its entries in torch would leave the layers before "
                "it without gradients under PopART. Dropout between IPU layers is not "
                "supported; on the input data it is")
        if not x.values_checked:
            x.validate()  # the entries are reordered below: only a valid list may be
        K = x.capacity
        counts = x.counts.long()
        spike, listed = listed_mask(counts, K, 0), listed_mask(counts, K, 1)
        keep = listed & (torch.rand(x.ids.shape, device=x.ids.device) >= self.p)
        kept, kept_eligible = spike & keep, keep & ~spike
        # Order of each (t, b)'s entries: kept spikes, kept eligible-only entries,
        # dropped entries, padding; a stable sort keeps each part's order.
        key = torch.full(x.ids.shape, 3, dtype=torch.int8, device=x.ids.device)
        key[listed & ~keep], key[kept], key[kept_eligible] = 2, 0, 1
        order = torch.sort(key, dim=-1, stable=True).indices
        n_kept = kept.sum(-1, dtype=torch.int32)
        new_counts = torch.stack([n_kept, n_kept + kept_eligible.sum(-1, dtype=torch.int32)],
                                 -1)
        ids = torch.gather(x.ids, -1, order)
        values = listed_only(torch.gather(x.values, -1, order), new_counts)
        return SparseSpikes._made(ids, new_counts, x.num_neurons, values)

    def extra_repr(self) -> str:
        return f"p={self.p}"
