"""The IPU backend: a layer's whole time loop as one PopART custom op.

Inside a PopTorch model running on an IPU (``poptorch.isRunningOnIpu()``),
``spiking_layer`` / ``readout_layer`` emit ``poptorch.custom_op`` calls to
``SnnSpikingLayer`` / ``SnnReadoutLayer`` in the ``ai.snn_ipu`` domain. The
ops and their gradient ops live in ``libsnn_ipu_popart.so`` (built from
``popops_ext/poplar`` with the Poplar SDK, see docs/ipu.md); PopART's
autodiff pulls the gradients through them. The ops' inputs and outputs are
those of ``popops_ext/poplar/OpSignatures.hpp``, in its order.

This code runs once, while PopTorch traces the model: a spiking op's overflow
counts reach the host only as model outputs (:mod:`snn_ipu.ipu_overflow`).

This module imports without the SDK; only calling it needs PopTorch.
"""

from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import ipu_overflow
from .._codes import MODELS, RESETS
from .._native import _C
from ..spikes import SparseSpikes
from ..surrogate import ATan
from .contract import CallRecord, LayerConfig, LayerParams, LayerState
from .work_split import DEFAULT_ACTIVITY, model_code

__all__ = [
    "DOMAIN",
    "DOMAIN_VERSION",
    "IPUUnavailableError",
    "LIBRARY_ENV",
    "load_library",
    "pack_attributes",
    "readout_layer",
    "spiking_layer",
]

DOMAIN = "ai.snn_ipu"
DOMAIN_VERSION = 1
LIBRARY_ENV = "SNN_IPU_POPART_LIB"
_LIBRARY_NAME = "libsnn_ipu_popart.so"
_loaded: Dict[str, ctypes.CDLL] = {}


class IPUUnavailableError(RuntimeError):
    """The ipu backend was asked for where it cannot run."""


def _poptorch():
    try:
        import poptorch
    except ImportError as exc:
        raise IPUUnavailableError(
            "the 'ipu' backend needs PopTorch from the Graphcore Poplar SDK (it is not on "
            "PyPI); on a CPU use backend='emulator' or 'reference'"
        ) from exc
    return poptorch


def _require_ipu():
    poptorch = _poptorch()
    if not poptorch.isRunningOnIpu():
        raise IPUUnavailableError(
            "the 'ipu' backend only runs inside a model wrapped by poptorch.inferenceModel or "
            "poptorch.trainingModel (poptorch.isRunningOnIpu() is False here); use "
            "backend='auto' to fall back to the emulator outside"
        )
    return poptorch


def _default_library_paths() -> List[Path]:
    package = Path(__file__).resolve().parent.parent
    return [package / "lib" / _LIBRARY_NAME, package.parent / "build" / "ipu" / _LIBRARY_NAME]


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """Load the custom-op library once; its static creators register the ops with PopART."""
    candidates = [Path(path)] if path else (
        [Path(os.environ[LIBRARY_ENV])] if os.environ.get(LIBRARY_ENV)
        else _default_library_paths()
    )
    for candidate in candidates:
        key = str(candidate)
        if key in _loaded:
            return _loaded[key]
        if candidate.is_file():
            # As PopTorch's documentation loads custom ops: the library's static
            # creators register the ops in libpopart's registry, which PopTorch has
            # loaded already, so no symbol of ours needs to be global.
            _loaded[key] = ctypes.cdll.LoadLibrary(key)
            return _loaded[key]
    tried = ", ".join(str(c) for c in candidates)
    raise IPUUnavailableError(
        f"{_LIBRARY_NAME} not found (tried {tried}); build it with the Poplar SDK "
        f"(docs/ipu.md) or point {LIBRARY_ENV} at it"
    )


def input_needs_grad(spikes: SparseSpikes) -> bool:
    """Whether anything upstream differentiates the input list's values, decided when
    the op is built (traced): a layer's list, or one computed from it, does; the
    network's data does not (PyTorch never asks for its gradient), and the op of the
    layer it feeds then builds no input gradient, no reduction of its partials and no
    exchange of them (the op's ``input_needs_grad`` attribute; docs/ipu.md)."""
    return spikes._carries_grad


def _ipu_split(cfg: LayerConfig, spikes: SparseSpikes, weight: torch.Tensor,
               capacity: int, dense_history: bool) -> Dict[str, int]:
    """The tile size and sample groups the planner picks for ipu2 (what
    snn_ipu.planning reports for an unplaced layer: its fastest plan that fits)."""
    plan = _C.plan_layer(
        cfg.in_features, cfg.out_features, spikes.batch_size, spikes.num_steps,
        cfg.recurrent, model_code(cfg.model), spikes.capacity, capacity, DEFAULT_ACTIVITY,
        weight.element_size(), "ipu2", 1, dense_history=dense_history,
        input_needs_grad=input_needs_grad(spikes),
    )
    return {"neurons_per_tile": int(plan["neurons_per_tile_max"]),
            "sample_groups": int(plan["sample_groups"]), "activity": DEFAULT_ACTIVITY}


def _tiles(cfg: LayerConfig, spikes: SparseSpikes, weight: torch.Tensor, capacity: int,
           dense_history: bool) -> Dict[str, int]:
    """``neurons_per_tile``, ``sample_groups``, ``first_tile`` and ``activity`` of the
    layer's op: where :func:`snn_ipu.planning.place` put the layer (with the activity
    it planned for), else the planner's own choice for the layer from tile 0 at
    ``DEFAULT_ACTIVITY`` (each layer may then use the whole IPU: the ops run one after
    another, and ``snn_ipu.plan`` says whether their data fit together, its
    "overlaid" layout)."""
    placed = cfg.ipu_tiles
    needs_grad = {"input_needs_grad": input_needs_grad(spikes)}
    if placed is None:
        return {**_ipu_split(cfg, spikes, weight, capacity, dense_history), "first_tile": 0,
                **needs_grad}
    shape = (spikes.batch_size, spikes.num_steps)
    if shape != (placed.batch_size, placed.num_steps):
        raise ValueError(
            f"{cfg.name} was placed on the IPU for batch_size={placed.batch_size}, "
            f"num_steps={placed.num_steps}, but this call has batch_size={shape[0]}, "
            f"num_steps={shape[1]}: run snn_ipu.planning.place(model, {shape[0]}, {shape[1]}) "
            "again (IPU shapes are fixed when the model compiles)"
        )
    if placed.capacity_in is not None and spikes.capacity > placed.capacity_in:
        # the tiles were chosen for the planned input list: a wider one needs more of
        # their memory than the plan counted
        raise ValueError(
            f"{cfg.name} was placed on the IPU for input lists of {placed.capacity_in} "
            f"entries, but this call's input list has capacity K={spikes.capacity}: run "
            f"snn_ipu.planning.place(model, ..., input_max_spikes={spikes.capacity}) again "
            "for the network's input list (a later layer's input is the list of the layer "
            "before it, sized by place())"
        )
    return {"neurons_per_tile": placed.neurons_per_tile, "first_tile": placed.first_tile,
            "sample_groups": placed.sample_groups, "activity": placed.activity,
            **needs_grad}


def op_grad_window(grad_window: Optional[float]) -> float:
    """A gradient window as the op's attribute: an infinite one (exact gradients,
    ``None``) is sent as ``-1.0``, which the C++ side reads as inf."""
    return -1.0 if grad_window is None or math.isinf(grad_window) else float(grad_window)


def pack_attributes(
    config: LayerConfig,
    capacity: int,
    neurons_per_tile: int,
    has_bias: bool,
    keep_dense_state: bool,
    first_tile: int = 0,
    activity: float = DEFAULT_ACTIVITY,
    sample_groups: int = 1,
    input_needs_grad: bool = True,
) -> Dict[str, Any]:
    """The custom op's attributes: ints and floats only, as PopTorch requires.

    The gradient window is sent as :func:`op_grad_window` encodes it. A readout has
    no reset, surrogate or window: it is sent as reset "none" with ATan's defaults,
    which its graph does not read.
    """
    surrogate = config.surrogate if config.spiking else ATan()
    p0, p1 = surrogate.params
    return {
        "model": MODELS[config.model],
        "reset": RESETS[config.reset if config.spiking else "none"],
        "surrogate_kind": int(surrogate.kind),
        "surrogate_p0": float(p0),
        "surrogate_p1": float(p1),
        "grad_window": op_grad_window(config.grad_window),
        "capacity": int(capacity),
        "has_bias": int(bool(has_bias)),
        "recurrent": int(bool(config.recurrent)),
        "keep_dense_state": int(bool(keep_dense_state)),
        "neurons_per_tile": int(neurons_per_tile),
        "first_tile": int(first_tile),
        "sample_groups": int(sample_groups),
        "activity": float(activity),
        "input_needs_grad": int(bool(input_needs_grad)),
    }


def _capacity(cfg: LayerConfig, spikes: SparseSpikes, weight: torch.Tensor,
              dense_history: bool) -> int:
    if cfg.capacity is not None:
        return cfg.capacity
    if cfg.grad_window is None or cfg.exact_gradients:
        # Exact gradients list every neuron: anything less would overflow every step.
        # A call autograd does not record (evaluation) lists its spikes alone, which
        # may be any number up to every neuron: its list is the training calls'.
        return cfg.out_features
    placed = cfg.ipu_tiles
    if placed is not None and placed.capacity is not None:
        # the capacity place() planned the layer's tiles for (from its activity or
        # max_spikes): another would not be the graph the plan counted
        return placed.capacity
    # Static shapes on the IPU: an automatic capacity is the planner's guess.
    plan = _C.plan_layer(
        cfg.in_features, cfg.out_features, spikes.batch_size, spikes.num_steps,
        cfg.recurrent, model_code(cfg.model), spikes.capacity, 0, DEFAULT_ACTIVITY,
        weight.element_size(), "ipu2", 1, dense_history=dense_history,
    )
    return int(plan["capacity_out"])


def check_op_settings(cfg: LayerConfig, weight: torch.Tensor) -> None:
    """What the IPU ops cannot build, refused before one is: a list that grows (its
    capacity is fixed when the graph is built) and weights other than float32 or
    float16 (the IPU computes no other float type)."""
    if cfg.spiking and cfg.overflow == "grow":
        raise ValueError(
            f"{cfg.name}: overflow='grow' cannot be honoured by the IPU op (its list "
            "capacity is fixed when the graph is built); use 'error' or 'drop'"
        )
    if weight.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"{cfg.name}: the IPU ops take float32 or float16 weights, got "
                        f"{weight.dtype} (convert the model with .float() or .half())")


def _check_input_capacity(cfg: LayerConfig, spikes: SparseSpikes) -> None:
    # The op's graph holds an input row to in_features entries; the gradient of a
    # wider list would come back narrower than the list.
    if spikes.capacity > cfg.in_features:
        raise ValueError(
            f"{cfg.name}: the input list's capacity K={spikes.capacity} exceeds "
            f"in_features={cfg.in_features}; on the IPU list the input with "
            f"max_spikes <= {cfg.in_features}"
        )


def spike_bit_words(out_features: int, neurons_per_tile: int) -> int:
    """The last dimension of the op's ``spike_bits`` output: every tile's spikes
    of a step, 16 neurons to a float word, as many words per tile as the widest
    tile needs (LayerGraph.hpp's spikeBitWords)."""
    per_tile = min(neurons_per_tile, out_features)
    return -(-out_features // per_tile) * -(-per_tile // 16)


def _or_zeros(t: Optional[torch.Tensor], size: Sequence[int], like: torch.Tensor
              ) -> torch.Tensor:
    """A real input, or a zero stand-in: custom ops take a fixed list of inputs."""
    if t is None:
        return torch.zeros(*size, dtype=like.dtype, device=like.device)
    return t


def _zeros(*size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # On the weight's device: inside a traced model that is the IPU (PopTorch logs
    # "No device set in torch.zeros(): forcing to IPU" for each one without).
    return torch.zeros(*size, dtype=dtype, device=device)


def _consume(values: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """``values`` with the op's other float outputs added in with weight zero, so
    that every output of the op has a consumer (PopART may reject an unused custom-op
    output: poptorch's own custom-op tests keep each one in the loss, "Popart errors
    if this is unused"). The chain is differentiable (sum, where, mul, add), as every
    op on the loss path must be for the op's gradient to be grown, and gives exactly
    zero even where an output holds inf or NaN (say, the unlisted tail of the list
    membrane)."""
    total = sum(t.sum() for t in others)
    broken = torch.isnan(total - total)  # inf or NaN
    return values + torch.where(broken, torch.zeros_like(total), total) * 0.0


def _no_carried_state(cfg: LayerConfig, initial: Optional[LayerState]) -> None:
    if cfg.return_state or initial is not None:
        raise ValueError(
            f"{cfg.name}: carry_state is not supported on the ipu backend yet (the op "
            "starts every call from zero state)"
        )


def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[SparseSpikes, CallRecord]:
    _no_carried_state(cfg, initial)
    if cfg.record_membrane:
        # the op returns no membrane: last_membrane would stay None without a word
        raise ValueError(f"{cfg.name}: record_membrane is not supported on the ipu backend "
                         "(the membrane stays on the device); record it on the emulator or "
                         "the ipu_graph backend")
    check_op_settings(cfg, params.weight)
    poptorch = _require_ipu()
    load_library()
    _check_input_capacity(cfg, spikes)
    weight, bias, beta, alpha = params.weight, params.bias, params.beta, params.alpha
    T, B, N = spikes.num_steps, spikes.batch_size, cfg.out_features
    learn_decay = bool(getattr(beta, "requires_grad", False)) or bool(
        alpha is not None and getattr(alpha, "requires_grad", False))
    capacity = _capacity(cfg, spikes, weight, learn_decay)
    attributes = pack_attributes(
        cfg, capacity, has_bias=bias is not None, keep_dense_state=learn_decay,
        **_tiles(cfg, spikes, weight, capacity, learn_decay),
    )
    device = weight.device
    f32 = _zeros(1, dtype=torch.float32, device=device)
    inputs = [
        spikes.ids.to(torch.int32),
        spikes.counts.to(torch.int32),
        spikes.values.to(torch.float32),
        weight,
        _or_zeros(bias, (N,), f32),
        _or_zeros(params.rec_weight, (1, 1), weight),
        beta,
        params.threshold,
        _or_zeros(alpha, (1,), f32),
    ]
    dense = (T, B, N) if learn_decay else (1,)
    dense_syn = dense if cfg.model == "synaptic" else (1,)
    example_outputs = [
        _zeros(T, B, capacity, dtype=torch.float32, device=device),  # values
        _zeros(T, B, capacity, dtype=torch.int32, device=device),    # ids
        _zeros(T, B, 2, dtype=torch.int32, device=device),           # counts
        _zeros(T, B, capacity, dtype=torch.float32, device=device),  # membrane at listed entries
        _zeros(T, B, 2, dtype=torch.float32, device=device),         # spikes / entries needed
        _zeros(*dense, dtype=torch.float32, device=device),          # dense membrane
        _zeros(*dense_syn, dtype=torch.float32, device=device),      # dense synaptic current
        _zeros(T, B, spike_bit_words(N, attributes["neurons_per_tile"]),
               dtype=torch.float32, device=device),                # every spike, for the grad op
    ]
    values, ids, counts, membrane, needed, dense_u, dense_s, bits = poptorch.custom_op(
        inputs, "SnnSpikingLayer", DOMAIN, DOMAIN_VERSION,
        example_outputs=example_outputs, attributes=attributes,
    )
    record = CallRecord("ipu", T, B, N)
    if capacity < N and not ipu_overflow.collecting():
        record.warnings.append(ipu_overflow.uncollected_warning(cfg.overflow, capacity))
    out = SparseSpikes._made(ids, counts, N, _consume(values, membrane, needed, dense_u, dense_s,
                                                  bits))
    out._dense_on_device = dense_on_device(readout_layer, cfg)
    ipu_overflow.attach(out, needed, cfg.name)
    return out, record


def dense_on_device(readout, cfg: LayerConfig):
    """``to_dense()`` (and so ``spike_counts()``) of a list an op made, as another op:
    ``SnnReadoutLayer`` with identity weights, no bias and beta 0 (membrane[t] = W x[t] =
    the step's spikes, exactly: each listed spike adds a row of ones and zeros).

    Why an op: a dense view built in torch scatters the list's values at its integer
    ``ids`` (or compares them), and in PopART neither a ScatterReduce nor a Gather nor a
    Where gives its integer index input a gradient, nor a Cast from an integer type
    (willow/src/op/scatterreduce.cpp, gather.cpp, where.cpp, cast.cpp). A loss reaching
    the list only that way leaves ``ids`` and ``counts`` without any gradient, which
    fails the producing op's gradient and every layer's before it
    (transforms/autodiff/gradgrower.cpp, opgradregistry.cpp, tensorgradregistry.cpp;
    tests/popart_autodiff.py). The readout's grad op gives every input a gradient:
    zeros for ``ids``/``counts``, and for ``values`` dL/d(dense) at each listed entry,
    which is the gradient of ``to_dense()``. Computed once per list (a loss and the
    prediction share it). ``readout``: the backend's readout_layer."""
    def to_dense(spikes: SparseSpikes) -> torch.Tensor:
        # kept with the list's version counters: an in-place edit of the list since
        # makes another dense view
        cached = getattr(spikes, "_dense_cache", None)
        if cached is not None and cached[0] == spikes._versions():
            return cached[1]
        n = spikes.num_neurons
        device = spikes.values.device
        dense_cfg = LayerConfig(name=f"{cfg.name}.to_dense", model="readout", in_features=n,
                                out_features=n)
        params = LayerParams(weight=torch.eye(n, dtype=torch.float32, device=device),
                             bias=None, rec_weight=None,
                             beta=_zeros(n, dtype=torch.float32, device=device),
                             threshold=None, alpha=None)
        dense, _ = readout(dense_cfg, spikes, params, None)
        spikes._dense_cache = (spikes._versions(), dense)
        return dense

    return to_dense


def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[torch.Tensor, CallRecord]:
    _no_carried_state(cfg, initial)
    if cfg.record_membrane:
        # the op's output is the membrane, a tensor of the device: last_membrane would
        # stay None without a word, as for a spiking layer
        raise ValueError(f"{cfg.name}: record_membrane is not supported on the ipu backend "
                         "(the membrane stays on the device); the readout's output is its "
                         "membrane: return it from the model")
    check_op_settings(cfg, params.weight)
    poptorch = _require_ipu()
    load_library()
    _check_input_capacity(cfg, spikes)
    T, B, N = spikes.num_steps, spikes.batch_size, cfg.out_features
    weight = params.weight
    attributes = pack_attributes(
        cfg, 0, has_bias=params.bias is not None, keep_dense_state=False,
        **_tiles(cfg, spikes, weight, 0, False),
    )
    inputs = [
        spikes.ids.to(torch.int32),
        spikes.counts.to(torch.int32),
        spikes.values.to(torch.float32),
        weight,
        _or_zeros(params.bias, (N,), _zeros(1, dtype=torch.float32, device=weight.device)),
        params.beta,
    ]
    (membrane,) = poptorch.custom_op(
        inputs, "SnnReadoutLayer", DOMAIN, DOMAIN_VERSION,
        example_outputs=[_zeros(T, B, N, dtype=torch.float32, device=weight.device)],
        attributes=attributes,
    )
    return membrane, CallRecord("ipu", T, B, N)
