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
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch.autograd import forward_ad

from ._devices import values_readable
from ._numbers import MAX_SIZE, flag, whole_number
from .lists import listed_mask, listed_only, lists_by_nonzero, lists_by_rank
from .overflow import check_overflow_policy, raise_or_warn_overflow

__all__ = ["SparseSpikes", "capacity_or_none"]


def capacity_or_none(max_spikes) -> Optional[int]:
    """A positive whole number (a Python, numpy or whole float one) or None."""
    if max_spikes is None:
        return None
    value = whole_number(max_spikes, 1, whole_floats=True)
    if value is None:
        raise ValueError(f"max_spikes must be a positive integer or None, got {max_spikes!r}")
    return value


def _differentiated(x: torch.Tensor) -> bool:
    """Whether autograd records ``x``'s use, or it carries a forward-mode tangent (a
    gradient the values must pass on, or a backend must refuse)."""
    return (x.requires_grad and torch.is_grad_enabled()) or \
        forward_ad.unpack_dual(x).tangent is not None


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
    not a crash. The backward pass reads private copies of the lists, so an edit
    between a forward pass and its backward changes nothing there.
    A list built with ``validate=False``, or whose ``ids``, ``counts`` or ``values``
    were replaced, is checked in full by the first layer that takes it (the same
    checks as ``validate``, on every backend): layers take spikes as 1s, and refuse
    graded values (to drop spikes, see :class:`snn_ipu.SpikeDropout`).
    ``values_checked`` says whether that has happened since the tensors were last
    set or edited in place (an edit through ``.data`` or ``.numpy()`` is not seen).
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
        if not 1 <= self.num_neurons <= MAX_SIZE:
            # ids are int32: a larger layer could not be indexed
            raise ValueError(
                f"SparseSpikes.num_neurons must be >= 1 and below 2**31, got {self.num_neurons}"
            )
        if values is None and isinstance(ids, torch.Tensor) and isinstance(counts, torch.Tensor):
            if ids.dim() == 3 and counts.dim() == 3:
                values = listed_mask(counts.long(), ids.shape[-1], 0).float()
        self.values = values
        if flag("validate", validate):
            self.validate()

    # Whether the list was checked (``validate``, or the first layer that took it): its
    # counts, ids (in range, each at most once per (t, b)) and values (1 at spikes, 0 at
    # eligible-only entries). Held as the three tensors' version counters at the check:
    # replacing ``ids``, ``counts`` or ``values``, or editing one in place with a torch
    # op, clears it, so that the next layer checks the list again, on every backend. An
    # edit that bypasses the counters (``.data``, ``.numpy()``) is not seen here: every
    # layer call still scans the counts and ids (the emulator natively, the other
    # backends in torch).
    _checked_at: Optional[tuple] = None

    @property
    def _checked(self) -> bool:
        return self._checked_at is not None and self._checked_at == self._versions()

    @_checked.setter
    def _checked(self, value: bool) -> None:
        self._checked_at = self._versions() if value else None

    def _versions(self) -> tuple:
        """The version counters of ids, counts and values (None for a tensor made under
        ``torch.inference_mode``, which has none: its edits cannot be seen)."""
        return tuple(None if not isinstance(t, torch.Tensor) or t.is_inference()
                     else t._version for t in (self._ids, self._counts, self._values))

    def __getstate__(self) -> Dict[str, Any]:
        # the check's mark as a flag: unpickled tensors (a DataLoader worker's lists, a
        # deep copy) hold the same values under other version counters
        state = dict(self.__dict__)
        state["_checked_at"] = self._checked
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        checked = state.pop("_checked_at", False)
        self.__dict__.update(state)
        self._checked = bool(checked)

    @property
    def values_checked(self) -> bool:
        """Whether the list was checked since its ids, counts and values were set or
        edited in place."""
        return self._checked

    @property
    def ids(self) -> torch.Tensor:
        return self._ids

    @ids.setter
    def ids(self, value: torch.Tensor) -> None:
        self._ids, self._checked = value, False

    @property
    def counts(self) -> torch.Tensor:
        return self._counts

    @counts.setter
    def counts(self, value: torch.Tensor) -> None:
        self._counts, self._checked = value, False

    @property
    def values(self) -> torch.Tensor:
        return self._values

    @values.setter
    def values(self, value: torch.Tensor) -> None:
        self._values, self._checked = value, False

    # Set by the ipu and ipu_graph backends on the lists their ops make: to_dense() as
    # an op of the device (snn_ipu.backends.ipu.dense_on_device), not as a scatter with
    # the integer ids, which PopART cannot differentiate through (docs/ipu.md).
    _dense_on_device: Optional[Callable[[SparseSpikes], torch.Tensor]] = None

    @property
    def _carries_grad(self) -> bool:
        """Whether anything upstream differentiates the values: they require grad, or an
        IPU op made the list (while PopTorch traces, the op's outputs do not say so)."""
        return bool(self.values.requires_grad or self._dense_on_device is not None)

    @classmethod
    def _made(cls, ids: torch.Tensor, counts: torch.Tensor, num_neurons: int,
              values: Optional[torch.Tensor] = None) -> SparseSpikes:
        """A list a backend or converter built (a layer's output, binned events): not
        validated again, its values known to be 1 at spikes and 0 elsewhere."""
        out = cls(ids, counts, num_neurons, values, validate=False)
        out._checked = True
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

    # -- what snnTorch code reaches for on a spike record ----------------------
    @property
    def shape(self) -> torch.Size:
        """The dense shape ``[T, B, N]``, as an snnTorch spike record's ``.shape``."""
        return torch.Size(self.dense_shape)

    def size(self, dim: Optional[int] = None):
        """``shape``, or its ``dim``-th size, as ``torch.Tensor.size``."""
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 3

    def sum(self, dim: Optional[int] = None) -> torch.Tensor:
        """Spikes summed as ``to_dense().sum(dim)`` would (differentiable): ``dim=0``
        is each neuron's spikes over time, ``[B, N]`` (``spike_counts()``, read from the
        lists), ``None`` all spikes; other dims go through the dense tensor."""
        if dim is None:
            return listed_only(self.values, self.counts).sum()
        if dim in (0, -3):
            return self.spike_counts()
        return self.to_dense().sum(dim)

    def __getitem__(self, index):
        raise TypeError(
            "SparseSpikes is a list of spikes, not a tensor: index its dense form, "
            "spikes.to_dense()[...] ([T, B, N]), or read ids/counts/values")

    def __getattr__(self, name: str):
        # Only reached where normal lookup fails: a torch.Tensor method on a list.
        if not name.startswith("_") and hasattr(torch.Tensor, name):
            raise AttributeError(
                f"SparseSpikes has no .{name}: it is a list of spikes, not a tensor; call "
                f".to_dense() for the [T, B, N] tensor (spike_counts() and sum(0) count "
                "spikes per neuron without it)")
        raise AttributeError(f"'SparseSpikes' object has no attribute {name!r}")

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
        self._check_shapes()
        if values_readable(self.ids, self.counts, self.values):
            self._check_counts_and_ids()
            self._check_unique()
            self._check_values()
            self._checked = True
        return self

    def _check_shapes(self) -> None:
        """Types and shapes: a list whose ids are not [T, B, K] would fail far from
        its cause (an IndexError in a backend)."""
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
        if not ids.device == counts.device == values.device:
            # every backend indexes values with ids: torch's scatter with an index on
            # another device can return garbage rather than raise (a ``meta`` index into
            # a CPU tensor), and ``to_dense()`` allocates on the values' device
            raise ValueError(
                "SparseSpikes ids, counts and values must be on one device, got "
                f"{ids.device}, {counts.device} and {values.device} (move the list with "
                "spikes.to(device))"
            )

    def _check_counts_and_ids(self) -> None:
        """0 <= counts[..., 0] <= counts[..., 1] <= K and every id in range: what the
        emulator's native scan checks on every call, and the other backends with this."""
        ids, counts = self.ids, self.counts
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

    def _check_unique(self) -> None:
        """Each listed id at most once per (t, b): a neuron listed twice would count
        twice on every backend."""
        ids, counts = self.ids, self.counts
        K = ids.shape[-1]
        listed = listed_mask(counts.long(), K, 1)
        if K > 1:
            # Listed ids must be unique per (t, b): padding gets distinct negative keys.
            pad = -1 - torch.arange(K, device=ids.device, dtype=torch.int32).expand_as(ids)
            keyed = torch.where(listed, ids, pad)
            srt = torch.sort(keyed, dim=-1).values
            dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
            if bool(dup.any()):
                t, b, _ = (int(i) for i in dup.nonzero()[0])
                raise ValueError(f"SparseSpikes.ids has duplicate neuron ids at t={t}, b={b}")

    def _check_values(self) -> None:
        counts, values = self.counts, self.values
        K = values.shape[-1]
        v = values.detach()
        if not bool(torch.isfinite(v).all()):
            raise ValueError("SparseSpikes.values contains NaN or inf")
        expected = listed_mask(counts.long(), K, 0).to(v.dtype)
        if not torch.equal(v, expected):
            raise ValueError(
                "SparseSpikes.values must be 1 at spike entries and 0 at eligible-only and "
                "padding entries (graded spikes are not supported)"
            )

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
        nonzero is listed as a spike, which the ipu backend's op takes as a spike of 1;
        its value only carries the gradient): check inputs on the host.
        """
        check_overflow_policy(overflow)
        time_first = flag("time_first", time_first)
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
            ids, counts, ovf = lists_by_nonzero(x, max_spikes, overflow, eligible)
            raise_or_warn_overflow("SparseSpikes.from_dense", ids.shape[-1], ovf, overflow)
            dropped = ovf.spikes_dropped
        else:
            ids, counts, dropped = lists_by_rank(x, max_spikes, overflow, eligible)
        xf = x if x.is_floating_point() else x.float()
        if readable and not _differentiated(x):
            # x was checked to be 0/1 (1 at the spikes, 0 at eligible-only entries), and
            # nothing differentiates it: the values are the spike mask, without a gather
            values = listed_mask(counts, ids.shape[-1], 0).to(xf.dtype)
        else:
            # x is 0 at eligible-only entries, so values is too; the mask keeps their
            # gradient.
            values = listed_only(torch.gather(xf, -1, ids.long()), counts)
        out = cls(ids, counts, x.shape[-1], values, validate=False)
        out._checked = readable  # the static lists take x's values unchecked
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
        if self._dense_on_device is not None:
            return self._dense_on_device(self)
        out = torch.zeros(self.dense_shape, dtype=self.values.dtype, device=self.values.device)
        return out.scatter_add(-1, self.ids.long(), listed_only(self.values, self.counts))

    def spike_counts(self) -> torch.Tensor:
        """Spikes per neuron summed over time, ``[B, N]`` (differentiable)."""
        from ._spike_counts import SpikeCounts  # the native extension, on first use

        if self._dense_on_device is not None:
            return self.to_dense().sum(0)
        if SpikeCounts.takes(self):
            return SpikeCounts.apply(self.ids, self.counts, self.values, self.num_neurons)
        T, B, K = self.ids.shape
        vals = listed_only(self.values, self.counts).permute(1, 0, 2).reshape(B, T * K)
        idx = self.ids.long().permute(1, 0, 2).reshape(B, T * K)
        out = torch.zeros(B, self.num_neurons, dtype=self.values.dtype, device=self.values.device)
        return out.scatter_add(-1, idx, vals)

    def num_spikes(self) -> torch.Tensor:
        """Spikes per (t, b), ``[T, B]`` int64."""
        return self.counts[..., 0].long()

    def to(self, device: Union[str, torch.device]) -> SparseSpikes:
        """The list on ``device`` (``"cuda"``, ``"cpu"``, ...), as ``Tensor.to``: ids,
        counts and values moved (values differentiably), nothing else changed."""
        if isinstance(device, torch.dtype):
            # torch.device(torch.float16) fails with a message that names neither
            raise TypeError(f"SparseSpikes.to takes a device, got the dtype {device}: a "
                            "list's ids and counts are int32 and its values follow the "
                            "dtype of what made them (to_dense() gives a tensor to cast)")
        device = torch.device(device)
        out = SparseSpikes(self.ids.to(device), self.counts.to(device), self.num_neurons,
                           self.values.to(device), False)
        out._checked = self.values_checked
        return self._with_dropped(out)

    def detach(self) -> SparseSpikes:
        out = SparseSpikes(self.ids, self.counts, self.num_neurons, self.values.detach(), False)
        out._checked = self.values_checked
        return self._with_dropped(out)

    def _with_dropped(self, out: SparseSpikes) -> SparseSpikes:
        """``out`` with this list's ``dropped`` count (:meth:`from_dense`), where it has one."""
        if "dropped" in self.__dict__:
            out.dropped = self.dropped
        return out
