r"""snn_ipu models to and from the Neuromorphic Intermediate Representation (``nir``
1.0), under the names snnTorch uses: :func:`export_to_nir` and :func:`import_from_nir`.

NIR describes neurons in continuous time; snn_ipu (like snnTorch) steps them in
discrete time. The two meet through a time step ``dt`` (default ``1e-4``, snnTorch's,
so that graphs pass between the two unchanged); only the ratios ``dt / tau`` matter::

    snn_ipu layer                       NIR node
    weight, bias                        Affine(weight, bias)   (Linear without bias)
    LIFLayer(beta, threshold,           LIF(tau = dt / (1 - beta), r = tau / dt,
             reset="zero")                  v_leak = 0, v_threshold = threshold, v_reset = 0)
    SynapticLayer(alpha, beta, ...)     CubaLIF(tau_syn = dt / (1 - alpha),
                                            tau_mem = dt / (1 - beta), r = tau_mem / dt,
                                            w_in = tau_syn / dt, ...)
    ReadoutLayer(beta)                  LI(tau = dt / (1 - beta), r = tau / dt, v_leak = 0)
    (SynapticLayer: only with synaptic_as_cubalif=True, see below)
    recurrent=True                      an Affine/Linear "w_rec" node from the neuron back to it

Reading a node back is the forward Euler step of its equation,
:math:`v[t] = (1 - dt/\tau) v[t-1] + (dt/\tau) v_{leak} + (dt\,r/\tau) I[t]`: so
``beta = 1 - dt/tau``, and a gain ``dt r / tau`` other than 1 (and, for CubaLIF,
``dt w_in / tau_syn``) scales the incoming weights, rows per neuron, while
``(dt/tau) v_leak`` joins the bias (LIF, LI; a CubaLIF's ``v_leak`` must be 0). Gains
within 1e-6 of 1 are taken as 1 (they are float32 roundings of ``r = tau/dt``).

Resets: NIR's LIF and CubaLIF set the membrane to ``v_reset`` after a spike, which for
a LIF is ``reset="zero"`` with ``v_reset = 0``. A layer that resets by subtraction (the
default) or not at all has no NIR form and :func:`export_to_nir` refuses it.

A CubaLIF, as snnTorch's and SpikingJelly's importers step it (a literal Euler step),
resets the membrane alone, ``U[t] = beta (1 - S[t-1]) U[t-1] + syn[t]``; a
SynapticLayer's zero reset (snnTorch's ``Synaptic``) also drops the step's current,
``U[t] = (1 - S[t-1]) (beta U[t-1] + syn[t])``. No layer steps NIR's form, so a
SynapticLayer is exported, and a CubaLIF imported, only when asked
(``synaptic_as_cubalif=True``, ``cubalif_as_synaptic=True``: snnTorch's exporter's
reading), and refused otherwise.

One rule for ``dt`` both ways: positive, finite, a normal float32. Every node must lie
on the chain from Input to Output (a neuron's recurrent Affine/Linear is the one cycle).
"""

from __future__ import annotations

import math
import numbers
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from .._numbers import flag
from ..layers import LIFLayer, ReadoutLayer, SynapticLayer
from ..overflow import warn_if_export_loses_drops
from ..pipelining import require_no_input_delay

__all__ = ["export_to_nir", "import_from_nir", "DEFAULT_DT"]

DEFAULT_DT = 1e-4
_UNIT_GAIN_TOLERANCE = 1e-6


def _nir():
    try:
        import nir
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("NIR interop needs nir: pip install 'snn_ipu[nir]' (or nir)") from exc
    return nir


def _per_neuron(t: torch.Tensor, n: int) -> np.ndarray:
    """A scalar-or-[n] parameter as float32 [n]."""
    t = t.detach().float().reshape(-1)
    return t.expand(n).numpy().copy() if t.numel() == 1 else t.numpy().copy()


_F32 = np.finfo(np.float32)

# What NIR's CubaLIF means, as snnTorch's and SpikingJelly's importers step it, and how
# SynapticLayer differs: the reason neither direction maps one onto the other unasked.
_CUBALIF_RESET = (
    "NIR's CubaLIF, as snnTorch's and SpikingJelly's import_from_nir step it, resets the "
    "membrane alone: U[t] = beta (1 - S[t-1]) U[t-1] + syn[t]; a SynapticLayer's zero "
    "reset (snnTorch's Synaptic, whose exporter writes it as a CubaLIF) also drops that "
    "step's current: U[t] = (1 - S[t-1]) (beta U[t-1] + syn[t]), so spikes differ")


def _time_step(dt, where: str) -> float:
    """The time step both directions take: a number whose float32 is a normal positive
    float (the time constants are float32 multiples of it; dt=0 or 1e-300 would give
    decays of 1 and gains of 0)."""
    if isinstance(dt, (bool, np.bool_)) or not isinstance(dt, numbers.Real):
        raise TypeError(f"{where}: dt must be a number, got {dt!r}")
    dt = float(dt)
    if not (math.isfinite(dt) and _F32.tiny <= dt <= _F32.max):
        raise ValueError(f"{where}: dt must be a positive finite time step, representable "
                         f"in float32 (>= {_F32.tiny:.3g}), got {dt!r}")
    return dt


def _time_constant(decay: np.ndarray, dt: float, what: str, where: str) -> np.ndarray:
    if np.any(decay >= 1.0):
        raise ValueError(f"export_to_nir: {where}: {what} = 1 has no NIR time constant "
                         f"(tau = dt / (1 - {what}) is infinite)")
    tau = (dt / (1.0 - decay.astype(np.float64))).astype(np.float32)
    if not np.all(np.isfinite(tau / np.float32(dt))):
        raise ValueError(f"export_to_nir: {where}: {what} too close to 1 for dt={dt}: "
                         "tau / dt overflows float32")
    return tau


def export_to_nir(model: nn.Module, sample_data: Optional[torch.Tensor] = None,
                  dt: float = DEFAULT_DT, *, synaptic_as_cubalif: bool = False):
    """The ``nir.NIRGraph`` of an snn_ipu model (an ``nn.Sequential`` of layers, or an
    iterable of them). ``sample_data`` (optional, ``[T, B, in]`` or ``[in]``) is only
    checked against the first layer's input size: the graph comes from the layers'
    settings, not from tracing. A ``SynapticLayer`` has no exact NIR form (see the module
    docstring) and is refused unless ``synaptic_as_cubalif=True``, which writes it as a
    CubaLIF as snnTorch's exporter writes a ``Synaptic``: NIR's other importers then
    step another model."""
    nir = _nir()
    dt = _time_step(dt, "export_to_nir")
    synaptic_as_cubalif = flag("synaptic_as_cubalif", synaptic_as_cubalif)
    layers = list(model)
    if not layers:
        raise ValueError("export_to_nir: the model holds no layers")
    for layer in layers:
        if not isinstance(layer, (LIFLayer, SynapticLayer, ReadoutLayer)):
            raise ValueError(f"export_to_nir: {type(layer).__name__} is not an snn_ipu layer")
        require_no_input_delay(layer, "export_to_nir")
        warn_if_export_loses_drops(layer, "export_to_nir", "NIR")
        if isinstance(layer, ReadoutLayer) and layer is not layers[-1]:
            # NIR would feed its membrane to the next node, which no layer takes (and
            # import_from_nir refuses an LI that is not last)
            raise ValueError(f"export_to_nir: {layer.name} is a ReadoutLayer before another "
                             "layer; a readout (its output is the membrane) must be the last "
                             "layer")
    if sample_data is not None and int(sample_data.shape[-1]) != layers[0].in_features:
        raise ValueError(f"export_to_nir: sample_data has {int(sample_data.shape[-1])} "
                         f"features, the model takes {layers[0].in_features}")
    nodes: Dict[str, object] = {"input": nir.Input(input_type=np.array([layers[0].in_features]))}
    edges: List[Tuple[str, str]] = []
    previous = "input"
    for i, layer in enumerate(layers):
        where = layer.name
        n = layer.out_features
        # Node names sort after "input" and before "output": nir.read returns the nodes
        # sorted by name, and snnTorch's importer takes the first node for the input.
        key = f"layer{i}"
        # The constants as the layer steps them: learned decays clamped to [0, 1].
        params = layer._params()
        weight = layer.weight.detach().float().numpy().copy()
        if layer.bias is not None:
            nodes[f"{key}.affine"] = nir.Affine(
                weight=weight, bias=layer.bias.detach().float().numpy().copy())
        else:
            nodes[f"{key}.affine"] = nir.Linear(weight=weight)
        edges.append((previous, f"{key}.affine"))
        beta = _per_neuron(params.beta, n)
        tau = _time_constant(beta, dt, "beta", where)
        zeros = np.zeros(n, dtype=np.float32)
        if isinstance(layer, ReadoutLayer):
            name = f"{key}.li"
            nodes[name] = nir.LI(tau=tau, r=(tau / dt).astype(np.float32), v_leak=zeros)
        else:
            if layer.reset != "zero":
                raise ValueError(
                    f"export_to_nir: {where} resets by {layer.reset!r}; NIR's neurons reset "
                    "to v_reset after a spike, which is reset='zero' (set layer.reset = "
                    "'zero' if the model was trained that way, or train it so)")
            threshold = _per_neuron(params.threshold, n)
            if isinstance(layer, SynapticLayer):
                if not synaptic_as_cubalif:
                    raise ValueError(
                        f"export_to_nir: {where} is a SynapticLayer, which has no NIR form: "
                        f"{_CUBALIF_RESET}. Pass synaptic_as_cubalif=True to write it as a "
                        "CubaLIF anyway (as snnTorch's exporter does; import_from_nir(..., "
                        "cubalif_as_synaptic=True) reads it back exactly)")
                tau_syn = _time_constant(_per_neuron(params.alpha, n), dt, "alpha", where)
                name = f"{key}.cubalif"
                nodes[name] = nir.CubaLIF(
                    tau_syn=tau_syn, tau_mem=tau, r=(tau / dt).astype(np.float32),
                    v_leak=zeros, v_threshold=threshold, v_reset=zeros.copy(),
                    w_in=(tau_syn / dt).astype(np.float32))
            else:
                name = f"{key}.lif"
                nodes[name] = nir.LIF(tau=tau, r=(tau / dt).astype(np.float32), v_leak=zeros,
                                      v_threshold=threshold, v_reset=zeros.copy())
            if layer.recurrent:
                rec = layer.rec_weight.detach().float().numpy().copy()
                if layer.rec_bias is not None:
                    nodes[f"{key}.w_rec"] = nir.Affine(
                        weight=rec, bias=layer.rec_bias.detach().float().numpy().copy())
                else:
                    nodes[f"{key}.w_rec"] = nir.Linear(weight=rec)
                edges += [(name, f"{key}.w_rec"), (f"{key}.w_rec", name)]
        edges.append((f"{key}.affine", name))
        previous = name
    nodes["output"] = nir.Output(output_type=np.array([layers[-1].out_features]))
    edges.append((previous, "output"))
    return nir.NIRGraph(nodes=nodes, edges=edges)


# -- import ------------------------------------------------------------------------------

def _inline_subgraphs(nir, nodes: Dict[str, object], edges: List[Tuple[str, str]]):
    """Nodes and edges with every nested NIRGraph (snnTorch's recurrent subgraphs)
    opened up, and the inner Input/Output nodes bridged."""
    nodes, edges = dict(nodes), list(edges)
    while True:
        nested = [k for k, v in nodes.items() if isinstance(v, nir.NIRGraph)]
        if not nested:
            return nodes, edges
        key = nested[0]
        sub = nodes.pop(key)
        inner = {f"{key}.{k}": v for k, v in sub.nodes.items()}
        ins = [k for k, v in inner.items() if isinstance(v, nir.Input)]
        outs = [k for k, v in inner.items() if isinstance(v, nir.Output)]
        if len(ins) != 1 or len(outs) != 1:
            raise ValueError(f"import_from_nir: subgraph {key!r} needs one Input and one Output")
        sub_edges = [(f"{key}.{a}", f"{key}.{b}") for a, b in sub.edges]
        after_in = [b for a, b in sub_edges if a == ins[0]]
        before_out = [a for a, b in sub_edges if b == outs[0]]
        new_edges = []
        for a, b in edges:
            if b == key:
                new_edges += [(a, t) for t in after_in]
            elif a == key:
                new_edges += [(s, b) for s in before_out]
            else:
                new_edges.append((a, b))
        new_edges += [(a, b) for a, b in sub_edges if ins[0] not in (a, b) and outs[0] not in
                      (a, b)]
        for k, v in inner.items():
            if k not in (ins[0], outs[0]):
                nodes[k] = v
        edges = new_edges


def _unit(gain: np.ndarray) -> np.ndarray:
    return np.where(np.abs(gain - 1.0) <= _UNIT_GAIN_TOLERANCE, 1.0, gain)


def _array(x, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)).copy()


def _decay_of(tau, dt: float, n: int, what: str, where: str) -> np.ndarray:
    tau = _array(tau, n)
    # tau = dt (a decay of 0) is written in float32, which can round it just below dt
    if np.any(~np.isfinite(tau)) or np.any(tau.astype(np.float32) < np.float32(dt)):
        raise ValueError(f"import_from_nir: {where}: {what} must be finite and >= dt={dt} "
                         "(a decay 1 - dt/tau in [0, 1])")
    decay = np.maximum(1.0 - dt / tau, 0.0)
    if np.any(np.float32(decay) >= 1.0):
        # export refuses a decay of 1 (no finite tau); a tau that gives one in float32
        # means dt is not the graph's time step (dt=1e-300 gave beta=1, zero weights)
        raise ValueError(f"import_from_nir: {where}: {what}={float(tau.max()):g} is over "
                         f"2**24 times dt={dt}: its decay 1 - dt/{what} rounds to 1 in "
                         "float32, which has no finite time constant; pass the graph's "
                         "time step as dt")
    return decay


def _value(x: np.ndarray):
    """A scalar where every neuron has the same value (the layers' usual form)."""
    return float(x[0]) if np.all(x == x[0]) else torch.tensor(x, dtype=torch.float32)


def import_from_nir(graph, dt: float = DEFAULT_DT, backend: str = "auto", *,
                    cubalif_as_synaptic: bool = False) -> nn.Sequential:
    """An snn_ipu ``nn.Sequential`` from a ``nir.NIRGraph`` that chains Affine/Linear
    nodes into LIF, CubaLIF or LI nodes (LIF and CubaLIF optionally with a recurrent
    Affine/Linear back onto themselves), from one Input to one Output; see the module
    docstring for the parameter mapping. A CubaLIF is refused unless
    ``cubalif_as_synaptic=True``, which reads it as snnTorch's exporter writes a
    ``Synaptic`` (a SynapticLayer with reset="zero"), not as NIR's other importers step
    it (module docstring). Every node and edge must be part of the chain: a cycle other
    than a neuron's recurrent Affine/Linear, or a node off the chain, is refused."""
    nir = _nir()
    dt = _time_step(dt, "import_from_nir")
    cubalif_as_synaptic = flag("cubalif_as_synaptic", cubalif_as_synaptic)
    if not isinstance(graph, nir.NIRGraph):
        raise TypeError(f"import_from_nir takes a nir.NIRGraph, got {type(graph).__name__}")
    nodes, edges = _inline_subgraphs(nir, graph.nodes, graph.edges)
    inputs = [k for k, v in nodes.items() if isinstance(v, nir.Input)]
    outputs = [k for k, v in nodes.items() if isinstance(v, nir.Output)]
    if len(inputs) != 1 or len(outputs) != 1:
        raise ValueError(f"import_from_nir: needs one Input and one Output node, has "
                         f"{inputs} and {outputs}")
    successors: Dict[str, List[str]] = {k: [] for k in nodes}
    predecessors: Dict[str, List[str]] = {k: [] for k in nodes}
    for a, b in edges:
        if a not in nodes or b not in nodes:
            raise ValueError(f"import_from_nir: edge ({a!r}, {b!r}) names a missing node")
        successors[a].append(b)
        predecessors[b].append(a)

    def only_successor(key: str, skip=()) -> str:
        nxt = [s for s in successors[key] if s not in skip]
        if len(nxt) != 1:
            raise ValueError(f"import_from_nir: {key!r} leads to {nxt}; snn_ipu imports chains "
                             "of Affine/Linear -> neuron (a neuron may feed one recurrent "
                             "Affine/Linear back to itself)")
        return nxt[0]

    layers: List[nn.Module] = []
    current = only_successor(inputs[0])
    visited = [inputs[0]]
    while current != outputs[0]:
        if current in visited:  # the walk came back: it would never reach the Output
            loop = visited[visited.index(current):] + [current]
            raise ValueError(f"import_from_nir: the graph has a cycle {' -> '.join(loop)}; "
                             "the only cycle snn_ipu imports is a neuron's recurrent "
                             "Affine/Linear (neuron -> w_rec -> neuron)")
        projection = nodes[current]
        if not isinstance(projection, (nir.Affine, nir.Linear)):
            raise ValueError(f"import_from_nir: node {current!r} is a "
                             f"{type(projection).__name__}; expected Affine or Linear "
                             "(supported: Affine, Linear, LIF, CubaLIF, LI)")
        neuron_key = only_successor(current)
        neuron = nodes[neuron_key]
        # a neuron's own recurrent projection: fed by the neuron alone, feeding it alone
        # (the forward projection fed back too would be one weight and bias over the sum
        # of its inputs, as NIR sums them: no layer takes that, and only_successor below
        # refuses it)
        recurrent_keys = [s for s in successors[neuron_key]
                          if s != current and isinstance(nodes[s], (nir.Affine, nir.Linear))
                          and successors[s] == [neuron_key]
                          and predecessors[s] == [neuron_key]]
        if len(recurrent_keys) > 1:
            raise ValueError(f"import_from_nir: {neuron_key!r} has several recurrent nodes "
                             f"{recurrent_keys}")
        recurrent = nodes[recurrent_keys[0]] if recurrent_keys else None
        if isinstance(neuron, nir.CubaLIF) and not cubalif_as_synaptic:
            raise ValueError(
                f"import_from_nir: {neuron_key!r} is a CubaLIF, which no snn_ipu layer steps "
                f"as NIR does: {_CUBALIF_RESET}. Pass cubalif_as_synaptic=True to read it "
                "as snnTorch's Synaptic (right for graphs snnTorch's or snn_ipu's exporter "
                "wrote from Synaptic layers)")
        visited += [current, neuron_key, *recurrent_keys]
        layers.append(_layer_from_nodes(nir, neuron_key, projection, neuron, recurrent, dt,
                                        backend))
        current = only_successor(neuron_key, skip=recurrent_keys)
        if isinstance(neuron, nir.LI) and current != outputs[0]:
            # a readout gives its membrane, not spikes: no layer can follow it
            raise ValueError(f"import_from_nir: {neuron_key!r} is an LI (a readout, whose "
                             f"output is its membrane) followed by {current!r}; an LI must "
                             "be the last layer")
    if not layers:
        raise ValueError("import_from_nir: the graph holds no layer between Input and Output")
    off_chain = sorted(set(nodes) - set(visited) - {outputs[0]})
    if off_chain:
        raise ValueError(f"import_from_nir: nodes {off_chain} are not on the chain from "
                         f"{inputs[0]!r} to {outputs[0]!r}; snn_ipu imports chains of "
                         "Affine/Linear -> neuron")
    return nn.Sequential(*layers)


def _layer_from_nodes(nir, name: str, projection, neuron, recurrent, dt: float, backend: str):
    weight = np.asarray(projection.weight, dtype=np.float64)
    if weight.ndim != 2:
        raise ValueError(f"import_from_nir: {name}: the weight before it must be 2-d, got "
                         f"shape {weight.shape}")
    n_out, n_in = weight.shape
    bias = (np.asarray(projection.bias, dtype=np.float64) if isinstance(projection, nir.Affine)
            else None)
    where = f"{name} ({type(neuron).__name__})"
    if isinstance(neuron, (nir.LIF, nir.LI)):
        beta = _decay_of(neuron.tau, dt, n_out, "tau", where)
        gain = _unit(_array(neuron.r, n_out) * dt / _array(neuron.tau, n_out))
        leak = (1.0 - beta) * _array(neuron.v_leak, n_out)
    elif isinstance(neuron, nir.CubaLIF):
        beta = _decay_of(neuron.tau_mem, dt, n_out, "tau_mem", where)
        alpha = _decay_of(neuron.tau_syn, dt, n_out, "tau_syn", where)
        gain = _unit(_array(neuron.r, n_out) * dt / _array(neuron.tau_mem, n_out)
                     * _array(neuron.w_in, n_out) * dt / _array(neuron.tau_syn, n_out))
        if np.any(_array(neuron.v_leak, n_out) != 0):
            raise ValueError(f"import_from_nir: {where}: v_leak != 0 is not supported for "
                             "CubaLIF (a constant drive of the membrane, not of the current)")
        leak = np.zeros(n_out)
    else:
        raise ValueError(f"import_from_nir: node {name!r} is a {type(neuron).__name__}; "
                         "supported neurons are LIF, CubaLIF and LI")
    if isinstance(neuron, (nir.LIF, nir.CubaLIF)) and np.any(_array(neuron.v_reset, n_out) != 0):
        raise ValueError(f"import_from_nir: {where}: v_reset != 0 is not supported (the "
                         "layers reset to zero)")
    if isinstance(neuron, nir.LI) and recurrent is not None:
        raise ValueError(f"import_from_nir: {where}: a recurrent LI has no snn_ipu layer")
    weight = weight * gain[:, None]
    if bias is not None or np.any(leak != 0):
        bias = (np.zeros(n_out) if bias is None else bias * gain) + leak
    f32 = dict(dtype=torch.float32)
    if isinstance(neuron, nir.LI):
        layer = ReadoutLayer(n_in, n_out, beta=_value(beta), bias=bias is not None,
                             backend=backend, name=name)
    else:
        kw = dict(beta=_value(beta), threshold=_value(_array(neuron.v_threshold, n_out)),
                  bias=bias is not None, reset="zero", recurrent=recurrent is not None,
                  rec_bias=isinstance(recurrent, nir.Affine), backend=backend, name=name)
        if isinstance(neuron, nir.CubaLIF):
            layer = SynapticLayer(n_in, n_out, alpha=_value(alpha), **kw)
        else:
            layer = LIFLayer(n_in, n_out, **kw)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, **f32))
        if bias is not None:
            layer.bias.copy_(torch.tensor(bias, **f32))
        if recurrent is not None:
            rec = np.asarray(recurrent.weight, dtype=np.float64)
            if rec.shape != (n_out, n_out):
                raise ValueError(f"import_from_nir: {where}: recurrent weight {rec.shape}, "
                                 f"the neuron has {n_out}")
            layer.rec_weight.copy_(torch.tensor(rec * gain[:, None], **f32))
            if isinstance(recurrent, nir.Affine):
                layer.rec_bias.copy_(torch.tensor(np.asarray(recurrent.bias) * gain, **f32))
    return layer
