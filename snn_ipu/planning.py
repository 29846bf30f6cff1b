"""Will a network fit, and how fast will it train? Ask the tile planner.

``plan(model, batch_size, num_steps)`` places every layer with the C++
planner (``popops_ext/plan``, the same one the Poplar builder and the
emulator run) and reports per layer: tiles used, bytes per tile against the
624 KiB of an IPU tile, exchange bytes and estimated cycles per training
step, and whether it fits, with what to change when it does not.
``place(model, batch_size, num_steps)`` plans the same way and hands each
layer its tiles, so that the ``ipu`` backend builds the layers where the
report counted them.

The estimates are a model (instruction counts of the codelets, exchange at
4 bytes per tile per cycle), not measurements on an IPU.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ._numbers import MAX_SIZE, whole_number
from .backends.work_split import MODEL_CODES, model_code, planning_threads

__all__ = ["IpuTiles", "LayerPlanRow", "PlanError", "PlanReport", "place", "plan"]

_MODEL_NAMES = {code: name for name, code in MODEL_CODES.items()}


class PlanError(ValueError):
    """A network does not fit on the target; the message says what to change."""


@dataclass(frozen=True)
class LayerPlanRow:
    """One layer's plan. Bytes are per tile (IPU) or per work item (host)."""

    name: str
    model: str
    in_features: int
    out_features: int
    recurrent: bool
    capacity_in: int
    capacity_out: int
    num_tiles: int
    neurons_per_tile: int
    bytes_per_tile_max: int
    bytes_per_tile_mean: float
    bytes_budget: int
    exchange_bytes_per_step: int
    cycles_per_step: int
    samples_per_second: float
    fits: bool
    reason: str
    sample_groups: int = 1  # host: a work item per (tile, group of the batch's samples)
    details: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_plan(cls, name: str, d: Dict[str, Any]) -> LayerPlanRow:
        return cls(
            name=name,
            model=_MODEL_NAMES[int(d["model"])],
            in_features=int(d["in_features"]),
            out_features=int(d["out_features"]),
            recurrent=bool(d["recurrent"]),
            capacity_in=int(d["capacity_in"]),
            capacity_out=int(d["capacity_out"]),
            num_tiles=int(d["num_tiles"]),
            neurons_per_tile=int(d["neurons_per_tile_max"]),
            bytes_per_tile_max=int(d["bytes_per_tile_max"]),
            bytes_per_tile_mean=float(d["bytes_per_tile_mean"]),
            bytes_budget=int(d["bytes_budget"]),
            exchange_bytes_per_step=int(d["exchange_bytes_per_step"]),
            cycles_per_step=int(d["cycles_training_step"]),
            samples_per_second=float(d["samples_per_second"]),
            fits=bool(d["fits"]),
            reason=str(d["reason"]),
            sample_groups=int(d["sample_groups"]),
            details=dict(d),
        )


@dataclass(frozen=True)
class PlanReport:
    """Plans of all layers of a network for one batch size and sequence length.

    A training step runs the layers one after another, so its cycles are the
    sum over layers. On an IPU every layer's data stays resident: when the
    layers' tiles add up to no more than the IPU has, each layer gets its own
    tiles (``tile_offsets``); otherwise they are laid out from tile 0 and the
    network fits only if the layers' busiest tiles together fit in one tile
    (a conservative test).
    """

    target: str
    batch_size: int
    num_steps: int
    layers: List[LayerPlanRow]
    clock_hz: float

    @property
    def is_ipu(self) -> bool:
        return self.target != "host"

    @property
    def target_tiles(self) -> int:
        return int(self.layers[0].details.get("target_tiles", 0)) if self.layers else 0

    @property
    def disjoint(self) -> bool:
        """Whether every layer can have tiles of its own."""
        return self.is_ipu and sum(r.num_tiles for r in self.layers) <= self.target_tiles

    @property
    def tile_offsets(self) -> List[int]:
        """First tile of each layer: side by side if they fit so, else all from tile 0."""
        if not self.disjoint:
            return [0] * len(self.layers)
        offsets, next_tile = [], 0
        for r in self.layers:
            offsets.append(next_tile)
            next_tile += r.num_tiles
        return offsets

    @property
    def bytes_per_tile_combined(self) -> int:
        """Bytes on the busiest tile with the layers placed as ``tile_offsets`` says.

        Every layer's op tensors ([T, B, ...] inputs, outputs, gradients) are
        spread over all tiles of the IPU, so every tile holds all layers' shares.
        """
        if not self.layers:
            return 0
        if not self.is_ipu:
            return max(r.bytes_per_tile_max for r in self.layers)
        if not self.disjoint:
            return self.bytes_per_tile_overlaid
        io = [int(r.details["memory"]["io_share"]) for r in self.layers]
        own = max(r.bytes_per_tile_max - share for r, share in zip(self.layers, io))
        return own + sum(io)

    @property
    def bytes_per_tile_overlaid(self) -> int:
        """Bytes on tile 0 with every layer laid out from tile 0 (what the ipu backend
        does with layers that :func:`place` did not place)."""
        return sum(r.bytes_per_tile_max for r in self.layers)

    @property
    def budget(self) -> int:
        return self.layers[0].bytes_budget if self.layers else 0

    @property
    def cycles_per_step(self) -> int:
        return sum(r.cycles_per_step for r in self.layers)

    @property
    def seconds_per_step(self) -> float:
        return self.cycles_per_step / self.clock_hz

    @property
    def samples_per_second(self) -> float:
        s = self.seconds_per_step
        return self.batch_size / s if s > 0 else float("inf")

    @property
    def exchange_bytes_per_step(self) -> int:
        return sum(r.exchange_bytes_per_step for r in self.layers)

    def _combined_fits(self) -> bool:
        return not self.is_ipu or self.bytes_per_tile_combined <= self.budget

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.layers) and self._combined_fits()

    def problems(self) -> List[str]:
        """One sentence per reason the network does not fit (empty if it does)."""
        out = [f"layer {r.name}: {r.reason}" for r in self.layers if not r.fits]
        if not out and not self._combined_fits():
            where = (
                "the busiest tile (every layer's input and output tensors are spread over "
                "all tiles of the IPU)" if self.disjoint else
                f"tile 0 (their {sum(r.num_tiles for r in self.layers)} tiles overlap on "
                f"the {self.target_tiles} of the IPU)"
            )
            out.append(
                f"each layer fits alone, but together they need "
                f"{_kib(self.bytes_per_tile_combined)} against {_kib(self.budget)} on {where}: "
                "use smaller max_spikes, shorter num_steps, a smaller batch, half weights, "
                "or place the layers on separate IPUs"
            )
        return out

    def graph_report(self):
        """The IPU program of this plan built on the host and measured, next to the
        plan's estimates (:mod:`snn_ipu.graph_report`; ipu2 plans only)."""
        from .graph_report import graph_report

        return graph_report(self)

    def raise_if_not_fits(self) -> None:
        """Raise :class:`PlanError` naming each layer that does not fit and what to change."""
        problems = self.problems()
        if problems:
            raise PlanError(f"network does not fit on {self.target}: " + "; ".join(problems))

    def __str__(self) -> str:
        unit = "tile" if self.is_ipu else "item"
        head = ["layer", "model", "in->out", "K in/out",
                "tiles" if self.is_ipu else "tiles x groups", f"n/{unit}",
                f"KiB/{unit} max", "mean", "budget", "exch KiB/step", "Mcycles/step", "fits"]
        rows = [head]
        for r in self.layers:
            rows.append([
                r.name, r.model + (" rec" if r.recurrent else ""),
                f"{r.in_features}->{r.out_features}", f"{r.capacity_in}/{r.capacity_out}",
                str(r.num_tiles) if self.is_ipu else f"{r.num_tiles} x {r.sample_groups}",
                str(r.neurons_per_tile),
                f"{r.bytes_per_tile_max / 1024:.1f}", f"{r.bytes_per_tile_mean / 1024:.1f}",
                f"{r.bytes_budget / 1024:.0f}" if self.is_ipu else "n/a",
                f"{r.exchange_bytes_per_step / 1024:.1f}",
                f"{r.cycles_per_step / 1e6:.3f}", "yes" if r.fits else "NO",
            ])
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = [f"plan on {self.target}: batch {self.batch_size}, {self.num_steps} steps"]
        for i, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) if j < 4 else c.rjust(w)
                                   for j, (c, w) in enumerate(zip(row, widths))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines.append(
            f"total: {self.cycles_per_step / 1e6:.3f} Mcycles/step, "
            f"{self.seconds_per_step * 1e3:.3f} ms/step, {self.samples_per_second:,.0f} samples/s"
            + (f", busiest tile {_kib(self.bytes_per_tile_combined)} with all layers "
               + ("on their own tiles" if self.disjoint else "overlaid from tile 0")
               if self.is_ipu else "")
            + (" - fits" if self.fits else " - DOES NOT FIT")
        )
        if self.is_ipu and self.disjoint and len(self.layers) > 1:
            overlaid = self.bytes_per_tile_overlaid
            lines.append(
                "note: the ipu backend places the layers so only after "
                "snn_ipu.planning.place(model, batch_size, num_steps); without it every layer "
                f"starts at tile 0 and the busiest tile holds {_kib(overlaid)}"
                + ("" if overlaid <= self.budget else " - that does NOT fit")
            )
        if not self.is_ipu and self.layers:
            lines.append(f"host: a work item is a tile's neurons for a group of the batch's "
                         f"samples; tiles keep their weight block within "
                         f"{_kib(self.budget)} (a core's L2); data limit "
                         f"{_kib(int(self.layers[0].details.get('host_memory_budget', 0)))}")
        lines.extend(f"  {p}" for p in self.problems())
        return "\n".join(lines)


def _kib(n: int) -> str:
    if n >= 1 << 40:
        return f"{n / (1 << 40):.1f} TiB"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.1f} KiB"


@dataclass(frozen=True)
class IpuTiles:
    """Where :func:`place` put a layer's op on the IPU, for one batch size and
    sequence length: tiles ``[first_tile, first_tile + num_tiles)``, each with
    ``neurons_per_tile`` of its output neurons (the last with the rest)."""

    first_tile: int
    num_tiles: int
    neurons_per_tile: int
    batch_size: int
    num_steps: int


@dataclass
class _LayerShape:
    name: str
    in_features: int
    out_features: int
    model: int
    recurrent: bool
    max_spikes: Optional[int]
    weight_bytes: int
    # learned decays: the IPU op keeps the dense membrane (and synaptic) history
    dense_history: bool = False


def _snn_layers(model: torch.nn.Module) -> List[Any]:
    """(name, module) of the model's snn_ipu layers, in registration order."""
    layers = [(name, m) for name, m in model.named_modules() if hasattr(m, "neuron_model")]
    if not layers:
        raise ValueError("the model has no snn_ipu layers (modules with a neuron_model)")
    return layers


def _shapes_from_module(model: torch.nn.Module) -> List[_LayerShape]:
    shapes = []
    for name, m in _snn_layers(model):
        weight = getattr(m, "weight", None)
        shapes.append(_LayerShape(
            name=getattr(m, "name", None) or name or type(m).__name__,
            in_features=int(m.in_features),
            out_features=int(m.out_features),
            model=model_code(m.neuron_model),
            recurrent=bool(getattr(m, "recurrent", False)),
            max_spikes=getattr(m, "max_spikes", None),
            weight_bytes=weight.element_size() if isinstance(weight, torch.Tensor) else 4,
            dense_history=any(
                isinstance(getattr(m, decay, None), torch.nn.Parameter)
                and getattr(m, decay).requires_grad
                for decay in ("beta", "alpha")
            ),
        ))
    return shapes


def _shapes_from_sizes(sizes: Sequence[int]) -> List[_LayerShape]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) < 2 or any(
            whole_number(s, 1) is None or whole_number(s, 1) > MAX_SIZE for s in sizes):
        raise ValueError(
            f"layer sizes must be a module or a sequence of at least two positive integers "
            f"(below 2**31), got {sizes!r}"
        )
    sizes = [operator.index(s) for s in sizes]
    last = len(sizes) - 2
    return [
        _LayerShape(f"layer{i}", n_in, n_out, 2 if i == last else 0, False, None, 4)
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]))
    ]


def plan(
    model_or_sizes: Union[torch.nn.Module, Sequence[int]],
    batch_size: int,
    num_steps: int,
    target: str = "ipu2",
    max_spikes: Optional[int] = None,
    activity: float = 0.05,
    threads: Optional[int] = None,
    input_max_spikes: Optional[int] = None,
) -> PlanReport:
    """Plan every layer of a network on ``target`` (``"ipu2"`` or ``"host"``).

    ``model_or_sizes`` is a module holding snn_ipu layers, or layer sizes like
    ``[700, 256, 256, 20]`` (leaky layers, the last a readout). ``max_spikes``
    is the spike-list capacity of layers that do not set their own (``None``:
    the planner's automatic guess from ``activity``); ``input_max_spikes`` the
    capacity of the network's input list. ``activity`` is the expected fraction
    of neurons spiking per step: it sets the cycle estimates and, where no
    ``max_spikes`` is given, the automatic capacities (and so the bytes). A layer
    that learns beta or alpha is planned with the dense state history its IPU op
    keeps for their gradients.
    """
    from ._native import _C

    if isinstance(model_or_sizes, torch.nn.Module):
        shapes = _shapes_from_module(model_or_sizes)
    elif isinstance(model_or_sizes, Sequence) and model_or_sizes and all(
            isinstance(s, _LayerShape) for s in model_or_sizes):
        shapes = list(model_or_sizes)  # snn_ipu.training.model_shapes: no weights built
    else:
        shapes = _shapes_from_sizes(model_or_sizes)
    if target not in ("ipu2", "host"):
        raise ValueError(f"unknown target {target!r}; expected 'ipu2' or 'host'")
    for what, value, optional in (
        ("batch_size", batch_size, False), ("num_steps", num_steps, False),
        ("max_spikes", max_spikes, True), ("input_max_spikes", input_max_spikes, True),
        ("threads", threads, True),
    ):
        if optional and value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31):
            raise ValueError(f"{what} must be a positive integer (below 2**31), got {value!r}")
    if not 0.0 <= activity <= 1.0:
        raise ValueError(f"activity must be a fraction in [0, 1], got {activity!r}")
    n_threads = threads if threads is not None else planning_threads()

    rows: List[LayerPlanRow] = []
    capacity_in = input_max_spikes or 0
    clock_hz = 1.0
    for s in shapes:
        capacity_out = s.max_spikes if s.max_spikes is not None else (max_spikes or 0)
        d = _C.plan_layer(
            s.in_features, s.out_features, batch_size, num_steps, s.recurrent, s.model,
            capacity_in, capacity_out, float(activity), s.weight_bytes, target, n_threads,
            dense_history=s.dense_history,
        )
        rows.append(LayerPlanRow.from_plan(s.name, d))
        clock_hz = float(d["clock_hz"])
        capacity_in = int(d["capacity_out"])  # the next layer reads this layer's list
    return PlanReport(target, batch_size, num_steps, rows, clock_hz)


def place(
    model: torch.nn.Module,
    batch_size: int,
    num_steps: int,
    max_spikes: Optional[int] = None,
    activity: float = 0.05,
    input_max_spikes: Optional[int] = None,
) -> PlanReport:
    """Plan ``model`` for an IPU (:func:`plan`, target ``"ipu2"``) and give each of
    its layers the tiles of that plan (``layer.ipu_tiles``, an :class:`IpuTiles`).

    The ``ipu`` backend then builds each layer's op on its own tiles, side by
    side, with the plan's tile size, where the report counted them; without
    ``place`` every op starts at tile 0 and the layers share tiles. When the
    layers' tiles add up to more than the IPU has, they still start at tile 0
    (``PlanReport.tile_offsets``). Call it again after changing the batch size
    or the sequence length: a layer placed for other ones refuses to run.

    Raises:
        PlanError: the network does not fit; the message says what to change.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"place() needs the model (a torch.nn.Module), got {type(model).__name__}")
    report = plan(model, batch_size, num_steps, target="ipu2", max_spikes=max_spikes,
                  activity=activity, input_max_spikes=input_max_spikes)
    report.raise_if_not_fits()
    for (_, layer), row, first in zip(_snn_layers(model), report.layers, report.tile_offsets):
        layer.ipu_tiles = IpuTiles(first, row.num_tiles, row.neurons_per_tile, batch_size,
                                   num_steps)
    return report
