"""The ipu_graph backend: the IPU's own program, executed on the host.

Each layer call runs the PopART op the ``ipu`` backend would emit
(``SnnSpikingLayer`` / ``SnnReadoutLayer``, with the same attributes and
input shapes, see :mod:`snn_ipu.backends.ipu`) on ``snn_ipu._graph``, a host
implementation of the Poplar graph API: the op's graph is built by the very
graph builders an IPU runs (``popops_ext/poplar``), checked as the device
would check it (tile mappings, exchange, memory per tile) and executed with
the codelets compiled for the host. The backward pass runs the op's grad op,
its inputs and outputs routed by the ops' own wiring table
(``_graph.op_signatures()``, PopART's ``gradInputInfo`` and
``gradOutToNonGradIn``). Slow: it is for tests and for checking the IPU
program without hardware; ``backend="auto"`` never picks it.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from ..spikes import Overflow, SparseSpikes, numpy_view
from .bookkeeping import apply_overflow, record_stats
from .ipu import _capacity, _check_input_capacity, _tiles, pack_attributes

try:
    from .. import _graph
    from .._native import _C
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "snn_ipu's C++ extensions are not built; run `make build` (or `pip install -e .`) "
        f"in the repository ({exc})"
    ) from exc

__all__ = ["spiking_layer", "readout_layer", "SIGNATURES", "GraphError"]

GraphError = _graph.PoplarError
SIGNATURES: Dict[str, dict] = _graph.op_signatures()

# Inputs of a layer op that another layer's op produces (its output list):
# PopART fails the producer's gradient unless the grad op gives each a
# gradient (willow/src/transforms/autodiff), so the weights before it would
# silently not train.
PRODUCED_BY_OTHER_OPS = ("in_ids", "in_counts", "in_values")

# Vertices run twice to catch reads of Output fields before they are written
# (poplar/Engine.hpp); SNN_IPU_GRAPH_CHECK_READS=0 runs them once.
_CHECK_OUTPUT_READS = os.environ.get("SNN_IPU_GRAPH_CHECK_READS", "1") != "0"


def _run(layer, op: str, attributes: dict, inputs: Sequence[torch.Tensor],
         forward_inputs: Sequence[torch.Tensor] = ()) -> List[torch.Tensor]:
    def arrays(ts):
        return [numpy_view(t.detach().contiguous()) for t in ts]

    try:
        outputs = _graph.run_op(op, attributes, arrays(inputs), arrays(forward_inputs),
                                _CHECK_OUTPUT_READS)
    except GraphError as exc:
        raise GraphError(f"{layer.name}: {op}: {exc}") from exc
    except ValueError as exc:  # the op refused its attributes or inputs (LayerOps.cpp)
        raise ValueError(f"{layer.name}: {op}: {exc}") from exc
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in outputs]


def _grad_inputs(signature: dict, grads, inputs, outputs) -> List[torch.Tensor]:
    """The grad op's inputs, as its wiring table lists them."""
    out = []
    for kind, index in signature["grad_inputs"]:
        if kind == "GradOut":
            g = grads[index]
            out.append(torch.zeros_like(outputs[index]) if g is None else g.float())
        elif kind == "In":
            out.append(inputs[index])
        else:
            out.append(outputs[index])
    return out


class _OpFn(torch.autograd.Function):
    """One PopART op and its grad op. ``differentiable``: the forward outputs
    whose gradient the grad op takes (the others are marked non-differentiable)."""

    @staticmethod
    def forward(ctx, layer, op, attributes, *inputs):
        signature = SIGNATURES[op]
        outputs = _run(layer, op, attributes, inputs)
        ctx.layer, ctx.op, ctx.attributes = layer, op, attributes
        ctx.num_inputs = len(inputs)
        # Private copies: an edit through .data before backward (which autograd's
        # version counters miss) cannot change what the grad op's vertices index.
        ctx.save_for_backward(*(t.detach().clone() for t in inputs), *outputs)
        takes_grad = {i for kind, i in signature["grad_inputs"] if kind == "GradOut"}
        ctx.mark_non_differentiable(*(o for i, o in enumerate(outputs) if i not in takes_grad))
        ctx.set_materialize_grads(False)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"{ctx.layer.name}: the ipu_graph backend has first-order gradients only; "
                "create_graph=True (higher-order gradients) needs backend='reference'"
            )
        signature = SIGNATURES[ctx.op]
        saved = ctx.saved_tensors
        inputs, outputs = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        results = _run(ctx.layer, signature["grad_op"], ctx.attributes,
                       _grad_inputs(signature, grads, inputs, outputs), inputs)
        in_grads: List[Optional[torch.Tensor]] = [None] * ctx.num_inputs
        for grad_index, input_index in signature["grad_outputs"]:
            in_grads[input_index] = results[grad_index]
        for name in PRODUCED_BY_OTHER_OPS:
            if in_grads[signature["inputs"].index(name)] is None:
                raise GraphError(
                    f"{ctx.layer.name}: {signature['grad_op']} gives no gradient for input "
                    f"{name!r}, which another layer's op produces: PopART would fail that "
                    "op's gradient and leave the weights before this layer untrained"
                )
        return (None, None, None, *(
            g.to(inputs[i].dtype).reshape(inputs[i].shape)
            if g is not None and ctx.needs_input_grad[3 + i] else None
            for i, g in enumerate(in_grads)
        ))


def _check(layer, spikes: SparseSpikes, initial, *tensors) -> None:
    if initial is not None or layer.carry_state:
        raise ValueError(
            f"{layer.name}: carry_state is not supported on the ipu_graph backend (the IPU op "
            "starts every call from zero state)"
        )
    for t in tensors:
        if t is not None and t.device.type != "cpu":
            raise ValueError(f"{layer.name}: the ipu_graph backend runs on the CPU; got a "
                             f"tensor on {t.device}")
    if layer.weight.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"{layer.name}: the ipu_graph backend takes float32 or float16 "
                        f"weights, got {layer.weight.dtype}")
    _check_input_capacity(layer, spikes)
    # The vertices index weight rows with the listed ids: a bad list would
    # read outside the tile's block, so it is refused first (as the emulator does).
    try:
        _C.check_spike_list(numpy_view(spikes.ids.to(torch.int32).contiguous()),
                            numpy_view(spikes.counts.to(torch.int32).contiguous()),
                            layer.in_features)
    except ValueError as exc:
        raise ValueError(f"{layer.name}: {exc}") from exc


def _overflow(needed: torch.Tensor, counts: torch.Tensor, capacity: int) -> Overflow:
    """What the op's capacity cut, from its ``needed`` and ``counts`` outputs."""
    needed, counts = needed.long(), counts.long()
    spikes_dropped = int((needed[..., 0] - counts[..., 0]).sum())
    eligible_dropped = int(((needed[..., 1] - needed[..., 0])
                            - (counts[..., 1] - counts[..., 0])).sum())
    over = (needed[..., 1] > capacity).nonzero()
    first = None
    if over.numel():
        t, b = (int(v) for v in over[0])
        first = (t, b, int(needed[t, b, 0]), int(needed[t, b, 1]))
    return Overflow(spikes_dropped, eligible_dropped, first)


def spiking_layer(layer, config, spikes: SparseSpikes, weight, bias, rec_weight, beta,
                  threshold, alpha, initial=None) -> SparseSpikes:
    _check(layer, spikes, initial, weight, bias, rec_weight, beta, threshold, alpha)
    if layer.overflow == "grow":
        raise ValueError(
            f"{layer.name}: overflow='grow' cannot be honoured by the IPU op (its list "
            "capacity is fixed when the graph is built); use 'error' or 'drop'"
        )
    T, B, N = spikes.num_steps, spikes.batch_size, layer.out_features
    learn_decay = bool(beta.requires_grad) or bool(alpha is not None and alpha.requires_grad)
    keep_dense = learn_decay or layer.record_membrane
    capacity = _capacity(layer, config, spikes, keep_dense)
    attributes = pack_attributes(config, capacity, has_bias=bias is not None,
                                 keep_dense_state=keep_dense,
                                 **_tiles(layer, spikes, capacity, keep_dense))
    f32 = dict(dtype=torch.float32)
    inputs = [
        spikes.ids.to(torch.int32), spikes.counts.to(torch.int32), spikes.values.float(),
        weight,
        bias if bias is not None else torch.zeros(N, **f32),
        rec_weight if rec_weight is not None else torch.zeros(1, 1, dtype=weight.dtype),
        beta, threshold,
        alpha if alpha is not None else torch.zeros(1, **f32),
    ]
    values, ids, counts, _membrane, needed, dense_u, _dense_syn, _bits = _OpFn.apply(
        layer, "SnnSpikingLayer", attributes, *inputs)
    overflow = _overflow(needed, counts, capacity)
    apply_overflow(layer, capacity, overflow)
    record_stats(
        layer, "ipu_graph", T, B, int(needed[..., 0].sum()), capacity,
        int(needed[..., 1].max()) if needed.numel() else 0, overflow,
        int((counts[..., 1] - counts[..., 0]).sum()),
        tiles=math.ceil(N / attributes["neurons_per_tile"]), plan_target="ipu2",
    )
    layer.last_membrane = dense_u.detach().clone() if layer.record_membrane else None
    return SparseSpikes._made(ids, counts, N, values)


def readout_layer(layer, spikes: SparseSpikes, weight, bias, beta, initial=None) -> torch.Tensor:
    _check(layer, spikes, initial, weight, bias, beta)
    N = layer.out_features
    attributes = pack_attributes(layer.config(), 0, has_bias=bias is not None,
                                 keep_dense_state=False, **_tiles(layer, spikes, 0, False))
    inputs = [
        spikes.ids.to(torch.int32), spikes.counts.to(torch.int32), spikes.values.float(),
        weight,
        bias if bias is not None else torch.zeros(N, dtype=torch.float32),
        beta,
    ]
    (membrane,) = _OpFn.apply(layer, "SnnReadoutLayer", attributes, *inputs)
    layer.stats = {"backend": "ipu_graph", "plan_target": "ipu2",
                   "tiles": math.ceil(N / attributes["neurons_per_tile"])}
    layer.last_membrane = membrane.detach().clone() if layer.record_membrane else None
    return membrane
