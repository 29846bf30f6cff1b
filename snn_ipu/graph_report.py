"""The graph report: what the IPU program of a planned network holds and costs,
measured on the program itself.

:func:`graph_report` builds the network's training step (each layer's
``SnnSpikingLayer``/``SnnReadoutLayer`` op and its grad op, grown by the
IPU's graph builders with the plan's tiles, as PopART would grow them) on the
host implementation of the Poplar API (``snn_ipu._graph``) and reports, without
running it: bytes per tile (variables live at the same time, vertex state and
the planner's code reserve), vertices per tile, and per op the cycles of one
timestep: the vertices' own ``setPerfEstimate`` summed per tile and compute set
(the busiest tile counts), the exchange of its Copy programs (a sync plus the
busiest receiver's bytes at 4 bytes per cycle) and a rough estimate of its
popops operations. Each layer is printed next to the planner's estimate for it
(:func:`snn_ipu.planning.plan`); docs/ipu.md explains where the two differ.

For a pipelined plan (layers on tiles of their own) it also builds the layers as
one program, the fused time loop (:func:`snn_ipu.pipelining.run_fused`), and
reports its forward and backward step beside the planner's pipelined estimate.

Use ``snn_ipu.plan(model_or_sizes, batch_size, num_steps).graph_report()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np

__all__ = ["GraphReport", "OpCycles", "graph_report"]


@dataclass(frozen=True)
class OpCycles:
    """One op of the training step: cycles of one iteration of its time loop
    (compute sets, their syncs, exchange phases, popops operations) and outside it,
    and its compute sets per step."""

    layer: int
    op: str
    steps: int
    step_compute: int
    step_sync: int
    step_exchange: int
    step_popops: int
    step_exchange_bytes: int
    once: int
    total: int
    compute_sets: List[Tuple[str, int]] = field(repr=False, default_factory=list)

    @property
    def step(self) -> int:
        return self.step_compute + self.step_sync + self.step_exchange + self.step_popops


@dataclass(frozen=True)
class GraphReport:
    """The report of :func:`graph_report`; ``str()`` prints it next to the plan."""

    plan: Any  # snn_ipu.planning.PlanReport
    ops: List[OpCycles]
    variable_bytes: np.ndarray  # per tile, at the tile's peak
    vertex_state_bytes: np.ndarray
    vertices: np.ndarray
    layer_bytes: List[np.ndarray]  # per layer, per tile
    reserved_bytes: int
    bytes_per_tile: int
    max_tile_variables: List[Tuple[str, int]]
    counts: Dict[str, int]
    # A pipelined plan's layers as one program (the fused time loop: one Repeat
    # forward, one backward, each step's compute sets holding every layer's
    # vertices), its forward and backward op; empty for other plans.
    fused: List[OpCycles] = field(default_factory=list)

    @property
    def tile_bytes(self) -> np.ndarray:
        """Bytes of each tile the program uses (others 0): variables, vertex state and
        the code reserve."""
        used = (self.variable_bytes + self.vertex_state_bytes) > 0
        return np.where(used, self.variable_bytes + self.vertex_state_bytes + self.reserved_bytes,
                        0)

    @property
    def max_tile(self) -> int:
        return int(np.argmax(self.tile_bytes))

    @property
    def max_tile_bytes(self) -> int:
        return int(self.tile_bytes.max())

    @property
    def fits(self) -> bool:
        return self.max_tile_bytes <= self.bytes_per_tile

    def layer_tile_bytes(self, layer: int) -> int:
        """Bytes on the busiest of the layer's own tiles: its variables (its ops'
        io tensors spread over other tiles too), the vertex state there, the reserve."""
        first = self.plan.tile_offsets[layer]
        tiles = slice(first, first + self.plan.layers[layer].tiles_used)
        own = self.layer_bytes[layer][tiles] + self.vertex_state_bytes[tiles]
        return int(own.max()) + self.reserved_bytes

    def op(self, layer: int, grad: bool) -> OpCycles:
        for o in self.ops:
            if o.layer == layer and o.op.endswith("Grad") == grad:
                return o
        raise KeyError((layer, grad))

    @property
    def cycles_per_step(self) -> int:
        """A training step (all ops, all timesteps); no optimizer."""
        return sum(o.total for o in self.ops)

    @property
    def fused_cycles_per_step(self) -> int:
        """A pipelined plan's training step as the fused program runs it; no optimizer."""
        return sum(o.total for o in self.fused)

    def histogram(self, bin_kib: int = 64) -> List[Tuple[int, int, int]]:
        """(from KiB, to KiB, tiles) of the tiles the program uses."""
        kib = self.tile_bytes[self.tile_bytes > 0] / 1024
        top = max(self.bytes_per_tile // 1024, int(kib.max()) + 1 if kib.size else 0)
        edges = list(range(0, top + bin_kib, bin_kib))
        counts, _ = np.histogram(kib, bins=edges)
        return [(lo, hi, int(c)) for lo, hi, c in zip(edges[:-1], edges[1:], counts)]

    def __str__(self) -> str:
        p = self.plan
        lines = [f"graph report on {p.target}: batch {p.batch_size}, {p.num_steps} steps "
                 f"(the IPU program built on the host; planner's estimate alongside)"]
        head = ["layer", "tiles x groups", "KiB/tile graph", "plan", "fwd cycles/step graph",
                "(exch)", "plan", "(exch)", "bwd cycles/step graph", "(exch)", "plan", "(exch)"]
        rows = [head]
        for i, row in enumerate(p.layers):
            fwd, bwd = self.op(i, False), self.op(i, True)
            c = row.details["cycles"]
            rows.append([
                row.name, f"{row.num_tiles} x {row.sample_groups}",
                f"{self.layer_tile_bytes(i) / 1024:.1f}",
                f"{row.bytes_per_tile_max / 1024:.1f}",
                f"{fwd.step:,}", f"{fwd.step_exchange:,}",
                f"{int(row.details['cycles_forward_timestep']):,}",
                f"{int(c['exchange_forward']):,}",
                f"{bwd.step:,}", f"{bwd.step_exchange:,}",
                f"{int(row.details['cycles_backward_timestep']):,}",
                f"{int(c['exchange_backward']):,}",
            ])
        widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
        for n, r in enumerate(rows):
            lines.append("  ".join(v.ljust(w) if k == 0 else v.rjust(w)
                                   for k, (v, w) in enumerate(zip(r, widths))))
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        # the ops run one after another in the graph
        plan_cycles = sum(int(r.details["cycles_training_step"]) for r in p.layers)
        lines.append(
            f"training step: graph {self.cycles_per_step / 1e6:.3f} Mcycles (no optimizer), "
            f"plan {plan_cycles / 1e6:.3f} Mcycles (with the optimizer)")
        if self.fused:
            fwd, bwd = self.fused
            lines.append(
                f"fused time loop (the pipelined layers as one program): fwd {fwd.step:,} + "
                f"bwd {bwd.step:,} cycles/step, training step graph "
                f"{self.fused_cycles_per_step / 1e6:.3f} Mcycles (no optimizer), plan "
                f"{p.fused_cycles_per_step / 1e6:.3f} Mcycles (with the optimizer; the "
                f"slowest layer alone {max(r.cycles_per_step for r in p.layers) / 1e6:.3f})")
        lines.append(
            f"busiest tile: {self.max_tile} with {self.max_tile_bytes / 1024:.1f} KiB "
            f"({self.variable_bytes[self.max_tile] / 1024:.1f} variables, "
            f"{self.vertex_state_bytes[self.max_tile] / 1024:.1f} vertex state, "
            f"{self.reserved_bytes / 1024:.0f} code reserve) of {self.bytes_per_tile / 1024:.0f}"
            f"; plan {p.bytes_per_tile_combined / 1024:.1f} KiB"
            + (" - fits" if self.fits else " - DOES NOT FIT"))
        top = ", ".join(f"{name} {b / 1024:.1f}" for name, b in self.max_tile_variables[:5])
        lines.append(f"  its largest variables (KiB): {top}")
        hist = "  ".join(f"{lo}-{hi}: {n}" for lo, hi, n in self.histogram() if n)
        lines.append(f"tiles by KiB: {hist}")
        lines.append(
            f"graph: {self.counts['variables']:,} variables, {self.counts['vertices']:,} "
            f"vertices, {self.counts['compute_sets']:,} compute sets, "
            f"{int((self.tile_bytes > 0).sum())} tiles used")
        return "\n".join(lines)


def _attributes(row, first_tile: int) -> Dict[str, float]:
    """A planned layer's op attributes (those that shape its graph; the neuron
    parameters of the layer, reset and surrogate, do not). ``has_bias`` and
    ``grad_window`` are encoded as :func:`snn_ipu.backends.ipu.pack_attributes` sends
    them to the real op."""
    from .backends.ipu import op_grad_window

    d = row.details
    dense = row.model != "readout" and int(d["memory"]["history"]) > 0
    return {
        "model": float(d["model"]), "reset": 0, "surrogate_kind": 0, "surrogate_p0": 2.0,
        "surrogate_p1": 0.0, "grad_window": op_grad_window(row.grad_window),
        "capacity": row.capacity_out, "has_bias": int(bool(row.has_bias)),
        "recurrent": int(row.recurrent), "keep_dense_state": int(dense),
        "neurons_per_tile": row.neurons_per_tile, "first_tile": first_tile,
        "sample_groups": row.sample_groups,
        "activity": float(d["activity"]),
        # the first layer's input is the network's data: no input gradient
        "input_needs_grad": int(bool(d.get("input_needs_grad", True))),
    }


def graph_report(plan) -> GraphReport:
    """Builds the training step of a network planned for ``ipu2`` (a
    :class:`~snn_ipu.planning.PlanReport`) on the host graph and reports it; each
    layer on the tiles :func:`snn_ipu.planning.place` would give it, with its bias and
    ``grad_window``. A plan of sizes alone assumes layers with a bias and the default
    window (``grad_window=None``)."""
    from . import _graph

    if not plan.is_ipu:
        raise ValueError(f"a graph report needs a plan for an IPU target, not {plan.target!r}")
    layers = [
        {"name": row.name, "attributes": _attributes(row, first),
         "in_features": row.in_features, "out_features": row.out_features,
         "weight_type": "half" if int(row.details["weight_bytes"]) == 2 else "float"}
        for row, first in zip(plan.layers, plan.tile_offsets)
    ]
    # a pipelined plan on tiles of its own: also as the one program the layers make
    fused = plan.pipelined and plan.disjoint
    r = _graph.graph_report(layers, plan.batch_size, plan.num_steps, plan.layers[0].capacity_in,
                            fused)

    def cycles(o):
        return OpCycles(o["layer"], o["op"], o["steps"], o["step_compute_cycles"],
                        o["step_sync_cycles"], o["step_exchange_cycles"],
                        o["step_popops_cycles"], o["step_exchange_bytes"],
                        o["once_cycles"], o["total_cycles"], list(o["step_compute_sets"]))

    return GraphReport(
        plan=plan, ops=[cycles(o) for o in r["ops"]], fused=[cycles(o) for o in r["fused_ops"]],
        variable_bytes=np.asarray(r["variable_bytes"], dtype=np.int64),
        vertex_state_bytes=np.asarray(r["vertex_state_bytes"], dtype=np.int64),
        vertices=np.asarray(r["vertices"], dtype=np.int64),
        layer_bytes=[np.asarray(b, dtype=np.int64) for b in r["layer_bytes"]],
        reserved_bytes=int(r["reserved_bytes_per_tile"]), bytes_per_tile=int(r["bytes_per_tile"]),
        max_tile_variables=[(str(n), int(b)) for n, b in r["max_tile_variables"]],
        counts={"variables": r["num_variables"], "vertices": r["num_vertices"],
                "compute_sets": r["num_compute_sets"]},
    )
