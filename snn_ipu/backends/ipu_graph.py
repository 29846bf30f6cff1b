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
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _graph
from .._native import _C, numpy_view
from ..overflow import Overflow
from ..spikes import SparseSpikes
from .contract import CallRecord, LayerConfig, LayerParams, LayerState
from .ipu import (
    _capacity,
    _check_input_capacity,
    _tiles,
    check_op_settings,
    dense_on_device,
    pack_attributes,
)

__all__ = ["spiking_layer", "readout_layer", "pipelined_network", "SIGNATURES", "GraphError"]

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


def _grad_wiring(op: str, attributes: dict) -> List[Tuple[int, int]]:
    """(grad op output, forward input) of ``op``'s grad op with these attributes: the
    table's wiring (``SIGNATURES``), less the inputs the attributes give none
    (LayerOps.hpp, gradOutputInputs: in_values where input_needs_grad is 0), in order."""
    given = {i for _, i in _graph.op_grad_outputs(op, attributes)}
    wired = [i for _, i in SIGNATURES[op]["grad_outputs"] if i in given]
    return list(enumerate(wired))


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
        for grad_index, input_index in _grad_wiring(ctx.op, ctx.attributes):
            in_grads[input_index] = results[grad_index]
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
    check_op_settings(cfg, params.weight)
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


def _spiking_op(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams
                ) -> Tuple[dict, List[torch.Tensor], int]:
    """The SnnSpikingLayer op's attributes and inputs for a call, and its capacity."""
    weight, bias, beta, alpha = params.weight, params.bias, params.beta, params.alpha
    N = cfg.out_features
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
    return attributes, inputs, capacity


def _spiking_result(cfg: LayerConfig, outputs: Sequence[torch.Tensor], attributes: dict,
                    capacity: int) -> Tuple[SparseSpikes, CallRecord]:
    """The list and the call's record from the op's outputs."""
    values, ids, counts, _membrane, needed, dense_u, _dense_syn, _bits = outputs
    T, B = ids.shape[0], ids.shape[1]
    N = cfg.out_features
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


def _readout_op(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams
                ) -> Tuple[dict, List[torch.Tensor]]:
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
    return attributes, inputs


def _readout_result(cfg: LayerConfig, membrane: torch.Tensor, attributes: dict
                    ) -> Tuple[torch.Tensor, CallRecord]:
    N = cfg.out_features
    record = CallRecord("ipu_graph", membrane.shape[0], membrane.shape[1], N)
    record.paths.update(tiles=-(-N // attributes["neurons_per_tile"]), plan_target="ipu2")
    record.membrane = membrane.detach().clone() if cfg.record_membrane else None
    return membrane, record


def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[SparseSpikes, CallRecord]:
    _check(cfg, spikes, params, initial)
    attributes, inputs, capacity = _spiking_op(cfg, spikes, params)
    outputs = _OpFn.apply(cfg, "SnnSpikingLayer", attributes, *inputs)
    return _spiking_result(cfg, outputs, attributes, capacity)


def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[torch.Tensor, CallRecord]:
    _check(cfg, spikes, params, initial)
    attributes, inputs = _readout_op(cfg, spikes, params)
    (membrane,) = _OpFn.apply(cfg, "SnnReadoutLayer", attributes, *inputs)
    return _readout_result(cfg, membrane, attributes)


# A layer op's first inputs, its list (in_ids, in_counts, in_values), in both ops.
_LIST = 3


class _NetworkFn(torch.autograd.Function):
    """A pipelined stack of layer ops as one program (the fused time loop,
    ``_graph.run_network``) forward, and its backward. ``inputs``: the first layer's
    list (ids, counts, values), then each layer's op inputs after its list
    (``net["sizes"]`` of them); returns every layer's op outputs, layer after layer.
    The lists of the layers after the first never leave the program."""

    @staticmethod
    def forward(ctx, net, *inputs):
        outputs = _run_network(net, _per_layer(net, inputs, [[None] * _LIST] * len(net["ops"])))
        ctx.net, ctx.num_inputs = net, len(inputs)
        ctx.counts = [len(o) for o in outputs]
        flat = [o for layer in outputs for o in layer]
        ctx.save_for_backward(*(t.detach().clone() for t in inputs), *flat)
        takes_grad, at = set(), 0
        for op, n in zip(net["ops"], ctx.counts):
            takes_grad |= {at + i for kind, i in SIGNATURES[op]["grad_inputs"] if kind == "GradOut"}
            at += n
        ctx.mark_non_differentiable(*(o for i, o in enumerate(flat) if i not in takes_grad))
        ctx.set_materialize_grads(False)
        return tuple(flat)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{ctx.net['name']}: the ipu_graph backend has first-order "
                               "gradients only; create_graph=True needs backend='reference'")
        net, saved = ctx.net, ctx.saved_tensors
        inputs, flat = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        outs, gs, at = [], [], 0
        for n in ctx.counts:
            outs.append(flat[at:at + n])
            gs.append(grads[at:at + n])
            at += n
        # the lists as the layers saw them: the layer before's ids, counts, values
        # (the program delays them itself; here they give the shapes and dtypes)
        lists = [inputs[:_LIST]] + [(o[1], o[2], o[0]) for o in outs[:-1]]
        forward_inputs = _per_layer(net, inputs, lists)
        grad_inputs = []
        for i, op in enumerate(net["ops"]):
            row = []
            for kind, index in SIGNATURES[op]["grad_inputs"]:
                if kind == "GradOut":
                    g = gs[i][index]
                    row.append(None if g is None else g.float())
                elif kind == "In":
                    row.append(None if i > 0 and index < _LIST else forward_inputs[i][index])
                else:
                    row.append(outs[i][index])
            grad_inputs.append(row)
        results = _run_network(net, grad_inputs, forward_inputs)
        in_grads: List[Optional[torch.Tensor]] = [None] * ctx.num_inputs
        at = _LIST
        for i, (op, n) in enumerate(zip(net["ops"], net["sizes"])):
            for grad_index, input_index in _grad_wiring(op, net["attributes"][i]):
                if input_index >= _LIST:
                    in_grads[at + input_index - _LIST] = results[i][grad_index]
                elif i == 0:  # the network's input; the later lists' stay in the program
                    in_grads[input_index] = results[i][grad_index]
            at += n
        return (None, *(
            g.to(inputs[k].dtype).reshape(inputs[k].shape)
            if g is not None and ctx.needs_input_grad[1 + k] else None
            for k, g in enumerate(in_grads)
        ))


def _per_layer(net: dict, inputs, lists) -> List[list]:
    """Each layer's op inputs: its list (the first layer's from ``inputs``, the others'
    from ``lists``) and its own inputs after it."""
    out, at = [], _LIST
    for i, (n, listed) in enumerate(zip(net["sizes"], lists)):
        out.append(list(inputs[:_LIST] if i == 0 else listed) + list(inputs[at:at + n]))
        at += n
    return out


def _run_network(net: dict, per_layer, forward_inputs=None) -> List[List[torch.Tensor]]:
    def array(t):
        return None if t is None else numpy_view(t)

    grad = forward_inputs is not None
    try:
        outputs = _graph.run_network(
            net["ops"], net["attributes"], [[array(t) for t in layer] for layer in per_layer],
            grad, [[numpy_view(t) for t in layer] for layer in forward_inputs or []],
            _CHECK_OUTPUT_READS)
    except GraphError as exc:
        raise GraphError(f"{net['name']}: {exc}") from exc
    except ValueError as exc:  # the ops refused their attributes or inputs (LayerOps.cpp)
        raise ValueError(f"{net['name']}: {exc}") from exc
    return [[torch.from_numpy(np.ascontiguousarray(a)) for a in layer] for layer in outputs]


def _stand_in(like: SparseSpikes, num_neurons: int, capacity: int) -> SparseSpikes:
    """A list of a layer's input shape (what the layer before emits), for the op's
    attributes: a layer after the first of a fused network reads its list on the
    device."""
    T, B = like.num_steps, like.batch_size
    # values that need a gradient, as a layer's list's do (ipu.input_needs_grad): the
    # layer before learns through them
    return SparseSpikes._made(torch.zeros(T, B, capacity, dtype=torch.int32),
                              torch.zeros(T, B, 2, dtype=torch.int32), num_neurons,
                              torch.zeros(T, B, capacity).requires_grad_())


def pipelined_network(configs: Sequence[LayerConfig], spikes: SparseSpikes,
                      params: Sequence[LayerParams], name: str = "network"
                      ) -> List[Tuple[Any, CallRecord]]:
    """A pipelined stack of layers (layer l > 0 reads layer l-1's list one step late)
    as one program with one time loop, forward and backward (the fused time loop,
    ``popops_ext/poplar/NetworkOps.hpp``); only the last layer may be a readout.
    ``spikes``: the first layer's input. Returns each layer's output and call record,
    as :func:`spiking_layer` / :func:`readout_layer` would for the layer with its
    input delayed by one step."""
    if not configs or len(configs) != len(params):
        raise ValueError(f"{name}: a fused network needs one config and params per layer")
    for cfg in configs[:-1]:
        if not cfg.spiking:
            raise ValueError(f"{name}: {cfg.name} is a readout, which lists no spikes for the "
                             "layer after it: only the last layer may be one")
    ops, attributes, sizes, flat, capacities = [], [], [], [], []
    layer_input = spikes
    for i, (cfg, p) in enumerate(zip(configs, params)):
        _check(cfg, layer_input, p, None)
        if cfg.spiking:
            attrs, inputs, capacity = _spiking_op(cfg, layer_input, p)
            ops.append("SnnSpikingLayer")
        else:
            attrs, inputs = _readout_op(cfg, layer_input, p)
            capacity = 0
            ops.append("SnnReadoutLayer")
        if i == 0:
            flat.extend(inputs[:_LIST])
        attributes.append(attrs)
        capacities.append(capacity)
        sizes.append(len(inputs) - _LIST)
        flat.extend(inputs[_LIST:])
        if cfg.spiking:
            layer_input = _stand_in(spikes, cfg.out_features,
                                    min(capacity, cfg.out_features))
    net = {"name": name, "ops": ops, "attributes": attributes, "sizes": sizes}
    outputs = _NetworkFn.apply(net, *flat)
    results, at = [], 0
    for cfg, op, attrs, capacity in zip(configs, ops, attributes, capacities):
        n = len(SIGNATURES[op]["outputs"])
        layer_out = outputs[at:at + n]
        at += n
        if cfg.spiking:
            results.append(_spiking_result(cfg, layer_out, attrs, capacity))
        else:
            results.append(_readout_result(cfg, layer_out[0], attrs))
    return results
