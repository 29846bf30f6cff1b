"""Will a network fit, and how fast will it train? Ask the tile planner.

``plan(model, batch_size, num_steps)`` places every layer with the C++
planner (``popops_ext/plan``, the same one the Poplar builder and the
emulator run) and reports per layer: tiles used, bytes per tile against the
624 KiB of an IPU tile, exchange bytes and estimated cycles per training
step, and whether it fits, with what to change when it does not.
``place(model, batch_size, num_steps)`` plans the same way and hands each
layer its tiles, so that the ``ipu`` backend builds the layers where the
report counted them.

On an IPU a layer is split over its neurons (tiles of whole 8-neuron
grains) and over its samples (``sample_groups`` groups of tiles, each with its
own copy of the weight rows and only its own samples' lists): the planner picks
both from its cost model. The layers' ops run one after another, so by default
each may use the whole IPU, all from tile 0 ("overlaid": their data must fit
together); a pipelined network (:func:`snn_ipu.pipeline`) is planned on
disjoint tiles, its step time that of the fused time loop running the layers at
once (each phase its slowest layer's; :meth:`PlanReport.fused_cycles_per_step`).

The estimates are a model (instruction counts of the codelets, exchange at
4 bytes per tile per cycle, a sync per BSP superstep; docs/ipu.md gives every
constant's source), not measurements on an IPU.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ._numbers import MAX_SIZE, flag, positive_size, real_number, whole_number
from .backends.work_split import DEFAULT_ACTIVITY, MODEL_CODES, model_code, planning_threads

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
    # host: a work item per (tile, group of the batch's samples); IPU: groups of tiles
    sample_groups: int = 1
    # The layer's bias and gradient window (None: exact gradients), which the planner's
    # estimates leave out but the layer's op is built with (the graph report builds it).
    has_bias: bool = True
    grad_window: Optional[float] = None
    details: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_plan(cls, name: str, d: Dict[str, Any], has_bias: bool = True,
                  grad_window: Optional[float] = None) -> LayerPlanRow:
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
            has_bias=has_bias,
            grad_window=grad_window,
            details=dict(d),
        )

    @property
    def tiles_used(self) -> int:
        """Tiles the layer occupies: its tiles of neurons times its sample groups (IPU)."""
        return int(self.details.get("tiles_used", self.num_tiles))

    @property
    def cycle_parts(self) -> Dict[str, int]:
        """Cycles of a training step by what bounds them: ``compute`` (the vertices'
        own loops), ``exchange`` (bytes moved between tiles) and ``sync`` (a BSP sync
        per compute set and exchange phase, the popops step operations), IPU plans."""
        d, c = self.details, self.details["cycles"]
        steps = int(d["timesteps"])
        sync_cycles = int(d["sync_cycles"])
        phase_cycles = sync_cycles + int(d["exchange_overhead_cycles"])  # fixed, per phase
        # the input gradient's partials are gathered only where it is built
        reduce_phase = self.num_tiles > 1 and bool(d.get("input_needs_grad", True))
        phases = (2 if self.model != "readout" else 1) + (2 if reduce_phase else 1)
        sync = steps * (int(c["sync_forward"]) + int(c["sync_backward"])
                        + int(c["step_ops_forward"]) + int(c["step_ops_backward"])
                        + phases * phase_cycles)
        exchange = steps * (int(c["exchange_forward"]) + int(c["exchange_backward"])
                            - phases * phase_cycles) + int(c["group_reduce"])
        compute = max(self.cycles_per_step - sync - exchange, 0)
        return {"compute": compute, "exchange": exchange, "sync": sync}

    @property
    def bound(self) -> str:
        parts = self.cycle_parts
        return max(parts, key=parts.get) + "-bound"


@dataclass(frozen=True)
class PlanReport:
    """Plans of all layers of a network for one batch size and sequence length.

    A training step runs the layers one after another, so its cycles are the
    sum over layers; a pipelined one (``pipelined``) runs them at once, on tiles of
    their own, in one time loop (each phase its slowest layer's). On an IPU every
    layer's data stays resident: ``layout`` is ``"overlaid"`` (every layer from
    tile 0, each with its fastest plan: the network fits only if the layers'
    busiest tiles together fit in one tile, a conservative test) or
    ``"disjoint"`` (each layer on tiles of its own, ``tile_offsets``). On the host a
    training step keeps every layer's lists and history over T, weights and gradients
    until its backward pass: the network fits only if they fit together in the host's
    memory budget (``host_bytes_total`` against ``host_memory_budget``).
    """

    target: str
    batch_size: int
    num_steps: int
    layers: List[LayerPlanRow]
    clock_hz: float
    pipelined: bool = False
    layout: str = "overlaid"

    @property
    def is_ipu(self) -> bool:
        return self.target != "host"

    @property
    def target_tiles(self) -> int:
        return int(self.layers[0].details.get("target_tiles", 0)) if self.layers else 0

    @property
    def disjoint(self) -> bool:
        """Whether every layer has tiles of its own (else all start at tile 0)."""
        return self.is_ipu and self.layout == "disjoint"

    @property
    def tiles_used(self) -> int:
        """Tiles of the IPU the network occupies."""
        if self.disjoint:
            return sum(r.tiles_used for r in self.layers)
        return max((r.tiles_used for r in self.layers), default=0)

    @property
    def tile_offsets(self) -> List[int]:
        """First tile of each layer: side by side when disjoint, else all from tile 0."""
        if not self.disjoint:
            return [0] * len(self.layers)
        offsets, next_tile = [], 0
        for r in self.layers:
            offsets.append(next_tile)
            next_tile += r.tiles_used
        return offsets

    @property
    def bytes_per_tile_combined(self) -> int:
        """Bytes on the busiest tile with the layers placed as ``tile_offsets`` says.

        Every layer's op tensors ([T, B, ...] inputs, outputs, gradients) are
        spread over all tiles of the IPU, so every tile holds all layers' shares.
        The rest of a layer's tile data (its per-call weight blocks, state, buffers
        and gradient blocks) lives while its op runs: on tiles of its own, or,
        overlaid, while the other ops, which run before or after it, do not.
        """
        if not self.layers:
            return 0
        if not self.is_ipu:
            return max(r.bytes_per_tile_max for r in self.layers)
        io = [int(r.details["memory"]["io_share"]) for r in self.layers]
        own = max(r.bytes_per_tile_max - share for r, share in zip(self.layers, io))
        return own + sum(io)

    @property
    def budget(self) -> int:
        return self.layers[0].bytes_budget if self.layers else 0

    @property
    def host_memory_budget(self) -> int:
        """Host: the memory a training step may take (half of RAM, as each layer's own
        check allows it); 0 on an IPU."""
        if self.is_ipu or not self.layers:
            return 0
        return int(self.layers[0].details.get("host_memory_budget", 0))

    @property
    def host_bytes_total(self) -> int:
        """Host: the bytes of a training step at its peak, by each layer's own count
        (``bytes_total``, what its check compares with the budget). A step keeps every
        layer's parameters, their gradients and its history and lists over T
        (``bytes_kept``) from the forward pass to the backward pass, all at once; the rest
        of a layer's bytes (state, a step's buffers) lives while its op runs, so the
        largest such rest is added once. 0 on an IPU."""
        if self.is_ipu or not self.layers:
            return 0
        totals = [int(r.details.get("bytes_total", 0)) for r in self.layers]
        kept = [int(r.details.get("bytes_kept", 0)) for r in self.layers]
        return sum(kept) + max(t - k for t, k in zip(totals, kept))

    @property
    def cycles_per_step(self) -> int:
        """A training step: the layers' sum, or with pipelining the fused time loop's
        (:meth:`fused_cycles_per_step`)."""
        if self.pipelined and self.disjoint:
            return self.fused_cycles_per_step
        return sum(r.cycles_per_step for r in self.layers)

    @property
    def fused_cycles_per_step(self) -> int:
        """The layers as one program with one time loop (the fused time loop,
        :func:`snn_ipu.pipelining.run_fused`), each on tiles of its own: per timestep a
        phase's compute set holds every layer's vertices and costs the slowest layer's
        share, exchange phases are shared the same way, and the per-step popops
        operations (step slices and updates) run one after another; once per training
        step, every layer's optimizer, weight copies and reductions, one after another
        as the program builds them. ``cycles`` of each layer's plan hold those phases."""
        if not self.layers:
            return 0
        phases = [{k: int(v) for k, v in r.details["cycles"].items()} for r in self.layers]
        step = 0
        for key in set().union(*phases):
            values = [c.get(key, 0) for c in phases]
            if key.startswith("step_ops"):
                step += sum(values)
            elif key not in ("optimizer", "group_reduce"):  # weight_grad: one compute set too
                step += max(values)
        once = sum(int(r.details["cycles_training_step"]) - self.num_steps * (
            int(r.details["cycles_forward_timestep"]) + int(r.details["cycles_backward_timestep"]))
            for r in self.layers)
        return self.num_steps * step + once

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
        if not self.is_ipu:  # no budget known (a report put together by hand): no check
            return not self.host_memory_budget or self.host_bytes_total <= self.host_memory_budget
        return self.bytes_per_tile_combined <= self.budget

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.layers) and self._combined_fits()

    def problems(self) -> List[str]:
        """One sentence per reason the network does not fit (empty if it does)."""
        out = [f"layer {r.name}: {r.reason}" for r in self.layers if not r.fits]
        if not out and not self._combined_fits() and not self.is_ipu:
            out.append(
                f"each layer fits alone, but a training step keeps every layer's lists and "
                f"history over T, weights and gradients until its backward pass: together "
                f"they need {_kib(self.host_bytes_total)} of host memory, more than the "
                f"{_kib(self.host_memory_budget)} allowed (half of RAM); use a smaller batch, "
                "shorter num_steps, smaller max_spikes or half weights"
            )
        elif not out and not self._combined_fits():
            where = (
                "the busiest tile (every layer's input and output tensors are spread over "
                "all tiles of the IPU)" if self.disjoint else
                # tiles_used: a layer split over sample groups spans its tiles times its
                # groups (num_tiles alone said "their 47 tiles" of layers on 3008)
                f"tile 0 (their {sum(r.tiles_used for r in self.layers)} tiles overlap on "
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
        plan's estimates (:mod:`snn_ipu.graph_report`; ipu2 plans only). Each layer's
        op has the layer's bias and ``grad_window``; a plan of sizes alone assumes
        layers with a bias and the default window (``grad_window=None``)."""
        from .graph_report import graph_report

        return graph_report(self)

    def raise_if_not_fits(self) -> None:
        """Raise :class:`PlanError` naming each layer that does not fit and what to change."""
        problems = self.problems()
        if problems:
            raise PlanError(f"network does not fit on {self.target}: " + "; ".join(problems))

    def __str__(self) -> str:
        unit = "tile" if self.is_ipu else "item"
        head = ["layer", "model", "in->out", "K in/out", "tiles x groups", f"n/{unit}",
                f"KiB/{unit} max", "mean", "budget", "exch KiB/step", "Mcycles/step", "fits"]
        if self.is_ipu:
            head.insert(-1, "bound")
        rows = [head]
        for r in self.layers:
            rows.append([
                r.name, r.model + (" rec" if r.recurrent else ""),
                f"{r.in_features}->{r.out_features}", f"{r.capacity_in}/{r.capacity_out}",
                f"{r.num_tiles} x {r.sample_groups}",
                str(r.neurons_per_tile),
                f"{r.bytes_per_tile_max / 1024:.1f}", f"{r.bytes_per_tile_mean / 1024:.1f}",
                f"{r.bytes_budget / 1024:.0f}" if self.is_ipu else "n/a",
                f"{r.exchange_bytes_per_step / 1024:.1f}",
                f"{r.cycles_per_step / 1e6:.3f}", "yes" if r.fits else "NO",
            ])
            if self.is_ipu:
                rows[-1].insert(-1, r.bound)
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = [f"plan on {self.target}: batch {self.batch_size}, {self.num_steps} steps"]
        for i, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) if j < 4 else c.rjust(w)
                                   for j, (c, w) in enumerate(zip(row, widths))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        how = ("the fused time loop's: pipelined, the layers at once"
               if self.pipelined and self.disjoint else "the layers' sum")
        lines.append(
            f"total: {self.cycles_per_step / 1e6:.3f} Mcycles/step ({how}), "
            f"{self.seconds_per_step * 1e3:.3f} ms/step, {_rate(self.samples_per_second)} samples/s"
            + (f", {self.tiles_used} of {self.target_tiles} tiles, busiest tile "
               f"{_kib(self.bytes_per_tile_combined)} with all layers "
               + ("on their own tiles" if self.disjoint else "overlaid from tile 0")
               if self.is_ipu else "")
            + (" - fits" if self.fits else " - DOES NOT FIT")
        )
        if self.is_ipu and self.pipelined and not self.disjoint and len(self.layers) > 1:
            # plan() falls back to the overlaid layout when the layers have no tiles of
            # their own to share out: the note below, that they run at once, was wrong
            lines.append(
                "pipelined, but the layers do not fit on tiles of their own, side by side: "
                "planned overlaid from tile 0, so they run one after another (the layers' "
                "sum), not at once in the fused time loop; for that use fewer or smaller "
                "layers, a smaller batch or shorter num_steps")
        elif self.is_ipu and self.pipelined:
            lines.append(
                "pipelined: each layer reads its input one step late (input_delay), so the "
                "layers of a step run at once in one program (the fused time loop, "
                "snn_ipu.pipelining.run_fused on ipu_graph); as one op per layer (the ipu "
                "backend, layer-by-layer calls) they run one after another, the layers' sum, "
                f"{sum(r.cycles_per_step for r in self.layers) / 1e6:.3f} Mcycles/step")
        elif self.is_ipu and not self.disjoint and len(self.layers) > 1:
            lines.append(
                "layout: the ops run one after another, so each layer takes its fastest plan "
                "from tile 0 (place() builds the ops as planned here; an op of a layer it did "
                f"not place takes its fastest plan for activity {DEFAULT_ACTIVITY} and, "
                "without max_spikes, a list sized for it)")
        if not self.is_ipu and self.layers:
            lines.append(f"host: a work item is a tile's neurons for a group of the batch's "
                         f"samples; tiles keep their weight block within "
                         f"{_kib(self.budget)} (a core's L2, at least 2 MiB; 4 MiB below an "
                         f"L2 of 1 MiB); data limit "
                         f"{_kib(self.host_memory_budget)} (half of RAM), a training step "
                         f"of all layers needs {_kib(self.host_bytes_total)}")
        lines.extend(f"  {p}" for p in self.problems())
        return "\n".join(lines)


def _rate(per_second: float) -> str:
    """Samples per second as printed: whole ones, but three significant digits below
    100 (a step of 15 s on a batch of 4 printed as "0 samples/s")."""
    return f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:.3g}"


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
    sequence length: ``sample_groups`` groups of ``num_tiles`` tiles from
    ``first_tile`` on, each tile of a group with ``neurons_per_tile`` of its output
    neurons (the last with the rest) for the group's share of the batch. A spiking
    layer's op is built with the output list ``capacity`` its plan counted (None: a
    readout, which has no list) and the plan's ``activity``; an input list wider than
    the plan's ``capacity_in`` is refused (None: not checked)."""

    first_tile: int
    num_tiles: int
    neurons_per_tile: int
    batch_size: int
    num_steps: int
    sample_groups: int = 1
    capacity: Optional[int] = None
    activity: float = DEFAULT_ACTIVITY
    capacity_in: Optional[int] = None


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
    # not planned on, only carried to the plan's rows for the graph report; the defaults
    # are a default layer's (LIFLayer: bias=True, grad_window=None)
    has_bias: bool = True
    grad_window: Optional[float] = None
    # exact gradients (grad_window None) and no max_spikes of its own: the IPU op lists
    # every neuron (backends.ipu._capacity), so its list is out_features long whatever
    # the plan's max_spikes or activity
    lists_every_neuron: bool = False


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
        if isinstance(weight, torch.Tensor) and weight.dtype not in (torch.float32,
                                                                       torch.float16):
            # (a bfloat16 model was planned, and its graph reported, as a float16 one)
            raise ValueError(
                f"{getattr(m, 'name', None) or name}: {weight.dtype} weights; the planned "
                "ops (IPU and host executor) take float32 or float16: convert the model with "
                ".float() or .half() first")
        code = model_code(m.neuron_model)
        # a readout has no window: its op is sent LayerConfig's default, None
        window, max_spikes = getattr(m, "grad_window", None), getattr(m, "max_spikes", None)
        shapes.append(_LayerShape(
            name=getattr(m, "name", None) or name or type(m).__name__,
            in_features=int(m.in_features),
            out_features=int(m.out_features),
            model=code,
            recurrent=bool(getattr(m, "recurrent", False)),
            max_spikes=max_spikes,
            weight_bytes=weight.element_size() if isinstance(weight, torch.Tensor) else 4,
            dense_history=any(
                isinstance(getattr(m, decay, None), torch.nn.Parameter)
                and getattr(m, decay).requires_grad
                for decay in ("beta", "alpha")
            ),
            # a recurrent layer's rec_bias is summed into the bias its op takes (_params)
            has_bias=any(getattr(m, b, None) is not None for b in ("bias", "rec_bias")),
            grad_window=window,
            lists_every_neuron=_lists_every_neuron(code, window, max_spikes),
        ))
    return shapes


def _lists_every_neuron(model: int, grad_window: Optional[float],
                        max_spikes: Optional[int]) -> bool:
    return model != MODEL_CODES["readout"] and grad_window is None and max_spikes is None


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


def _layer_shape_args(s: _LayerShape, batch_size: int, num_steps: int, capacity_in: int,
                      capacity_out: int, activity: float) -> tuple:
    return (s.in_features, s.out_features, batch_size, num_steps, s.recurrent, s.model,
            capacity_in, capacity_out, float(activity), s.weight_bytes)


def _allocate(fronts: List[list], budget: int, slowest: bool) -> Optional[List[int]]:
    """Which candidate of each layer's front (tuples (tiles, cycles, ...), fewest tiles
    first, each faster than the one before) to take so that their tiles add up to at
    most ``budget``: the least total cycles, or with ``slowest`` the least slowest
    layer's. None when even the smallest candidates do not fit together."""
    if any(not f for f in fronts) or sum(f[0][0] for f in fronts) > budget:
        return None
    if slowest:
        def pick(limit):
            chosen = []
            for f in fronts:
                ok = [i for i, c in enumerate(f) if c[1] <= limit]
                if not ok:
                    return None
                chosen.append(ok[0])
            return chosen if sum(f[i][0] for f, i in zip(fronts, chosen)) <= budget else None

        limits = sorted({c[1] for f in fronts for c in f})
        lo, hi = 0, len(limits) - 1  # the largest limit is always feasible
        while lo < hi:
            mid = (lo + hi) // 2
            if pick(limits[mid]) is not None:
                hi = mid
            else:
                lo = mid + 1
        return pick(limits[lo])
    # Least total: keep, per number of tiles used so far, the cheapest choice (pruned
    # to the states that no cheaper state with fewer tiles dominates).
    states = {0: (0, [])}
    for f in fronts:
        grown: Dict[int, tuple] = {}
        for tiles, (cost, picks) in states.items():
            for i, c in enumerate(f):
                t = tiles + c[0]
                if t > budget:
                    break
                if t not in grown or cost + c[1] < grown[t][0]:
                    grown[t] = (cost + c[1], picks + [i])
        states, best = {}, None
        for t in sorted(grown):
            if best is None or grown[t][0] < best:
                best = grown[t][0]
                states[t] = grown[t]
    return min(states.values(), key=lambda v: v[0])[1]


def plan(
    model_or_sizes: Union[torch.nn.Module, Sequence[int]],
    batch_size: int,
    num_steps: int,
    target: str = "ipu2",
    max_spikes: Optional[int] = None,
    activity: float = DEFAULT_ACTIVITY,
    threads: Optional[int] = None,
    input_max_spikes: Optional[int] = None,
    pipelined: Optional[bool] = None,
) -> PlanReport:
    """Plan every layer of a network on ``target`` (``"ipu2"`` or ``"host"``).

    ``model_or_sizes`` is a module holding snn_ipu layers, or layer sizes like
    ``[700, 256, 256, 20]`` (leaky layers, the last a readout). ``max_spikes``
    is the spike-list capacity of layers that do not set their own (``None``:
    the planner's automatic guess from ``activity``); ``input_max_spikes`` the
    capacity of the network's input list. ``activity`` is the expected fraction
    of neurons spiking per step: it sets the cycle estimates and, where no
    ``max_spikes`` is given, the automatic capacities (and so the bytes); the ipu
    backends build those only for the model :func:`place` planned, and the ops of
    layers it did not place for an activity of 5%. A list that a loss or regularizer
    reads densely on the IPU (``to_dense()``, ``spike_counts()``) adds an op of its own
    that no row counts (docs/ipu.md, "Spike losses"). A layer
    that learns beta or alpha is planned with the dense state history its IPU op
    keeps for their gradients. A layer of the module with exact gradients
    (``grad_window=None``) and no ``max_spikes`` of its own lists every neuron, as its
    op does: its capacity is its ``out_features`` whatever ``max_spikes`` and
    ``activity`` say. ``pipelined`` plans the layers on tiles of their own, run at
    once by the fused time loop (:func:`snn_ipu.pipeline`; ``None``: whether a layer
    of the module has an ``input_delay``). A plan of sizes alone sizes every list by
    ``max_spikes`` or ``activity``, and its :meth:`~PlanReport.graph_report` builds
    layers with a bias and the default window (``grad_window=None``).
    """
    from ._native import _C

    if isinstance(model_or_sizes, torch.nn.Module):
        shapes = _shapes_from_module(model_or_sizes)
        if pipelined is None:
            pipelined = any(getattr(m, "input_delay", 0) for _, m in _snn_layers(model_or_sizes))
    elif isinstance(model_or_sizes, Sequence) and model_or_sizes and all(
            isinstance(s, _LayerShape) for s in model_or_sizes):
        shapes = list(model_or_sizes)  # snn_ipu.training.model_shapes: no weights built
    else:
        shapes = _shapes_from_sizes(model_or_sizes)
    pipelined = False if pipelined is None else flag("pipelined", pipelined)
    if target not in ("ipu2", "host"):
        raise ValueError(f"unknown target {target!r}; expected 'ipu2' or 'host'")
    # numpy ints as the layer sizes take them (np.int64(64) is a positive integer: it
    # was refused as "must be a positive integer"), held as Python ints from here on
    batch_size = positive_size("batch_size", batch_size)
    num_steps = positive_size("num_steps", num_steps)
    max_spikes = None if max_spikes is None else positive_size("max_spikes", max_spikes)
    input_max_spikes = (None if input_max_spikes is None
                        else positive_size("input_max_spikes", input_max_spikes))
    threads = None if threads is None else positive_size("threads", threads)
    # a number by name: "0.1" failed in the comparison with an unnamed TypeError, and
    # True was planned as activity 1.0
    activity = real_number("activity", activity)
    if not 0.0 <= activity <= 1.0:
        raise ValueError(f"activity must be a fraction in [0, 1], got {activity!r}")
    n_threads = threads if threads is not None else planning_threads()

    # Each layer's own best plan (on an IPU: its fastest, using the whole IPU).
    rows: List[LayerPlanRow] = []
    args: List[tuple] = []
    capacity_in = input_max_spikes or 0
    clock_hz = 1.0
    for i, s in enumerate(shapes):
        if s.lists_every_neuron:
            capacity_out = s.out_features
        else:
            capacity_out = s.max_spikes if s.max_spikes is not None else (max_spikes or 0)
        a = _layer_shape_args(s, batch_size, num_steps, capacity_in, capacity_out, activity)
        # the first layer reads the network's input, laid out by PopART: data, whose
        # gradient nothing asks for, so its op builds no input gradient
        d = _C.plan_layer(*a, target, n_threads, dense_history=s.dense_history,
                          linear_input=i == 0, input_needs_grad=i != 0)
        rows.append(LayerPlanRow.from_plan(s.name, d, s.has_bias, s.grad_window))
        args.append(a[:6] + (int(d["capacity_in"]), int(d["capacity_out"])) + a[8:])
        clock_hz = float(d["clock_hz"])
        capacity_in = int(d["capacity_out"])  # the next layer reads this layer's list
    report = PlanReport(target, batch_size, num_steps, rows, clock_hz, pipelined)
    if target != "ipu2" or len(rows) < 2 or (not pipelined and report.fits):
        return report
    # Tiles of their own: share the IPU's tiles out between the layers.
    fronts = [_C.plan_candidates(*a, dense_history=s.dense_history, linear_input=i == 0,
                                 input_needs_grad=i != 0)
              for i, (a, s) in enumerate(zip(args, shapes))]
    picks = _allocate(fronts, report.target_tiles, slowest=pipelined)
    if picks is None:
        return report
    disjoint = [
        LayerPlanRow.from_plan(s.name, _C.plan_layer(
            *a, "ipu2", 1, neurons_per_tile=f[i][2], dense_history=s.dense_history,
            sample_groups=f[i][3], linear_input=k == 0, input_needs_grad=k != 0),
            s.has_bias, s.grad_window)
        for k, (a, s, f, i) in enumerate(zip(args, shapes, fronts, picks))
    ]
    candidate = PlanReport(target, batch_size, num_steps, disjoint, clock_hz, pipelined,
                           "disjoint")
    if candidate.fits and (pipelined or not report.fits
                           or candidate.cycles_per_step < report.cycles_per_step):
        return candidate
    return report


def place(
    model: torch.nn.Module,
    batch_size: int,
    num_steps: int,
    max_spikes: Optional[int] = None,
    activity: float = DEFAULT_ACTIVITY,
    input_max_spikes: Optional[int] = None,
    pipelined: Optional[bool] = None,
) -> PlanReport:
    """Plan ``model`` for an IPU (:func:`plan`, target ``"ipu2"``) and give each of
    its layers the tiles of that plan (``layer.ipu_tiles``, an :class:`IpuTiles`).

    The ``ipu`` backend then builds each layer's op where the report counted it,
    with the plan's tile size, sample groups and activity: all from tile 0 (the
    "overlaid" layout, what it also does for a layer ``place`` did not place) or,
    for a pipelined network or where that is faster or the only fit, side by side
    (``PlanReport.tile_offsets``). A windowed layer without ``max_spikes`` of its
    own gets the list capacity of the plan (from ``max_spikes`` or ``activity``),
    where an unplaced one gets the planner's guess for 5% activity. ``place`` is
    for choosing: the batch size, sequence length and activity the plan is made
    for. Call it again after changing the batch size or the sequence length: a
    layer placed for other ones refuses to run.

    Raises:
        PlanError: the network does not fit; the message says what to change.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"place() needs the model (a torch.nn.Module), got {type(model).__name__}")
    report = plan(model, batch_size, num_steps, target="ipu2", max_spikes=max_spikes,
                  activity=activity, input_max_spikes=input_max_spikes, pipelined=pipelined)
    report.raise_if_not_fits()
    rows = zip(_snn_layers(model), report.layers, report.tile_offsets)
    for index, ((_, layer), row, first) in enumerate(rows):
        # the op's list is the plan's: an automatic capacity follows the plan's activity
        # or max_spikes, not the guess an unplaced layer's op makes
        capacity = None if layer.neuron_model == "readout" else row.capacity_out
        # the input lists the tiles were chosen for: the list of the layer before, or
        # the network's input where the caller sized it (not the plan's guess from
        # activity: a dense input is listed N wide on the IPU)
        capacity_in = row.capacity_in if index else input_max_spikes
        layer.ipu_tiles = IpuTiles(first, row.num_tiles, row.neurons_per_tile, batch_size,
                                   num_steps, row.sample_groups, capacity, float(activity),
                                   capacity_in)
    return report
