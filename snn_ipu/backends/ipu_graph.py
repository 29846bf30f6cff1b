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

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _graph
from .._native import _C, numpy_view
from ..overflow import Overflow
from ..spikes import SparseSpikes
from .contract import CallRecord, LayerConfig, LayerParams, LayerState
from .ipu import _capacity, _check_input_capacity, _tiles, dense_on_device, pack_attributes

__all__ = ["spiking_layer", "readout_layer", "SIGNATURES", "GraphError"]

GraphError = _graph.PoplarError
SIGNATURES: Dict[str, dict] = _graph.op_signatures()

# Inputs of a layer op that another layer's op produces (its list): PopART fails
# the producer's gradient unless the grad op gives each a gradient
# (willow/src/transforms/autodiff), so the weights before it would silently not
# train.
PRODUCED_BY_OTHER_OPS = ("in_ids", "in_counts", "in_values")

# Vertices run twice to catch reads of Output fields before they are written
# (poplar/Engine.hpp); SNN_IPU_GRAPH_CHECK_READS=0 runs them once.
_CHECK_OUTPUT_READS = os.environ.get("SNN_IPU_GRAPH_CHECK_READS", "1") != "0"


def _run(cfg: LayerConfig, op: str, attributes: dict, inputs: Sequence[torch.Tensor],
         forward_inputs: Sequence[torch.Tensor] = ()) -> List[torch.Tensor]:
    def arrays(ts):
        return [numpy_view(t) for t in ts]

    try:
        outputs = _graph.run_op(op, attributes, arrays(inputs), arrays(forward_inputs),
                                _CHECK_OUTPUT_READS)
    except GraphError as exc:
        raise GraphError(f"{cfg.name}: {op}: {exc}") from exc
    except ValueError as exc:  # the op refused its attributes or inputs (LayerOps.cpp)
        raise ValueError(f"{cfg.name}: {op}: {exc}") from exc
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
    """One PopART op forward and its grad op backward. The forward outputs whose
    gradient the grad op does not take are marked non-differentiable."""

    @staticmethod
    def forward(ctx, cfg, op, attributes, *inputs):
        signature = SIGNATURES[op]
        outputs = _run(cfg, op, attributes, inputs)
        ctx.cfg, ctx.op, ctx.attributes = cfg, op, attributes
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
                f"{ctx.cfg.name}: the ipu_graph backend has first-order gradients only; "
                "create_graph=True (higher-order gradients) needs backend='reference'"
            )
        signature = SIGNATURES[ctx.op]
        saved = ctx.saved_tensors
        inputs, outputs = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        results = _run(ctx.cfg, signature["grad_op"], ctx.attributes,
                       _grad_inputs(signature, grads, inputs, outputs), inputs)
        in_grads: List[Optional[torch.Tensor]] = [None] * ctx.num_inputs
        # The table's wiring, less the inputs these attributes give none (LayerOps.hpp:
        # gradOutputInputs: in_values where input_needs_grad is 0), in its order.
        given = {i for _, i in _graph.op_grad_outputs(ctx.op, ctx.attributes)}
        wired = [i for _, i in signature["grad_outputs"] if i in given]
        for result, input_index in zip(results, wired):
            in_grads[input_index] = result
        values = signature["inputs"].index("in_values")
        if in_grads[values] is None and ctx.needs_input_grad[3 + values]:
            raise GraphError(
                f"{ctx.cfg.name}: {signature['grad_op']} was built with input_needs_grad=0, "
                "but its input list's values need a gradient"
            )
        for name in PRODUCED_BY_OTHER_OPS:
            if name == "in_values" and not ctx.attributes.get("input_needs_grad", 1):
                continue  # the network's data: nothing produces it
            if in_grads[signature["inputs"].index(name)] is None:
                raise GraphError(
                    f"{ctx.cfg.name}: {signature['grad_op']} gives no gradient for input "
                    f"{name!r}, which another layer's op produces: PopART would fail that "
                    "op's gradient and leave the weights before this layer untrained"
                )
        return (None, None, None, *(
            g.to(inputs[i].dtype).reshape(inputs[i].shape)
            if g is not None and ctx.needs_input_grad[3 + i] else None
            for i, g in enumerate(in_grads)
        ))


def _check(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
           initial: Optional[LayerState]) -> None:
    if initial is not None or cfg.return_state:
        raise ValueError(
            f"{cfg.name}: carry_state is not supported on the ipu_graph backend (the IPU op "
            "starts every call from zero state)"
        )
    for t in params:
        if t is not None and t.device.type != "cpu":
            raise ValueError(f"{cfg.name}: the ipu_graph backend runs on the CPU; got a "
                             f"tensor on {t.device}")
    if params.weight.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"{cfg.name}: the ipu_graph backend takes float32 or float16 "
                        f"weights, got {params.weight.dtype}")
    _check_input_capacity(cfg, spikes)
    # The vertices index weight rows with the listed ids: a bad list would read
    # outside the tile's block, so it is refused first (as the emulator does).
    try:
        _C.check_spike_list(numpy_view(spikes.ids.to(torch.int32)),
                            numpy_view(spikes.counts.to(torch.int32)), cfg.in_features)
    except ValueError as exc:
        raise ValueError(f"{cfg.name}: {exc}") from exc


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


def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState]) -> Tuple[SparseSpikes, CallRecord]:
    _check(cfg, spikes, params, initial)
    if cfg.overflow == "grow":
        raise ValueError(
            f"{cfg.name}: overflow='grow' cannot be honoured by the IPU op (its list "
            "capacity is fixed when the graph is built); use 'error' or 'drop'"
        )
    weight, bias, beta, alpha = params.weight, params.bias, params.beta, params.alpha
    T, B, N = spikes.num_steps, spikes.batch_size, cfg.out_features
    learn_decay = bool(beta.requires_grad) or bool(alpha is not None and alpha.requires_grad)
    keep_dense = learn_decay or cfg.record_membrane
    capacity = _capacity(cfg, spikes, weight, keep_dense)
    attributes = pack_attributes(cfg, capacity, has_bias=bias is not None,
                                 keep_dense_state=keep_dense,
                                 **_tiles(cfg, spikes, weight, capacity, keep_dense))
    f32 = dict(dtype=torch.float32)
    inputs = [
        spikes.ids.to(torch.int32), spikes.counts.to(torch.int32), spikes.values.float(),
        weight,
        bias if bias is not None else torch.zeros(N, **f32),
        params.rec_weight if params.rec_weight is not None
        else torch.zeros(1, 1, dtype=weight.dtype),
        beta, params.threshold,
        alpha if alpha is not None else torch.zeros(1, **f32),
    ]
    values, ids, counts, _membrane, needed, dense_u, _dense_syn, _bits = _OpFn.apply(
        cfg, "SnnSpikingLayer", attributes, *inputs)
    record = CallRecord("ipu_graph", T, B, N)
    record.overflow = _overflow(needed, counts, capacity)
    record.total_spikes = int(needed[..., 0].sum())
    record.capacity = capacity
    record.needed_capacity = int(needed[..., 1].max()) if needed.numel() else 0
    record.eligible_listed = int((counts[..., 1] - counts[..., 0]).sum())
    record.paths.update(tiles=-(-N // attributes["neurons_per_tile"]), plan_target="ipu2")
    record.membrane = dense_u.detach().clone() if cfg.record_membrane else None
    out = SparseSpikes._made(ids, counts, N, values)
    out._dense_on_device = dense_on_device(readout_layer, cfg)  # as the ipu backend's
    return out, record


def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState]) -> Tuple[torch.Tensor, CallRecord]:
    _check(cfg, spikes, params, initial)
    N = cfg.out_features
    attributes = pack_attributes(cfg, 0, has_bias=params.bias is not None,
                                 keep_dense_state=False,
                                 **_tiles(cfg, spikes, params.weight, 0, False))
    inputs = [
        spikes.ids.to(torch.int32), spikes.counts.to(torch.int32), spikes.values.float(),
        params.weight,
        params.bias if params.bias is not None else torch.zeros(N, dtype=torch.float32),
        params.beta,
    ]
    (membrane,) = _OpFn.apply(cfg, "SnnReadoutLayer", attributes, *inputs)
    record = CallRecord("ipu_graph", spikes.num_steps, spikes.batch_size, N)
    record.paths.update(tiles=-(-N // attributes["neurons_per_tile"]), plan_target="ipu2")
    record.membrane = membrane.detach().clone() if cfg.record_membrane else None
    return membrane, record
