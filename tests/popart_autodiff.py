"""PopART 3.4's gradient-completion rules, applied to a model as PopTorch would trace it.

PopTorch 3.x traces a model at the level of torch's dispatcher and lowers each aten op
to a PopART op; PopART's autodiff then grows the backward graph from the loss. This
module records the same aten-level graph (a ``TorchDispatchMode`` around the stand-in
PopTorch's trace of the model, with the custom ops as nodes of their own), and grows
"which tensor gets a gradient" on it as PopART does. The rules, and where PopART has
them (graphcore/popart at tag ``sdk/poplar/3.4.0``):

R1  The path to the loss: every input of an op that leads to the loss leads to it too,
    and so does its producer (``willow/src/graphfromlosstolossupdater.cpp``,
    ``backwardPropogate``).
R2  A tensor waits for one edge gradient per (consuming op, input index) on that path
    (``transforms/autodiff/tensorgradregistry.cpp``, ``initialize``); a consumer whose
    grad ops produce no gradient for that input lowers the count by one
    (``transforms/autodiff/gradgrower.cpp``, ``processGradOps``). The tensor's gradient is
    complete when the gradients that came match the count; it fails when the count
    reaches zero with none (``tensorgradregistry.cpp``, ``tryMakeComplete``).
R3  An op grows its grad ops once every output of it on the path has a complete
    gradient; one failed output fails the op (``transforms/autodiff/opgradregistry.cpp``,
    ``insert``/``fail``), and a failed op gives none of its inputs a gradient
    (``gradgrower.cpp``, ``failGradOps``).
R4  Which inputs a grown op's grad ops give a gradient (``gradOutToNonGradIn``):
    a float input of an aten op gets one; an integer or bool input never does: the
    indices of Gather (``willow/src/op/gather.cpp``), ScatterReduce
    (``op/scatterreduce.cpp``) and Scatter (``op/scatter.cpp``), the condition of Where
    (``op/where.cpp``), the labels of Nll (``op/nll.cpp``), and a Cast grows no grad op
    unless its source is FLOAT or FLOAT16 (``op/cast.cpp``). Detach has no grad op
    (``op/detach.cpp``, ``Op::getGradOps`` in ``op.cpp`` returns none).
    Comparisons (``op/equal.cpp``, ``less.cpp``, ``greater.cpp``) throw if asked for grad
    ops; their bool outputs can never get a gradient (R4), so they fail first (R3).
    Concat and Slice move data without reading it: their grad ops give every input a
    gradient of that input's own type, integer ones too (``op/concat.cpp``,
    ``ConcatOp::getGradOps`` and ``ConcatGradOp``'s ``outType``; ``op/slice.cpp``,
    ``SliceOp::getGradOps``), as a list delayed by ``snn_ipu.pipeline`` needs.
R5  A custom op's grad op gives the gradients its ``gradOutToNonGradIn`` lists: for
    ours, ``popops_ext/poplar/OpSignatures.hpp`` (``grad_outputs``), less ``in_values``
    where the op's attribute ``input_needs_grad`` is 0 (``LayerOps.hpp``:
    ``gradOutputInputs``, which ``CustomOps.cpp`` builds the map from).
R6  A weight whose gradient failed gets no update and no warning (``willow/src/ir.cpp``:
    "If there is no weight gradient, we assume that the gradient has been forced to
    zero somewhere else").

:func:`untrained_parameters` returns the parameters R1-R6 leave without a gradient.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set

import torch
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# R4: aten ops without a grad op, whatever their inputs' types.
NO_GRAD_OPS = {"aten.detach.default", "aten.alias.default"}
# R4: aten ops (PopART's Concat and Slice) whose grad ops give every input a gradient,
# whatever its type.
EVERY_INPUT_GRAD_OPS = {"aten.cat.default", "aten.slice.Tensor"}


@dataclass
class Node:
    name: str
    inputs: List[int]           # tensor keys, by input index
    outputs: List[int]
    grad_inputs: Set[int]       # input indices its grad ops give a gradient (R4, R5)


@dataclass
class Graph:
    nodes: List[Node] = field(default_factory=list)
    dtypes: Dict[int, torch.dtype] = field(default_factory=dict)
    producer: Dict[int, int] = field(default_factory=dict)  # tensor -> node index
    params: Dict[str, int] = field(default_factory=dict)    # parameter name -> tensor key
    loss: Optional[int] = None


class _Keys:
    """A key per tensor version: the object's id while it lives (the objects are kept
    alive), a new key after an in-place op writes it."""

    def __init__(self) -> None:
        self._alive: List[torch.Tensor] = []
        self._key: Dict[int, int] = {}
        self._next = itertools.count()

    def of(self, t: torch.Tensor) -> int:
        if id(t) not in self._key:
            self._alive.append(t)
            self._key[id(t)] = next(self._next)
        return self._key[id(t)]

    def bump(self, t: torch.Tensor) -> int:
        self.of(t)
        self._key[id(t)] = next(self._next)
        return self._key[id(t)]


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: Graph, keys: _Keys) -> None:
        super().__init__()
        self.graph, self.keys = graph, keys
        self.paused = False

    def add(self, name: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
            grad_inputs: Set[int], in_place: Sequence[torch.Tensor] = ()) -> None:
        g = self.graph
        ins = [self.keys.of(t) for t in inputs]
        written = {id(t) for t in in_place}
        outs = [self.keys.bump(t) if id(t) in written else self.keys.of(t) for t in outputs]
        for t, k in zip([*inputs, *outputs], [*ins, *outs]):
            g.dtypes[k] = t.dtype
        for k in outs:
            g.producer[k] = len(g.nodes)
        g.nodes.append(Node(name, ins, outs, grad_inputs))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        name = str(func)
        if name in NO_GRAD_OPS:
            grads: Set[int] = set()
        elif name in EVERY_INPUT_GRAD_OPS:
            grads = set(range(len(inputs)))
        else:  # R4: float inputs get a gradient, integer and bool ones never
            grads = {i for i, t in enumerate(inputs) if t.is_floating_point()}
        mutable = func._schema.is_mutable if hasattr(func, "_schema") else False
        in_place = [o for o in outputs if any(o is a for a in inputs)] if mutable else []
        self.add(name, inputs, outputs, grads, in_place)
        return out


def trace(poptorch, model: torch.nn.Module, *inputs: torch.Tensor,
          signatures: Dict[str, dict]) -> Graph:
    """The graph PopTorch would hand PopART for ``poptorch.trainingModel(model)`` called
    on ``inputs`` (one micro-batch): the model run on ``meta`` tensors as the stand-in
    PopTorch traces it, every aten op and custom op recorded, the loss the one given to
    ``poptorch.identity_loss``."""
    graph, keys = Graph(), _Keys()
    recorder = _Recorder(graph, keys)
    state = {name: t.detach().to("meta").requires_grad_(t.requires_grad)
             for name, t in {**dict(model.named_parameters()),
                             **dict(model.named_buffers())}.items()}
    for name, _ in model.named_parameters():
        graph.params[name] = keys.of(state[name])
    custom_op = poptorch.custom_op

    def recorded_custom_op(op_inputs, name, *args, **kwargs):
        recorder.paused = True
        try:
            outputs = custom_op(op_inputs, name, *args, **kwargs)
        finally:
            recorder.paused = False
        attributes = kwargs.get("attributes") or {}
        recorder.add(name, op_inputs, outputs, signatures[name]["grad_outputs_for"](attributes))
        return outputs

    losses = []
    identity_loss = poptorch.identity_loss

    def recorded_identity_loss(x, reduction):
        out = identity_loss(x, reduction)
        losses.append(out)
        return out

    poptorch.custom_op, poptorch.identity_loss = recorded_custom_op, recorded_identity_loss
    poptorch._phase = "trace"
    try:
        with recorder:
            functional_call(model, state, tuple(t.to("meta") for t in inputs))
    finally:
        poptorch._phase = None
        poptorch.custom_op, poptorch.identity_loss = custom_op, identity_loss
    if len(losses) != 1:
        raise AssertionError(f"the model marked {len(losses)} losses with identity_loss")
    graph.loss = keys.of(losses[0])
    return graph


def grown_gradients(graph: Graph) -> Set[int]:
    """The tensors whose gradient PopART's autodiff completes (R1-R5), grown in
    gradgrower.cpp's order: complete tensors, failed tensors, complete ops, failed ops."""
    nodes = graph.nodes
    # R1: ops and tensors on the path to the loss.
    to_loss_ops: Set[int] = set()
    to_loss: Set[int] = {graph.loss}
    frontier = [graph.producer[graph.loss]] if graph.loss in graph.producer else []
    to_loss_ops.update(frontier)
    while frontier:
        n = nodes[frontier.pop()]
        for t in n.inputs:
            to_loss.add(t)
            p = graph.producer.get(t)
            if p is not None and p not in to_loss_ops:
                to_loss_ops.add(p)
                frontier.append(p)
    # R2: edges to the loss, per (op, input index).
    expected: Dict[int, int] = {}
    for i in to_loss_ops:
        for t in nodes[i].inputs:
            expected[t] = expected.get(t, 0) + 1
    partial: Dict[int, int] = {}
    complete_t: List[int] = []
    failed_t: List[int] = []
    done_t: Set[int] = set()
    # R3: outputs on the path, per op.
    op_edges = {i: sum(t in to_loss for t in nodes[i].outputs) for i in to_loss_ops}
    op_got: Dict[int, Set[int]] = {}
    complete_ops: List[int] = []
    failed_ops: List[int] = []
    done_ops: Set[int] = set()

    def try_complete(t: int) -> None:
        if t in done_t:
            return
        if expected[t] > 0:
            if partial.get(t, 0) >= expected[t]:
                complete_t.append(t)
                done_t.add(t)
        else:
            failed_t.append(t)
            done_t.add(t)

    def op_insert(op: int, t: int) -> None:
        if t not in to_loss or op in done_ops:
            return
        op_got.setdefault(op, set()).add(t)
        if len(op_got[op]) == op_edges[op]:
            complete_ops.append(op)
            done_ops.add(op)

    def op_fail(op: int, t: int) -> None:
        if t in to_loss and op not in done_ops:
            failed_ops.append(op)
            done_ops.add(op)

    def process(op: int, grown: bool) -> None:
        n = nodes[op]
        for index, t in enumerate(n.inputs):
            if grown and index in n.grad_inputs:
                partial[t] = partial.get(t, 0) + 1
            else:
                expected[t] -= 1
            try_complete(t)

    grads: Set[int] = set()
    op_insert(graph.producer[graph.loss], graph.loss)  # the loss's gradient is provided
    while True:
        progressed = False
        while complete_t:
            t = complete_t.pop(0)
            grads.add(t)
            progressed = True
            if t in graph.producer:
                op_insert(graph.producer[t], t)
        while failed_t:
            t = failed_t.pop(0)
            progressed = True
            if t in graph.producer:
                op_fail(graph.producer[t], t)
        while complete_ops:
            process(complete_ops.pop(0), True)
            progressed = True
        while failed_ops:
            process(failed_ops.pop(0), False)
            progressed = True
        if not progressed:
            return grads


def untrained_parameters(graph: Graph) -> List[str]:
    """R6: the parameters PopART would leave without a gradient (and so untrained)."""
    grads = grown_gradients(graph)
    return [name for name, key in graph.params.items() if key not in grads]


def signature_map(signatures: Dict[str, dict], op_grad_outputs=None) -> Dict[str, dict]:
    """``snn_ipu._graph.op_signatures()`` with each op's gradient-receiving inputs (R5):
    ``grad_outputs_for(attributes)``, from ``op_grad_outputs`` (``snn_ipu._graph``'s, the
    C++ rule) where given, else the table's alone."""
    out = {}
    for name, sig in signatures.items():
        entry = dict(sig)
        table = {i for _, i in sig["grad_outputs"]}
        entry["grad_outputs_inputs"] = sorted(table)

        def given(attributes, name=name, table=table):
            if op_grad_outputs is None:
                return set(table)
            return table & {i for _, i in op_grad_outputs(name, attributes)}

        entry["grad_outputs_for"] = given
        out[name] = entry
    return out

