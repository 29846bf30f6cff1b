"""The fixed-capacity spike-list format shared by every layer and backend.

For every timestep ``t`` and sample ``b``, ``ids[t, b, :K]`` holds int32 neuron
indices: the first ``counts[t, b, 0]`` are neurons that spiked, the entries up
to ``counts[t, b, 1]`` are gradient-eligible neurons that did not spike; the
rest is padding (id 0, value 0). Layers and ``from_dense`` list each part in
ascending order; a list built by hand may hold them in any order, each id at
most once per (t, b). ``values[t, b, k]``
is 1.0 for a spike and 0.0 for an eligible-only entry; it is the
differentiable part, its gradient is dL/dS at exactly the listed positions.
"""

from __future__ import annotations

import operator
import warnings
from typing import NamedTuple, Optional, Tuple

import torch

from ._devices import values_readable
from ._numbers import whole_number

__all__ = ["SparseSpikes", "SpikeOverflowError", "OVERFLOW_POLICIES"]

OVERFLOW_POLICIES = ("error", "drop", "grow")


class SpikeOverflowError(RuntimeError):
    """More entries (spikes, then eligible neurons) than a list's capacity."""


class Overflow(NamedTuple):
    """What did not fit: totals, and the first (t, b) where it happened."""

    spikes_dropped: int
    eligible_dropped: int
    first: Optional[Tuple[int, int, int, int]]  # (t, b, spikes, entries needed)


def check_overflow_policy(policy: str) -> str:
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; choose one of {OVERFLOW_POLICIES}")
    return policy


def raise_or_warn_overflow(
    where: str, capacity: int, overflow: Overflow, policy: str, warn: bool = True,
    note: str = "",
) -> None:
    """Applies the overflow policy for a list whose entries did not all fit; ``note``
    ends the warning (how often it comes, where the totals are)."""
    if overflow.first is None:
        return
    t, b, spikes, needed = overflow.first
    detail = (
        f"{where}: spike list capacity max_spikes={capacity} exceeded at timestep {t}, "
        f"sample {b}: {spikes} spikes and {needed - spikes} gradient-eligible neurons "
        f"need {needed} entries"
    )
    if policy == "error":
        raise SpikeOverflowError(
            detail + ". Raise max_spikes, use overflow='grow' (CPU backends) or "
            "overflow='drop' to discard the excess."
        )
    if policy == "drop" and warn:
        warnings.warn(
            detail + f"; dropped {overflow.spikes_dropped} spikes and "
            f"{overflow.eligible_dropped} eligible entries in this call{note}",
            RuntimeWarning,
            stacklevel=3,
        )


def _ranks(rows: torch.Tensor, per_row: torch.Tensor) -> torch.Tensor:
    """The rank of each entry within its row, for entries in row-major order
    (``nonzero``'s) with ``per_row`` entries in each row."""
    starts = torch.cumsum(per_row, 0) - per_row
    return torch.arange(rows.numel(), device=rows.device) - starts[rows]


def lists_from_masks(
    spikes: torch.Tensor,
    eligible: Optional[torch.Tensor],
    capacity: Optional[int],
    policy: str = "error",
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """ids [T,B,K] and counts [T,B,2] from bool masks [T,B,N].

    ``eligible`` marks gradient-eligible neurons (spikes may be marked too;
    they are listed once, as spikes). ``capacity=None`` fits the largest list.
    With ``policy="drop"`` the first ``capacity`` entries are kept, spikes first.
    """
    T, B, N = spikes.shape
    spikes = spikes.reshape(T * B, N)
    only = None if eligible is None else (eligible.reshape(T * B, N) & ~spikes)
    return _lists_from_entries(
        T, B, spikes.nonzero(as_tuple=True),
        None if only is None else only.nonzero(as_tuple=True), capacity, policy,
    )


def _lists_from_entries(
    T: int, B: int, spikes: Tuple[torch.Tensor, torch.Tensor],
    only: Optional[Tuple[torch.Tensor, torch.Tensor]], capacity: Optional[int], policy: str,
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """:func:`lists_from_masks` from the (row, neuron) entries of the spikes and of the
    eligible-only neurons, each in row-major order; rows are (t, b). Counting the rows
    with ``bincount`` over the entries, not a sum over the dense mask, keeps the cost
    with the spikes."""
    G = T * B
    n_spk = torch.bincount(spikes[0], minlength=G)
    needed = n_spk if only is None else n_spk + torch.bincount(only[0], minlength=G)
    max_needed = int(needed.max()) if needed.numel() else 0
    overflow = Overflow(0, 0, None)
    K = max(max_needed, 1) if capacity is None else int(capacity)
    if max_needed > K:
        if policy == "grow":
            K = max_needed
        else:
            g = int(torch.nonzero(needed > K)[0, 0])
            kept_spk = n_spk.clamp(max=K)
            kept = needed.clamp(max=K)
            overflow = Overflow(
                int((n_spk - kept_spk).sum()),
                int(((needed - n_spk) - (kept - kept_spk)).sum()),
                (g // B, g % B, int(n_spk[g]), int(needed[g])),
            )
    ids = torch.zeros(G, K, dtype=torch.int32, device=n_spk.device)

    def place(rows, neurons, rank):
        if max_needed > K:  # only then can an entry fall outside the list
            keep = rank < K
            rows, neurons, rank = rows[keep], neurons[keep], rank[keep]
        ids[rows, rank] = neurons.to(torch.int32)

    place(*spikes, _ranks(spikes[0], n_spk))
    count_spk = n_spk.clamp(max=K)
    count_all = count_spk
    if only is not None:
        place(*only, _ranks(only[0], needed - n_spk) + n_spk[only[0]])
        count_all = needed.clamp(max=K)
    counts = torch.stack([count_spk, count_all], -1).to(torch.int32)
    return ids.reshape(T, B, K), counts.reshape(T, B, 2), overflow


def _lists_by_nonzero(
    x: torch.Tensor, capacity: Optional[int], policy: str, eligible: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """``from_dense``'s lists from the nonzero entries of ``x``, checked to be spikes."""
    T, B, N = x.shape
    flat = x.detach().reshape(T * B, N)
    # One pass finds the spikes and, through their values, anything not 0 or 1.
    entries = flat.nonzero(as_tuple=True)
    nonzero = flat[entries]
    if not bool((nonzero == 1).all()):
        bad = nonzero[nonzero != 1]
        if not bool(torch.isfinite(bad).all()):
            raise ValueError("dense spikes contain NaN or inf")
        raise ValueError(
            f"dense spikes must be binary (0 or 1), found {bad[0].item()}: encode "
            "analog inputs first (snn_ipu.encoding.rate, latency, delta); event "
            "counts become spikes with (x > 0); for dropout multiply by an unscaled "
            "0/1 mask (F.dropout scales what it keeps by 1/(1-p))"
        )
    only = None
    if eligible is not None:
        only = (eligible.reshape(T * B, N) & (flat == 0)).nonzero(as_tuple=True)
    return _lists_from_entries(T, B, entries, only, capacity, policy)


# Ranks are float32 keys below 4N, exact while 4N <= 2**24.
_MAX_RANKED_NEURONS = 2**22


def _lists_by_rank(
    x: torch.Tensor, capacity: Optional[int], policy: str, eligible: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``from_dense``'s lists from ops of static shape, for tensors whose values cannot
    be read (``_devices``): each (t, b) lists its first K neurons in the order spikes,
    then eligible-only neurons, then the rest, each part by ascending id (a top-k of a
    rank). The listed entries are those of :func:`_lists_by_nonzero`; the padding holds
    the unlisted ids instead of 0."""
    T, B, N = x.shape
    device = x.device.type
    if capacity is not None and capacity < N and policy != "drop":
        raise ValueError(
            f"SparseSpikes.from_dense: spikes on {device!r} tensors (a model traced for "
            "the IPU) cannot be counted before their list is built, so a capacity "
            f"max_spikes={capacity} below N={N} needs overflow='drop' (spikes past it are "
            "dropped, the lowest ids kept, and the list's .dropped counts them), or "
            "max_spikes=None for lists of N entries"
        )
    if N > _MAX_RANKED_NEURONS:
        raise ValueError(
            f"SparseSpikes.from_dense: {N} neurons on {device!r} tensors; lists built in "
            f"a traced model take at most {_MAX_RANKED_NEURONS} (list them on the host)"
        )
    K = N if capacity is None else capacity
    spiking = x.detach() != 0
    rank = spiking.float() * (2 * N) + torch.arange(
        N - 1, -1, -1, dtype=torch.float32, device=x.device)
    n_spikes = spiking.sum(-1, dtype=torch.int32)
    n_listed = n_spikes
    if eligible is not None:
        only = eligible & ~spiking
        rank = rank + only.float() * N
        n_listed = n_spikes + only.sum(-1, dtype=torch.int32)
    ids = torch.topk(rank, min(K, N), dim=-1, sorted=True).indices.to(torch.int32)
    if K > N:  # a capacity above the layer width: padding with id 0, as from entries
        ids = torch.cat([ids, ids.new_zeros(T, B, K - N)], -1)
    counts = torch.stack([n_spikes.clamp(max=K), n_listed.clamp(max=K)], -1)
    return ids, counts, (n_spikes - counts[..., 0]).sum()


def listed_mask(counts: torch.Tensor, capacity: int, which: int) -> torch.Tensor:
    """bool [T,B,K]: entry k is below counts[..., which] (0: spikes, 1: all listed)."""
    k = torch.arange(capacity, device=counts.device)
    return k < counts[..., which : which + 1].long()


def listed_only(v: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``v`` ([T,B,K]) at the listed entries, 0 at the padding: selected, not multiplied by
    the mask, so that an infinite value or gradient at a padding entry does not become a
    NaN (inf * 0) that reaches a listed neuron."""
    return torch.where(listed_mask(counts, v.shape[-1], 1), v, v.new_zeros(()))


def capacity_or_none(max_spikes) -> Optional[int]:
    """A positive whole number (a Python, numpy or whole float one) or None."""
    if max_spikes is None:
        return None
    value = whole_number(max_spikes, 1, whole_floats=True)
    if value is None:
        raise ValueError(f"max_spikes must be a positive integer or None, got {max_spikes!r}")
    return value


class SparseSpikes:
    """Spikes of a layer over a whole sequence as fixed-capacity index lists.

    Args:
        ids: int32 ``[T, B, K]`` neuron indices (spikes first, then eligible-only).
        counts: int32 ``[T, B, 2]``: spikes listed, spikes + eligible listed.
        num_neurons: size of the layer the ids index into.
        values: float ``[T, B, K]``; 1 for spikes, 0 elsewhere. Built when omitted.
        validate: check the invariants (leave on for anything built by hand).

    An emulator layer checks the counts and listed ids of its input list in native
    code on every call, whatever was checked before, so a list edited after
    validation (also through ``.data`` or ``.numpy()``) raises a ValueError there,
    not a crash. (Autograd's saved lists are not scanned again in the backward
    pass: an edit through ``.data`` between a forward and its backward is not caught.)
    The values of a list whose values were not checked (``validate=False``) are
    checked by the first layer that takes it: layers take spikes as 1s, and refuse
    graded values. ``values_checked`` says whether that has happened (an edit of the
    values through ``.data`` after it is not seen).
    """

    def __init__(
        self,
        ids: torch.Tensor,
        counts: torch.Tensor,
        num_neurons: int,
        values: Optional[torch.Tensor] = None,
        validate: bool = True,
    ) -> None:
        if isinstance(num_neurons, bool) or not hasattr(num_neurons, "__index__"):
            raise TypeError(f"SparseSpikes.num_neurons must be an int, got {num_neurons!r}")
        self.ids = ids
        self.counts = counts
        self.num_neurons = operator.index(num_neurons)
        if values is None and isinstance(ids, torch.Tensor) and isinstance(counts, torch.Tensor):
            if ids.dim() == 3 and counts.dim() == 3:
                values = listed_mask(counts.long(), ids.shape[-1], 0).float()
                self.values_checked = True  # right by construction
        self.values = values
        if validate:
            self.validate()

    values_checked = False

    @classmethod
    def _made(cls, ids: torch.Tensor, counts: torch.Tensor, num_neurons: int,
              values: torch.Tensor) -> SparseSpikes:
        """A list a backend built (a layer's output): not validated
        again, and its values known to be 1 at spikes and 0 elsewhere."""
        out = cls(ids, counts, num_neurons, values, validate=False)
        out.values_checked = True
        return out

    # -- shape ---------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        return self.ids.shape[0]

    @property
    def batch_size(self) -> int:
        return self.ids.shape[1]

    @property
    def capacity(self) -> int:
        return self.ids.shape[2]

    @property
    def dense_shape(self) -> Tuple[int, int, int]:
        return (self.num_steps, self.batch_size, self.num_neurons)

    def __repr__(self) -> str:
        if not values_readable(self.counts):
            spikes = "?"  # not known while the model is traced
        else:
            spikes = int(self.counts[..., 0].sum()) if self.counts.numel() else 0
        return (
            f"SparseSpikes(T={self.num_steps}, B={self.batch_size}, "
            f"num_neurons={self.num_neurons}, capacity={self.capacity}, spikes={spikes})"
        )

    # -- checks --------------------------------------------------------------
    def validate(self) -> SparseSpikes:
        """Raises ValueError/TypeError naming the first broken invariant.

        Types and shapes are always checked; the counts, ids and values only where
        their values can be read: not on the tensors PopTorch traces a model with
        (device ``ipu``), whose list must be checked before it goes in (on the host,
        or by running the model on the emulator)."""
        ids, counts, values = self.ids, self.counts, self.values
        for name, t in (("ids", ids), ("counts", counts)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"SparseSpikes.{name} must be a torch.Tensor, got {type(t).__name__}"
                )
        if ids.dtype != torch.int32 or counts.dtype != torch.int32:
            raise TypeError(
                f"SparseSpikes ids and counts must be int32, got {ids.dtype} and {counts.dtype}"
            )
        if ids.dim() != 3:
            raise ValueError(f"SparseSpikes.ids must have shape [T, B, K], got {tuple(ids.shape)}")
        T, B, K = ids.shape
        if tuple(counts.shape) != (T, B, 2):
            raise ValueError(
                f"SparseSpikes.counts must have shape [T, B, 2] = {[T, B, 2]}, "
                f"got {list(counts.shape)}"
            )
        if not isinstance(values, torch.Tensor):
            raise TypeError(
                f"SparseSpikes.values must be a torch.Tensor, got {type(values).__name__}"
            )
        if tuple(values.shape) != (T, B, K):
            raise ValueError(
                f"SparseSpikes.values must have shape {[T, B, K]}, got {list(values.shape)}"
            )
        if not values.is_floating_point():
            raise TypeError(f"SparseSpikes.values must be floating point, got {values.dtype}")
        if self.num_neurons < 1:
            raise ValueError(f"SparseSpikes.num_neurons must be >= 1, got {self.num_neurons}")
        if values_readable(ids, counts, values):
            self._validate_values()
        return self

    def _validate_values(self) -> None:
        ids, counts, values = self.ids, self.counts, self.values
        K = ids.shape[-1]
        c0, c1 = counts[..., 0], counts[..., 1]
        if bool((c0 < 0).any()) or bool((c1 < c0).any()):
            raise ValueError(
                "SparseSpikes.counts must satisfy 0 <= counts[..., 0] <= counts[..., 1]"
            )
        if bool((c1 > K).any()):
            raise ValueError(
                f"SparseSpikes.counts exceed the capacity K={K} (largest count {int(c1.max())})"
            )
        listed = listed_mask(counts.long(), K, 1)
        # Padding too: to_dense(), spike_counts() and the dense paths index with every id.
        bad = (ids < 0) | (ids >= self.num_neurons)
        if bool(bad.any()):
            t, b, k = (int(i) for i in bad.nonzero()[0])
            padding = "" if bool(listed[t, b, k]) else (
                " (padding past counts[..., 1]: pad with a valid id such as 0)")
            raise ValueError(
                f"SparseSpikes.ids out of range at [t={t}, b={b}, k={k}]: id "
                f"{int(ids[t, b, k])} not in [0, {self.num_neurons}){padding}"
            )
        if K > 1:
            # Listed ids must be unique per (t, b): padding gets distinct negative keys.
            pad = -1 - torch.arange(K, device=ids.device, dtype=torch.int32).expand_as(ids)
            keyed = torch.where(listed, ids, pad)
            srt = torch.sort(keyed, dim=-1).values
            dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
            if bool(dup.any()):
                t, b, _ = (int(i) for i in dup.nonzero()[0])
                raise ValueError(f"SparseSpikes.ids has duplicate neuron ids at t={t}, b={b}")
        v = values.detach()
        if not bool(torch.isfinite(v).all()):
            raise ValueError("SparseSpikes.values contains NaN or inf")
        expected = listed_mask(counts.long(), K, 0).to(v.dtype)
        if not torch.equal(v, expected):
            raise ValueError(
                "SparseSpikes.values must be 1 at spike entries and 0 at eligible-only and "
                "padding entries (graded spikes are not supported)"
            )
        self.values_checked = True

    # -- conversions ---------------------------------------------------------
    @classmethod
    def from_dense(
        cls,
        x: torch.Tensor,
        max_spikes: Optional[int] = None,
        overflow: str = "error",
        eligible: Optional[torch.Tensor] = None,
        time_first: bool = True,
    ) -> SparseSpikes:
        """Lists the spikes of a binary ``[T, B, N]`` tensor (``[B, T, N]`` with
        ``time_first=False``, and ``eligible`` alike; the list is time-major).

        Differentiable: the gradient of ``values`` flows back into ``x`` at the
        listed positions, i.e. the spikes and the positions marked in the bool
        mask ``eligible``. ``max_spikes=None`` fits the busiest (t, b). The list's
        ``dropped`` is the number of spikes the capacity left out (``overflow="drop"``).

        Inside a model PopTorch traces for the IPU (``ipu`` tensors, whose values
        cannot be read and whose shapes cannot depend on them) the list is built
        from ops of static shape instead: ``max_spikes=None`` then means N entries
        (every neuron fits), a smaller capacity needs ``overflow="drop"``,
        ``dropped`` is a tensor, and ``x`` cannot be checked to be binary (any
        nonzero is listed as a spike with its value): check inputs on the host.
        """
        check_overflow_policy(overflow)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"spikes must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3:
            order = "[T, B, N] (time-major)" if time_first else "[B, T, N] (time_first=False)"
            raise ValueError(f"dense spikes must have shape {order}, got {tuple(x.shape)}")
        if not time_first:
            x = x.transpose(0, 1)
            if isinstance(eligible, torch.Tensor) and eligible.dim() == 3:
                eligible = eligible.transpose(0, 1)
        if x.shape[-1] < 1:
            raise ValueError("dense spikes need at least one neuron")
        max_spikes = capacity_or_none(max_spikes)
        if eligible is not None:
            if not isinstance(eligible, torch.Tensor) or eligible.dtype != torch.bool:
                # a float mask would list every nonzero (NaN included) entry
                what = eligible.dtype if isinstance(eligible, torch.Tensor) else type(
                    eligible).__name__
                raise TypeError(f"eligible must be a bool torch.Tensor mask, got {what}")
            if tuple(eligible.shape) != tuple(x.shape):
                raise ValueError(
                    f"eligible mask must have the shape of the spikes {tuple(x.shape)}, "
                    f"got {tuple(eligible.shape)}"
                )
        readable = values_readable(x, eligible)
        if readable:
            ids, counts, ovf = _lists_by_nonzero(x, max_spikes, overflow, eligible)
            raise_or_warn_overflow("SparseSpikes.from_dense", ids.shape[-1], ovf, overflow)
            dropped = ovf.spikes_dropped
        else:
            ids, counts, dropped = _lists_by_rank(x, max_spikes, overflow, eligible)
        xf = x if x.is_floating_point() else x.float()
        # x is 0 at eligible-only entries, so values is too; the mask keeps their gradient.
        values = listed_only(torch.gather(xf, -1, ids.long()), counts)
        out = cls(ids, counts, x.shape[-1], values, validate=False)
        out.values_checked = readable  # the static lists take x's values unchecked
        out.dropped = dropped
        return out

    @classmethod
    def from_events(cls, events, num_neurons: Optional[int] = None, **grid) -> SparseSpikes:
        """Bins event streams (tonic's structured arrays or SHD's ``(times, units)``
        pairs) straight into a time-major list; see :func:`snn_ipu.events.events_to_spikes`
        for the time grid (``num_steps``, ``dt``, ``duration``, ``t_start``),
        ``sensor_size``, ``max_spikes``, ``overflow`` and ``outside``. Several events of
        one neuron in one bin make one spike."""
        from .events import events_to_spikes

        return events_to_spikes(events, num_neurons, **grid)

    def to_dense(self) -> torch.Tensor:
        """Dense ``[T, B, N]`` spikes (differentiable through ``values``)."""
        out = torch.zeros(self.dense_shape, dtype=self.values.dtype, device=self.values.device)
        return out.scatter_add(-1, self.ids.long(), listed_only(self.values, self.counts))

    def spike_counts(self) -> torch.Tensor:
        """Spikes per neuron summed over time, ``[B, N]`` (differentiable)."""
        if _SpikeCounts.takes(self):
            return _SpikeCounts.apply(self.ids, self.counts, self.values, self.num_neurons)
        T, B, K = self.ids.shape
        vals = listed_only(self.values, self.counts).permute(1, 0, 2).reshape(B, T * K)
        idx = self.ids.long().permute(1, 0, 2).reshape(B, T * K)
        out = torch.zeros(B, self.num_neurons, dtype=self.values.dtype, device=self.values.device)
        return out.scatter_add(-1, idx, vals)

    def num_spikes(self) -> torch.Tensor:
        """Spikes per (t, b), ``[T, B]`` int64."""
        return self.counts[..., 0].long()

    def detach(self) -> SparseSpikes:
        out = SparseSpikes(self.ids, self.counts, self.num_neurons, self.values.detach(), False)
        out.values_checked = self.values_checked
        return out


class _SpikeCounts(torch.autograd.Function):
    """``spike_counts`` of a list on the CPU in native code, which reads the listed
    entries alone: torch's scatter over the whole ``[T, B, K]`` list (the form for
    other devices, which graph compilers trace) reads every padding entry too, and
    took ~2 ms of a 13 ms training step at 1% activity (forward and backward)."""

    @staticmethod
    def takes(spikes: SparseSpikes) -> bool:
        return all(t.device.type == "cpu" for t in (spikes.ids, spikes.counts, spikes.values)) \
            and spikes.values.dtype in (torch.float32, torch.float64)

    @staticmethod
    def forward(ctx, ids, counts, values, num_neurons):
        from . import _C

        ctx.save_for_backward(ids, counts)
        try:
            counted = _C.spike_counts(
                numpy_view(ids), numpy_view(counts), numpy_view(values), num_neurons
            )
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
        from . import _C

        return None, None, torch.from_numpy(
            _C.spike_counts_grad(numpy_view(ids), numpy_view(counts), numpy_view(grad))
        ), None


def numpy_view(t: torch.Tensor):
    """A tensor's data as a C-contiguous numpy array for the native code (copied only
    where it is not contiguous)."""
    return t.detach().contiguous().numpy()


def _require_steps_and_samples(steps: int, batch: int, where: str) -> None:
    if steps < 1 or batch < 1:
        raise ValueError(
            f"{where}: input has T={steps} timesteps and B={batch} samples; a layer needs "
            "at least one of each"
        )


def _check_values_once(spikes: SparseSpikes, where: str) -> None:
    """The values at the listed entries of a list whose values were never checked
    (built with ``validate=False``): every backend takes spikes as 1s (the emulator
    adds whole weight rows, where the reference's dense product would scale by a
    graded value), so a graded value is refused, once per list."""
    if spikes.values_checked or not values_readable(spikes.values, spikes.counts):
        return
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
            f"k={k} {what} (graded spikes are not supported)"
        )
    spikes.values_checked = True


def as_sparse(x, num_neurons: int, where: str) -> SparseSpikes:
    """Accepts a SparseSpikes or a dense binary [T, B, N] tensor for a layer input."""
    if isinstance(x, SparseSpikes):
        if x.num_neurons != num_neurons:
            raise ValueError(
                f"{where}: input has {x.num_neurons} neurons but in_features={num_neurons}"
            )
        _require_steps_and_samples(x.num_steps, x.batch_size, where)
        _check_values_once(x, where)
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
