"""Spike-list overflow of layers that run on an IPU, brought back to the host.

On a CPU a layer counts what did not fit its ``max_spikes`` after every call and
applies its ``overflow`` policy there and then. On an IPU the layer's Python code
runs once, when PopTorch traces the model; after that the compiled program runs
without it, and a list that overflows can only drop (shapes are fixed). So the
counts travel as model outputs: each spiking op's per-step counts are reduced on
the device to one row of a few int32 numbers per layer call, the model returns
those rows, and :func:`record` turns them into ``layer.stats`` and the policy on
the host::

    class Net(torch.nn.Module):
        def forward(self, x, labels):
            with ipu_overflow.OverflowCounts(self.layers) as overflow:
                out = self.layers(x)
            loss = poptorch.identity_loss(loss_fn(out, labels), "none")
            return out, loss, overflow.counts

    out, loss, counts = training_model(x, labels)
    ipu_overflow.record(net.layers, counts)   # stats; warns (drop) or raises (error)

Inside a compiled training loop the step that overflowed has run to its end (and
updated the weights) by the time the host sees its counts: ``overflow="error"``
raises after that step, ``"drop"`` warns once per layer, ``"grow"`` cannot grow a
compiled capacity and raises like ``"error"``. Set
``poptorch.Options().outputMode(poptorch.OutputMode.All)`` so that the rows of
every micro-batch come back; with PopTorch's training default (``Final``) only
the last one's do, and ``Sum`` adds them up (:func:`record` refuses such rows).
The same model runs on a CPU unchanged: there the layers keep their own stats and
``counts`` holds no rows.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from .overflow import Overflow, SpikeOverflowError, raise_or_warn_overflow
from .spikes import SparseSpikes

__all__ = ["ROW", "OverflowCounts", "overflow_row", "record", "spiking_layers", "totals"]

# One int32 row per layer call: where it comes from, then what its lists needed.
ROW = (
    "layer",             # index of the layer among spiking_layers(model)
    "num_steps",         # T
    "batch_size",        # B
    "capacity",          # K, the list's max_spikes on the device
    "spikes",            # spikes of the call (all of them, listed or not)
    "eligible_listed",   # eligible-only entries listed
    "needed_capacity",   # the most entries any (t, b) needed
    "spikes_dropped",
    "eligible_dropped",
    "first_overflow",    # t * B + b of the first (t, b) over capacity; -1: none
    "first_spikes",      # spikes there
    "first_needed",      # entries needed there
)

_active: List[OverflowCounts] = []


def spiking_layers(model: nn.Module) -> List[nn.Module]:
    """The layers whose lists can overflow, in ``model.modules()`` order: the order
    that numbers the rows' ``layer`` field."""
    from .layers import _SpikingLayer

    return [m for m in model.modules() if isinstance(m, _SpikingLayer)]


def overflow_row(counts: torch.Tensor, needed: torch.Tensor, capacity: int, layer: int
                 ) -> torch.Tensor:
    """The row of one call from an op's ``counts`` (int32 ``[T, B, 2]``: spikes and
    entries listed) and ``needed`` (``[T, B, 2]``: spikes and entries before the
    capacity cut), with static-shape ops only (it is traced into the IPU program)."""
    T, B = counts.shape[:2]
    listed = counts.to(torch.int32)
    need = needed.to(torch.int32)  # whole numbers below 2**24: exact in float32
    spikes, entries = need[..., 0].reshape(-1), need[..., 1].reshape(-1)
    listed_spikes, listed_all = listed[..., 0].reshape(-1), listed[..., 1].reshape(-1)
    rows = T * B
    over = entries > capacity
    index = torch.arange(rows, dtype=torch.int32, device=counts.device)
    first = torch.where(over, index, torch.full_like(index, rows)).min()
    at = first.clamp(max=rows - 1).reshape(1).long()
    none = first == rows

    def const(v: int) -> torch.Tensor:
        return torch.full((), v, dtype=torch.int32, device=counts.device)

    def total(t: torch.Tensor) -> torch.Tensor:  # torch sums int32 into int64
        return t.sum().to(torch.int32)

    return torch.stack([
        const(layer), const(T), const(B), const(capacity),
        total(spikes),
        total(listed_all - listed_spikes),
        entries.max().to(torch.int32),
        total(spikes - listed_spikes),
        total((entries - spikes) - (listed_all - listed_spikes)),
        torch.where(none, const(-1), first.to(torch.int32)),
        torch.where(none, const(0), spikes.gather(0, at).reshape(())),
        torch.where(none, const(0), entries.gather(0, at).reshape(())),
    ])


class OverflowCounts:
    """Collects the rows of the IPU layer calls made inside the ``with`` block;
    ``counts`` (int32 ``[calls, len(ROW)]``) is what the model returns for
    :func:`record`. ``model``: the module holding the layers (numbers the rows)."""

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"OverflowCounts takes the torch.nn.Module holding the layers, "
                            f"got {type(model).__name__}")
        self.model = model
        self._rows: List[torch.Tensor] = []
        self._hooks: list = []
        self._pending: dict = {}  # id of an IPU op's output list -> its layer's name
        self.counts: Optional[torch.Tensor] = None

    def __enter__(self) -> OverflowCounts:
        _active.append(self)
        for index, layer in enumerate(spiking_layers(self.model)):
            self._hooks.append(layer.register_forward_hook(
                lambda layer, args, out, index=index: self._add(index, out)))
        return self

    def __exit__(self, exc_type, *exc) -> None:
        _active.remove(self)
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self._pending and exc_type is None:
            names = ", ".join(sorted(set(self._pending.values())))
            raise ValueError(
                f"{names} ran on the IPU inside OverflowCounts({type(self.model).__name__}) "
                "but is not one of its modules, so its overflow would go unseen: give "
                "OverflowCounts the module that holds every layer it should count")
        if self._rows:
            self.counts = torch.stack(self._rows)
        else:  # nothing ran on an IPU (a CPU run): the layers kept their own stats
            self.counts = torch.zeros(0, len(ROW), dtype=torch.int32)

    def _add(self, index: int, out) -> None:
        needed = getattr(out, "ipu_needed", None)
        if needed is not None:  # an IPU op's output list
            self._pending.pop(id(out), None)
            self._rows.append(overflow_row(out.counts, needed, out.capacity, index))


def collecting() -> bool:
    """Whether a layer call's rows go to an :class:`OverflowCounts` (at trace time)."""
    return bool(_active)


def attach(spikes: SparseSpikes, needed: torch.Tensor, name: str) -> None:
    """Keeps an IPU op's ``needed`` counts with its output list, where the
    :class:`OverflowCounts` of the layer's model finds them (``name``: the layer's,
    should none of the active ones hold it)."""
    spikes.ipu_needed = needed
    for collector in _active:
        collector._pending[id(spikes)] = name


def uncollected_warning(policy: str, capacity: int) -> str:
    """What a layer traced outside an :class:`OverflowCounts` warns (once)."""
    return (
        f"on the IPU a list that overflows max_spikes={capacity} drops what does not fit, "
        f"and the host learns of it only through snn_ipu.ipu_overflow (this call is not "
        f"inside an OverflowCounts, so overflow={policy!r} cannot be applied and nothing "
        "reaches layer.stats). Return OverflowCounts(...).counts from the model and pass "
        "them to ipu_overflow.record() (snn_ipu.poptorch_training does); see docs/ipu.md")


def _rows(counts: torch.Tensor) -> Iterator[List[int]]:
    if not isinstance(counts, torch.Tensor) or counts.dtype not in (torch.int32, torch.int64):
        raise TypeError("record() takes the int32 counts an OverflowCounts returned, got "
                        f"{type(counts).__name__}"
                        + (f" of {counts.dtype}" if isinstance(counts, torch.Tensor) else ""))
    if counts.numel() % len(ROW):
        raise ValueError(f"record(): counts of shape {tuple(counts.shape)} are not rows of "
                         f"{len(ROW)} (an OverflowCounts' counts, as PopTorch returned them)")
    yield from counts.detach().cpu().reshape(-1, len(ROW)).tolist()


_ONE_ROW_EACH = ("PopTorch returns one row per layer call only with "
                 "poptorch.Options().outputMode(poptorch.OutputMode.All); OutputMode.Sum "
                 "adds the rows of all micro-batches up")


def _row_fault(f: dict, layer: nn.Module) -> Optional[str]:
    """What makes ``f`` no row of one call of ``layer`` as compiled (None: nothing):
    the relations every row of :func:`overflow_row` keeps, which rows summed over
    micro-batches (``OutputMode.Sum``) or from another model break."""
    T, B, K, N = f["num_steps"], f["batch_size"], f["capacity"], layer.out_features
    first = f["first_overflow"]
    compiled = getattr(layer, "max_spikes", None)
    if T < 1 or B < 1 or not 0 <= K <= N:
        return f"num_steps={T}, batch_size={B}, capacity={K} for {N} neurons"
    if compiled is not None and K != min(compiled, N):
        return f"capacity {K}, but the layer's max_spikes is {compiled}"
    if not 0 <= f["needed_capacity"] <= N:
        return f"{f['needed_capacity']} entries needed at one step for {N} neurons"
    if min(f["spikes"], f["eligible_listed"], f["spikes_dropped"], f["eligible_dropped"]) < 0 \
            or f["spikes_dropped"] > f["spikes"]:
        return (f"{f['spikes']} spikes, {f['spikes_dropped']} dropped, "
                f"{f['eligible_listed']} eligible listed, {f['eligible_dropped']} dropped")
    if first == -1:
        if f["spikes_dropped"] or f["eligible_dropped"] or f["first_spikes"] \
                or f["first_needed"]:
            return (f"entries dropped ({f['spikes_dropped']} spikes, "
                    f"{f['eligible_dropped']} eligible) but no step over capacity")
    elif not 0 <= first < T * B:
        return f"first step over capacity {first}, of {T * B} steps and samples"
    elif not K < f["first_needed"] <= f["needed_capacity"] or \
            not 0 <= f["first_spikes"] <= f["first_needed"]:
        return (f"{f['first_needed']} entries ({f['first_spikes']} spikes) needed at the "
                f"first step over capacity {K}")
    return None


def _checked_rows(model: nn.Module, counts: torch.Tensor,
                  caller: str) -> List[Tuple[nn.Module, dict]]:
    """(layer, row as a dict) of every row of ``counts``, all checked to be one call's of
    a spiking layer of ``model`` (:func:`_row_fault`) before any is returned."""
    layers = spiking_layers(model)
    out = []
    for i, f in enumerate(dict(zip(ROW, row)) for row in _rows(counts)):
        if not 0 <= f["layer"] < len(layers):
            raise ValueError(f"{caller}: a row names layer {f['layer']}, but the model has "
                             f"{len(layers)} spiking layers: pass the module given to "
                             f"OverflowCounts ({_ONE_ROW_EACH})")
        layer = layers[f["layer"]]
        fault = _row_fault(f, layer)
        if fault is not None:
            raise ValueError(
                f"{caller}: row {i} is not the counts of one call of {layer.name} "
                f"({fault}): {_ONE_ROW_EACH}; pass the counts of the model as compiled, of "
                "the module given to OverflowCounts")
        out.append((layer, f))
    return out


def record(model: nn.Module, counts: torch.Tensor) -> None:
    """Records the rows of ``counts`` (an :class:`OverflowCounts`' output, as
    PopTorch returns it: any number of iterations, replicas and calls) into the
    stats of ``model``'s spiking layers, one call after another, and applies each
    layer's overflow policy: ``"error"`` and ``"grow"`` raise
    :class:`~snn_ipu.SpikeOverflowError`, ``"drop"`` warns once per layer. Rows that
    cannot be one call's (summed by ``OutputMode.Sum``, another model's) are refused
    before any is recorded; the rows ``OutputMode.Final`` or ``EveryN`` leave out
    cannot be seen here."""
    from .backends.contract import CallRecord

    for layer, f in _checked_rows(model, counts, "record()"):
        B = f["batch_size"]
        first = None if f["first_overflow"] < 0 else (
            f["first_overflow"] // B, f["first_overflow"] % B, f["first_spikes"],
            f["first_needed"])
        call = CallRecord(
            "ipu", f["num_steps"], B, layer.out_features, total_spikes=f["spikes"],
            capacity=f["capacity"], needed_capacity=f["needed_capacity"],
            eligible_listed=f["eligible_listed"],
            overflow=Overflow(f["spikes_dropped"], f["eligible_dropped"], first))
        layer._keep(call)  # the layer's stats and running totals, as after a CPU call
        if first is None:
            continue
        if layer.overflow == "drop":
            raise_or_warn_overflow(
                layer.name, f["capacity"], call.overflow, "drop",
                warn=not layer.overflow_warned,
                note=" on the IPU (warned once per layer; see the layer's stats for running "
                     "totals)", planned=layer.max_spikes is None)
            layer.overflow_warned = True
        else:
            try:
                raise_or_warn_overflow(layer.name, f["capacity"], call.overflow, "error",
                                       planned=layer.max_spikes is None)
            except SpikeOverflowError as exc:
                grow = (" (overflow='grow' cannot grow a compiled capacity: raise max_spikes "
                        "and compile again)" if layer.overflow == "grow" else "")
                raise SpikeOverflowError(
                    f"{exc}{grow} This happened on the IPU; the step that overflowed has "
                    "run (its spikes past the capacity were dropped)") from None


def totals(model: nn.Module, counts: torch.Tensor) -> Dict[str, Dict[str, float]]:
    """What ``counts`` (rows of any number of calls: an epoch's, concatenated) say of
    each spiking layer of ``model``, by name: ``activity`` (its spikes per neuron and
    step over all of them), ``needed_capacity`` (the most entries any step needed) and
    ``spikes_dropped``. ``layer.stats`` holds only the last call's; a layer without rows
    is left out. The rows are checked as :func:`record` checks them."""
    out: Dict[str, Dict[str, float]] = {}
    steps: Dict[str, int] = {}
    for layer, f in _checked_rows(model, counts, "totals()"):
        t = out.setdefault(layer.name, {"activity": 0.0, "needed_capacity": 0,
                                        "spikes_dropped": 0})
        t["activity"] += f["spikes"]
        t["needed_capacity"] = max(t["needed_capacity"], f["needed_capacity"])
        t["spikes_dropped"] += f["spikes_dropped"]
        steps[layer.name] = steps.get(layer.name, 0) + (
            f["num_steps"] * f["batch_size"] * layer.out_features)
    for name, t in out.items():
        t["activity"] /= max(steps[name], 1)
    return out
