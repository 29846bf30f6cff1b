"""Spiking layers: a linear projection and a neuron model, over a whole sequence.

Each layer takes spikes for all ``T`` timesteps at once (a dense binary
``[T, B, in]`` tensor, time-major, or :class:`~snn_ipu.SparseSpikes`) and runs its
time loop inside the selected backend (:mod:`snn_ipu.backends`): dense PyTorch
(``reference``), the C++ IPU emulator (``emulator``) or a Poplar custom op
(``ipu``).

The equations are snnTorch's, so a model written as ``nn.Linear`` followed by
``snntorch.Leaky`` / ``snntorch.Synaptic`` moves over with its weights
(``reset`` is the previous step's spike, detached from the graph; the whole
contract, with reset timing, the window's line, ties and float16, is
docs/numerics.md)::

    I[t] = W x[t] + b (+ V S[t-1] if recurrent)
    Leaky,    subtract: U[t] = beta U[t-1] + I[t] - S[t-1] threshold
              zero:     U[t] = beta (1 - S[t-1]) U[t-1] + I[t]
              none:     U[t] = beta U[t-1] + I[t]
    Synaptic: syn[t] = alpha syn[t-1] + I[t]
              subtract: U[t] = beta U[t-1] + syn[t] - S[t-1] threshold
              zero:     U[t] = (1 - S[t-1]) (beta U[t-1] + syn[t])
              none:     U[t] = beta U[t-1] + syn[t]
    S[t] = H(U[t] - threshold)   (strict >; surrogate gradient in backward)

A recurrent layer is snnTorch's ``RLeaky`` / ``RSynaptic`` (all-to-all ``V``,
``V``'s bias in ``b``, or kept apart in ``rec_bias``), with one exception: ``RLeaky``'s zero reset
also zeroes the step's input, ``(1 - S[t-1]) (beta U[t-1] + I[t])``, while a
recurrent ``LIFLayer`` keeps ``Leaky``'s form above.

With a finite ``grad_window`` the surrogate derivative is zero wherever
``U <= threshold - grad_window``; only neurons above that line are listed as
gradient-eligible and the backward pass costs O(eligible), not O(neurons).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple, Union

import torch
from torch import nn

from . import surrogate as surrogate_mod
from ._codes import RESETS
from ._compile import compiling, eager
from ._devices import values_readable
from ._finite import FINITE, POSITIVE, UNIT, first_nonfinite, first_out_of_range
from ._numbers import ArgumentTypeError, flag, positive_size
from .backends import _running_on_ipu, select
from .backends.contract import CallRecord, LayerConfig, LayerParams, LayerState
from .layer_input import as_sparse
from .layer_settings import (
    Scalar,
    Setting,
    check_constants,
    check_grad_window,
    check_loaded_constants,
    decay,
    one_of,
    threshold_value,
)
from .losses import RECORDED_MEMBRANE
from .overflow import check_overflow_policy, raise_or_warn_overflow
from .pipelining import check_input_delay, delayed
from .spikes import SparseSpikes, capacity_or_none

__all__ = ["LIFLayer", "SynapticLayer", "ReadoutLayer", "LayerConfig", "LayerState"]

BACKENDS = ("auto", "reference", "emulator", "ipu", "ipu_graph", "triton")
PLAN_TARGETS = ("host", "ipu2")


# snnTorch's names for the options of its neurons, and what the layers call them.
SNNTORCH_OPTIONS = {
    "spike_grad": "surrogate= (snn_ipu.surrogate.ATan(2) is snntorch.surrogate.atan(2); "
                  "also FastSigmoid, Sigmoid, StraightThrough)",
    "reset_mechanism": "reset= ('subtract', 'zero' or 'none')",
    "init_hidden": "nothing: a layer runs the whole sequence in one call; carry_state = True "
                   "starts the next call where this one ended",
    "output": "nothing: a layer returns its spikes; for its membrane use record_membrane = "
              "True, or a ReadoutLayer for a loss on the membrane",
    "linear_features": "out_features (with recurrent=True)",
    "all_to_all": "recurrent=True (all-to-all; one-to-one recurrence is not supported)",
    "learn_recurrent": "rec_weight.requires_grad_(False) after construction",
    "reset_delay": "nothing: the reset follows the spike one step later, as reset_delay=True",
    "graded_spikes_factor": "nothing: spikes are 1 (graded spikes are not supported)",
}


# The id of the backward pass running in this thread, -1 outside one (torch < 2.1: -1).
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)


# The ranges of the fixed neuron constants (buffers), as check_constants checks them.
_CONSTANT_RANGES = {"threshold": POSITIVE, "beta": UNIT, "alpha": UNIT}


def refuse_unknown_options(layer: str, options: dict) -> None:
    """A TypeError for keyword arguments the layers do not take, naming snn_ipu's
    equivalent of snnTorch's."""
    if not options:
        return
    name = next(iter(options))
    if name in SNNTORCH_OPTIONS:
        raise TypeError(f"{layer}() got {name}=, snnTorch's name; snn_ipu's is "
                        f"{SNNTORCH_OPTIONS[name]}")
    raise TypeError(f"{layer}() got an unexpected keyword argument {name!r}")


def _layer_state(where: str, value) -> LayerState:
    """A state as assigned to ``layer.state``: a LayerState, or a tuple of its three
    fields (membrane, synaptic, spikes), each a tensor or None (membrane: a tensor)."""
    if not isinstance(value, tuple) or len(value) != 3:
        raise TypeError(f"{where}: state must be None or a LayerState (membrane, synaptic, "
                        f"spikes), got {type(value).__name__}")
    state = LayerState(*value)
    for field, v in zip(LayerState._fields, state):
        if v is None and field != "membrane":
            continue
        if not isinstance(v, torch.Tensor) or not (v.is_floating_point()
                                                   or v.dtype == torch.bool):
            raise TypeError(f"{where}: the state's {field} must be a float tensor"
                            + ("" if field == "membrane" else " or None")
                            + f", got {v.dtype if isinstance(v, torch.Tensor) else v!r}")
    return state


def _check_state_values(where: str, state: LayerState) -> None:
    """A carried state's values, before any backend reads them: a NaN membrane would
    silently stop the layer, and spikes other than 0 or 1 would give each backend
    another answer."""
    if not values_readable(*(v for v in state if v is not None)):
        return
    for field in ("membrane", "synaptic"):
        v = getattr(state, field)
        if v is not None and not bool(torch.isfinite(v).all()):
            raise ValueError(f"{where}: the carried state's {field} contains NaN or inf; "
                             "call reset_state() to start from zero")
    if state.spikes is not None and not bool(((state.spikes == 0) | (state.spikes == 1)).all()):
        bad = state.spikes[(state.spikes != 0) & (state.spikes != 1)][0]
        raise ValueError(f"{where}: the carried state's spikes must be 0 or 1, found "
                         f"{float(bad)}")


class _Layer(nn.Module):
    """Weights, decay, backend selection and the bookkeeping of calls, shared by every
    layer type."""

    neuron_model = "leaky"
    backend = Setting(one_of("backend", BACKENDS))
    plan_target = Setting(one_of("plan_target", PLAN_TARGETS))
    # real bools: a string reached the bindings as "incompatible function arguments"
    record_membrane = Setting(lambda value: flag("record_membrane", value))
    carry_state = Setting(lambda value: flag("carry_state", value))

    # Timesteps this layer's input arrives late (snn_ipu.pipelining; 0: not delayed).
    input_delay = Setting(check_input_delay)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        beta: Scalar = 0.9,
        *,
        bias: bool = True,
        learn_beta: bool = False,
        backend: str = "auto",
        dtype: torch.dtype = torch.float32,
        plan_target: str = "host",
        name: Optional[str] = None,
        **unknown,
    ) -> None:
        super().__init__()
        refuse_unknown_options(type(self).__name__, unknown)
        self.in_features = positive_size("in_features", in_features)
        self.out_features = positive_size("out_features", out_features)
        self.backend = backend
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError("dtype must be torch.float32, torch.float16 or torch.bfloat16 "
                             f"(backend='triton' or 'reference'), got {dtype}")
        self.plan_target = plan_target
        if name is not None and not isinstance(name, str):
            raise ArgumentTypeError(f"name must be a string or None, got {name!r}")
        self.name = name or f"{type(self).__name__}({in_features}->{out_features})"
        bias = flag("bias", bias)
        linear = nn.Linear(in_features, out_features, bias=bias)  # torch's default init
        self.weight = nn.Parameter(linear.weight.detach().to(dtype))
        self.bias = nn.Parameter(linear.bias.detach().float()) if bias else None
        self.recurrent = False
        # Registered here, empty, so that a recurrent layer's parameters keep their order
        # (weight, bias, rec_weight, rec_bias, beta, threshold): an optimizer's saved state
        # is matched to parameters by position.
        self.register_parameter("rec_weight", None)
        # A recurrent layer may keep the bias of its recurrent projection apart (snnTorch's
        # RLeaky / RSynaptic do): the sum is the input bias, but an optimizer such as Adam
        # moves two parameters differently from one.
        self.register_parameter("rec_bias", None)
        self._register("beta", decay("beta", beta, out_features), learn_beta)
        self.register_load_state_dict_post_hook(check_loaded_constants)
        # When True, the call keeps its membrane [T, B, out] (detached) in
        # ``last_membrane``: for plots and debugging, at the cost of dense memory.
        self.record_membrane = False
        self.last_membrane: Optional[torch.Tensor] = None
        # When True, each call starts from the state the last one ended in (``state``)
        # instead of zero: a long sequence in chunks, as truncated BPTT or streaming.
        self.carry_state = False
        self.state = None
        # Layer pipelining (snn_ipu.pipelining.pipeline): x[t] is read at step t + delay.
        self.input_delay = 0
        # The tiles of this layer's IPU op (snn_ipu.planning.place); None: from tile 0.
        self.ipu_tiles = None
        self.last_call: Optional[CallRecord] = None
        self._dropped_totals = {"total_spikes_dropped": 0, "total_eligible_dropped": 0}
        self._warned: set = set()

    @property
    def stats(self) -> Dict[str, Any]:
        """The last call's activity, list capacity, drops and the paths its backend
        took (its backward pass's too, once it has run), and the running totals of
        dropped entries."""
        if self.last_call is None:
            return {}
        out = self.last_call.stats()
        if "capacity" in out:
            max_spikes = getattr(self, "max_spikes", None)
            out["grew"] = max_spikes is not None and out["capacity"] > max_spikes
            out.update(self._dropped_totals)
        return out

    def _register(self, name: str, value: torch.Tensor, learn: bool) -> None:
        if flag(f"learn_{name}", learn):
            setattr(self, name, nn.Parameter(value))
        else:
            self.register_buffer(name, value)

    def _call_config(self, *args) -> LayerConfig:
        """``config(*args)``, kept from call to call until a setting changes (each
        Setting counts its changes in ``_settings_version``) or one of the plain
        attributes it reads is reassigned. A subclass's own ``config`` may read anything:
        it is asked every call."""
        if type(self).config not in _OWN_CONFIGS:
            return self.config(*args)
        state = self.__dict__
        key = (args, state.get("_settings_version"), self.name, self.ipu_tiles,
               self.in_features, self.out_features, self.recurrent)
        kept = state.get("_config")
        if kept is not None and kept[0] == key:
            return kept[1]
        config = self.config(*args)
        state["_config"] = (key, config)
        return config

    def _backend_cache(self) -> dict:
        """What the backend keeps from this layer's calls for the next (Backend's
        ``cache``); emptied where the layer moves to another backend."""
        backend = self.backend
        kept = self.__dict__.get("_backend_kept")
        if kept is None or kept[0] != backend:
            kept = self.__dict__["_backend_kept"] = (backend, {})
        return kept[1]

    def __getstate__(self) -> Dict[str, Any]:
        """The module's state for pickle and ``copy.deepcopy``, without what a call keeps
        for the next (the backend's native call objects, which neither pickle nor copy):
        a copy makes its own."""
        getstate = getattr(super(), "__getstate__", None)
        state = dict(getstate() if getstate is not None else self.__dict__)
        for kept in ("_backend_kept", "_config"):
            state.pop(kept, None)
        return state

    def __prepare_scriptable__(self) -> nn.Module:
        """Refuses ``torch.jit.script`` (which asks every submodule this first), by
        name: it failed on whichever attribute it met first ("Error inferring type for
        _fills")."""
        raise RuntimeError(
            f"{self.name}: snn_ipu layers cannot be compiled by torch.jit.script (their "
            "calls run native code and Python's checks); run the model as Python, or "
            "under torch.compile")

    def _tensor(self, name: str) -> Optional[torch.Tensor]:
        """A parameter or buffer by name, or None: from the module's own dicts first,
        where nn.Module's attribute lookup costs several times more (this runs many
        times per call), then as an attribute (a parametrization's property)."""
        params, buffers = self._parameters, self._buffers
        if name in params:
            return params[name]
        if name in buffers:
            return buffers[name]
        return getattr(self, name, None)

    def _per_neuron(self, t: torch.Tensor, clamp: bool, dtype: torch.dtype) -> torch.Tensor:
        """[out] ``dtype`` view of a scalar-or-vector parameter (snnTorch clamps decays)."""
        if t.numel() == 1 and not t.requires_grad and t.is_cpu:
            # A fixed scalar (the usual constant), filled in: the native calls would copy
            # an expanded view. The fill is kept per value: this runs on every call, and
            # no backend writes to its parameters.
            value = float(t)
            if clamp:
                value = min(max(value, 0.0), 1.0)
            fills = self.__dict__.setdefault("_fills", {})
            key = (value.hex(), dtype, self.out_features)  # hex: -0.0 is not 0.0
            filled = fills.get(key)
            if filled is None:
                if len(fills) >= 8:  # a constant changed call after call
                    fills.clear()
                filled = fills[key] = torch.full((self.out_features,), value, dtype=dtype)
                # no one else holds it (or changes it): a backend need not copy it
                filled.layer_owned = True
            return filled
        t = t.to(dtype)
        if clamp:
            t = t.clamp(0, 1)
        return t.expand(self.out_features) if t.dim() == 0 or t.numel() == 1 else t

    def _params(self) -> LayerParams:
        """The parameters as a call uses them; the neuron constants in float32 (float64
        in a layer whose weights are: the reference's yardstick)."""
        weight, bias, rec_bias = (self._tensor(k) for k in ("weight", "bias", "rec_bias"))
        # a recurrent layer's rec_bias is summed into the input bias in torch, so that
        # autograd gives both the same gradient
        if rec_bias is not None:
            bias = rec_bias if bias is None else bias + rec_bias
        dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
        threshold, alpha = self._tensor("threshold"), self._tensor("alpha")
        return LayerParams(
            weight, bias, self._tensor("rec_weight"),
            self._per_neuron(self._tensor("beta"), True, dtype),
            None if threshold is None else self._per_neuron(threshold, False, dtype),
            None if alpha is None else self._per_neuron(alpha, True, dtype),
        )

    def _check_parameters(self) -> None:
        """Shapes (a tensor assigned to ``.data`` skips nn.Module's checks), finite
        values, fixed decays in [0, 1] and a positive threshold, before any backend reads
        them (the values only where they can be read: not in a model traced for the IPU).
        Learned decays are clamped to [0, 1] where they are used, as snnTorch does."""
        n, m = self.out_features, self.in_features
        shapes = self.__dict__.get("_shapes")
        if shapes is None or shapes["weight"] != (n, m):
            shapes = self.__dict__["_shapes"] = {
                "weight": (n, m), "rec_weight": (n, n), "bias": (n,), "rec_bias": (n,),
                "beta": (n,), "threshold": (n,), "alpha": (n,)}
        # Everything in one pass over the module's own dicts; where the values pass finds
        # one out of range, the checks of _name_bad_value say which and why.
        constants = []
        for bname, b in self._buffers.items():
            if b is not None and bname in _CONSTANT_RANGES:
                if b.shape != shapes[bname]:
                    self._check_shape(bname, b, shapes[bname])
                constants.append((bname, b))
        checked, ranges, names = [], [], []
        for pname, t in self._checked_tensors():
            want = shapes.get(pname)
            if want is not None and t.shape != want:
                self._check_shape(pname, t, want)
            checked.append(t)
            ranges.append(POSITIVE if pname == "threshold" else FINITE)
            names.append(pname)
        if not values_readable(*checked):
            return
        for bname, b in constants:
            checked.append(b)
            ranges.append(_CONSTANT_RANGES[bname])
            names.append(bname)
        bad = first_out_of_range(checked, ranges)
        if bad < 0:
            return
        self._name_bad_value()
        # the checks one at a time apply the same ranges; the fault is named regardless
        raise ValueError(f"{self.name}: {names[bad]} holds a value outside its range")

    def _check_shape(self, pname: str, t: torch.Tensor, want: tuple) -> None:
        """Raises where ``t``, the layer's ``pname``, has another shape than ``want``
        (a neuron constant may also be a scalar)."""
        shape = tuple(t.shape)
        if pname in ("weight", "rec_weight"):
            hint = " (transposed? nn.Linear's weight is [out, in])" if shape == want[::-1] \
                else ""
            raise ValueError(f"{self.name}: {pname} has shape {list(shape)}, this layer "
                             f"needs {list(want)} = [out_features, "
                             f"{'in_features' if pname == 'weight' else 'out_features'}]"
                             f"{hint}")
        vector = pname in ("bias", "rec_bias")
        if vector or t.numel() != 1:
            raise ValueError(f"{self.name}: {pname} has shape {list(shape)}, this layer "
                             f"needs [{want[0]}] (out_features)"
                             + ("" if vector else " or a scalar"))

    def _checked_tensors(self) -> List[Tuple[str, torch.Tensor]]:
        """(name, tensor) of the parameters a call reads: the module's own, and those a
        parametrization (``torch.nn.utils.parametrize``, ``weight_norm``) computes in
        place of a parameter it took over, as the call reads them."""
        out = [(k, p) for k, p in self._parameters.items() if p is not None]
        parametrized = self._modules.get("parametrizations")
        if parametrized is not None:
            out += [(k, getattr(self, k)) for k in parametrized.keys()]
        return out

    def _name_bad_value(self) -> None:
        """The checks of the parameters' values and the constants, one at a time, each
        with its own message."""
        params = self._checked_tensors()
        bad = first_nonfinite([p for _, p in params])
        if bad >= 0:
            pname, p = params[bad]
            hint = (
                " (float16 weights: torch's Adam divides by eps=1e-8, which is 0 in "
                "float16; keep float32 master weights or use an optimizer that is safe "
                "in float16, see the Precision section of docs/guide.md)"
                if p.dtype == torch.float16 else ""
            )
            raise ValueError(f"{self.name}: {pname} contains NaN or inf{hint}")
        try:
            check_constants(self)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc} (a fixed constant: set it through the "
                             "constructor, or make it learnable)") from None
        threshold = getattr(self, "threshold", None)
        if isinstance(threshold, nn.Parameter) and bool((threshold.detach() <= 0).any()):
            # the constructor's bound, which an optimizer step can cross
            raise ValueError(
                f"{self.name}: the learned threshold reached {float(threshold.detach().min())}"
                " <= 0; it must stay > 0 (lower the learning rate, or clamp it after each step)"
            )

    @property
    def state(self) -> Optional[LayerState]:
        """Where the last call ended (``carry_state``), or None: the next call starts
        from it. Assigned a state, it is checked here for its form and on every call for
        its shapes and values (finite; spikes 0 or 1), the same on every backend."""
        return self.__dict__["_state"]

    @state.setter
    def state(self, value) -> None:
        self.__dict__["_state"] = None if value is None else _layer_state(self.name, value)

    def _input(self, x) -> SparseSpikes:
        """The call's input as a list, delayed by ``input_delay`` steps."""
        spikes = as_sparse(x, self.in_features, self.name)
        if self.input_delay and self.carry_state:
            # the steps a delay pushes past a chunk's end would have to start the next one
            raise ValueError(
                f"{self.name}: input_delay={self.input_delay} with carry_state is not "
                "supported (the delayed steps of one chunk would be lost to the next)"
            )
        return delayed(spikes, self.input_delay)

    def reset_state(self) -> None:
        """The next call starts from zero state (with ``carry_state``)."""
        self.state = None

    def _initial_state(self, spikes: SparseSpikes) -> Optional[LayerState]:
        """The state this call starts from, checked: None for zero."""
        if not self.carry_state:
            return None
        if _graph_task_id() != -1:
            # A call inside a backward pass is a recomputation (torch.utils.checkpoint,
            # either form): it would start from the state the recomputed call ended in,
            # not the one it started from, and move the state on a second time, so that
            # the gradients and every later chunk were silently another sequence's.
            raise RuntimeError(
                f"{self.name}: carry_state = True in a call recomputed in the backward "
                "pass (torch.utils.checkpoint): the recomputation would start from the "
                "state the call ended in; leave the layers that carry state out of the "
                "checkpointed function"
            )
        if self.state is None:
            return None
        shape = (spikes.batch_size, self.out_features)
        for field in ("membrane", "synaptic", "spikes"):
            value = getattr(self.state, field)
            if value is not None and (not isinstance(value, torch.Tensor)
                                      or tuple(value.shape) != shape):
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value)
                raise ValueError(
                    f"{self.name}: the carried state's {field} is {got}, this call needs "
                    f"{shape} (batch {shape[0]}); call reset_state() to start from zero"
                )
        state = LayerState(*(None if v is None else v.detach().float().contiguous()
                             for v in self.state))
        _check_state_values(self.name, state)
        return state

    def _backend(self):
        name = self.backend
        if name != "auto":  # (the weights' device, a new object per read, decides "auto")
            if name != "ipu" and _running_on_ipu():
                # PopTorch would compile another backend's torch ops (the reference's
                # dense ones) instead of the layer's op: no overflow counts reach the
                # host, and a loss reaching a list through its integer ids leaves every
                # layer before it untrained (docs/ipu.md, "Gradients through PopART")
                raise ValueError(
                    f"{self.name}: backend={name!r} inside a model PopTorch runs on the IPU "
                    "(poptorch.isRunningOnIpu()); there a layer runs as its IPU op: set "
                    "backend='ipu' or 'auto'")
            return select(name)
        return select(name, self._tensor("weight").device, self.recurrent)

    def _keep(self, record: CallRecord) -> None:
        """Takes over a call's record: its state, membrane and stats, and the warnings
        of its backend, once per layer."""
        # Plain attributes, written to the instance dict: nn.Module's __setattr__,
        # which looks for parameters, buffers and modules of the name first, costs
        # several times more, and this runs on every call.
        state = self.__dict__
        state["last_call"] = record
        for message in record.warnings:
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(f"{self.name}: {message}", UserWarning, stacklevel=5)
        if record.total_spikes is not None:
            totals = self._dropped_totals
            if _graph_task_id() == -1:
                totals["total_spikes_dropped"] += record.overflow.spikes_dropped
                totals["total_eligible_dropped"] += record.overflow.eligible_dropped
                state["_listed_eligible"] = bool(record.eligible_listed
                                                 or record.overflow.eligible_dropped)
            elif not state.get("_listed_eligible", False):
                # A call recomputed in the backward pass (torch.utils.checkpoint) repeats
                # a counted call: its spikes were counted then. Its eligible entries were
                # too, unless that call had none (the reentrant form runs it without
                # grad, so only the recomputation lists them).
                totals["total_eligible_dropped"] += record.overflow.eligible_dropped
        membrane = state["last_membrane"] = record.membrane if self.record_membrane else None
        if membrane is not None and self.neuron_model != "readout":
            # detached: the membrane losses refuse it in a call that trains, naming
            # ReadoutLayer, instead of training nothing
            setattr(membrane, RECORDED_MEMBRANE, self.name)
        if self.carry_state and record.final_state is not None:
            self.state = record.final_state

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"recurrent={self.recurrent}, backend={self.backend!r}"
        )


class _SpikingLayer(_Layer):
    reset = Setting(one_of("reset mechanism", RESETS))
    surrogate = Setting(surrogate_mod.get)
    grad_window = Setting(check_grad_window)
    max_spikes = Setting(capacity_or_none)  # as SparseSpikes.from_dense takes it
    overflow = Setting(check_overflow_policy)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        beta: Scalar = 0.9,
        threshold: Scalar = 1.0,
        *,
        reset: str = "subtract",
        surrogate=None,
        grad_window: Optional[float] = None,
        recurrent: bool = False,
        max_spikes: Optional[int] = None,
        overflow: str = "error",
        learn_threshold: bool = False,
        rec_bias: bool = False,
        **layer_options,
    ) -> None:
        super().__init__(in_features, out_features, beta, **layer_options)
        # a bool, not anything truthy: recurrent="one_to_one" would silently mean all-to-all
        self.recurrent = flag("recurrent", recurrent)
        if self.recurrent:
            rec = nn.Linear(out_features, out_features, bias=False)
            self.rec_weight = nn.Parameter(rec.weight.detach().to(self.weight.dtype))
        if flag("rec_bias", rec_bias):
            if not self.recurrent:
                raise ValueError(f"{self.name}: rec_bias needs recurrent=True")
            self.rec_bias = nn.Parameter(torch.zeros(out_features))
        self.reset = reset
        self.surrogate = surrogate
        self.grad_window = grad_window
        self.max_spikes = max_spikes
        self.overflow = overflow
        self._register("threshold", threshold_value(threshold, out_features), learn_threshold)
        self.overflow_warned = False
        self.silence_warned = False

    def config(self, records_grad: bool = True) -> LayerConfig:
        """The settings of one call. Eligible-only entries exist for the backward
        pass: where autograd does not record the call, a window of 0 lists the spikes
        alone (with ``grad_window=None`` every neuron would be listed, and
        ``max_spikes`` would have to hold them all)."""
        return LayerConfig(
            name=self.name,
            model=self.neuron_model,
            in_features=self.in_features,
            out_features=self.out_features,
            reset=self.reset,
            surrogate=self.surrogate,
            grad_window=self.grad_window if records_grad else 0.0,
            exact_gradients=self.grad_window is None,
            recurrent=self.recurrent,
            # a list never holds more than one entry per neuron: a larger capacity would
            # only allocate padding (max_spikes=10**6 on 4 neurons: gigabytes)
            capacity=None if self.max_spikes is None else min(self.max_spikes,
                                                              self.out_features),
            overflow=self.overflow,
            plan_target=self.plan_target,
            record_membrane=self.record_membrane,
            return_state=self.carry_state,
            ipu_tiles=self.ipu_tiles,
        )

    def forward(self, x: Union[SparseSpikes, torch.Tensor]) -> SparseSpikes:
        """Runs the layer over all timesteps; returns its output spikes."""
        if compiling():
            return eager(_SpikingLayer.forward)(self, x)
        spikes = self._input(x)
        self._check_parameters()
        params = self._params()
        records_grad = self._records_grad(spikes._carries_grad, params)
        config = self._call_config(records_grad)
        out, record = self._backend().spiking_layer(
            config, spikes, params, self._initial_spiking_state(spikes),
            self._backend_cache())
        self._apply_overflow_policy(record, stacklevel=6)  # past it, forward(), nn.Module's call
        self._keep(record)
        if records_grad and self.grad_window is not None and record.total_spikes is not None:
            self._warn_if_no_gradient_passes()
        return out

    def _records_grad(self, input_requires_grad: bool, params: LayerParams) -> bool:
        """Whether autograd records this call (its window lists eligible entries): from
        the tensors the call takes (``params``, :meth:`_params`), not the module's
        parameters, which a parametrized weight (``torch.nn.utils.parametrize``,
        ``weight_norm``) has left."""
        return torch.is_grad_enabled() and (
            input_requires_grad or any(t is not None and t.requires_grad for t in params))

    def _apply_overflow_policy(self, record: CallRecord, stacklevel: int) -> None:
        """Raises or warns for what the call's capacity cut (also for a fused network's
        layers, :func:`snn_ipu.pipelining.run_fused`)."""
        raise_or_warn_overflow(
            self.name, record.capacity, record.overflow, self.overflow,
            warn=not self.overflow_warned,
            note=" (warned once per layer; see the layer's stats for running totals)",
            stacklevel=stacklevel,
            planned=self.max_spikes is None,  # CPU and GPU backends size such lists to fit
        )
        if record.overflow.first is not None and self.overflow == "drop":
            self.overflow_warned = True

    def _warn_if_no_gradient_passes(self) -> None:
        """A windowed layer's gradient flows only through its listed entries: with none
        (common at initialisation, when the weights are too small for any neuron to come
        near threshold) its weights and every layer before it get exactly zero."""
        record = self.last_call
        if self.silence_warned or record.total_spikes or record.eligible_listed:
            return
        self.silence_warned = True
        warnings.warn(
            f"{self.name}: no neuron spiked or came within grad_window={self.grad_window} "
            "of threshold in this call, so no gradient reaches its weights or the layers "
            "before it; scale the weights or inputs up until the layer fires (its "
            "stats['activity']), or use grad_window=None (warned once per layer)",
            RuntimeWarning,
            stacklevel=5,
        )

    def _initial_spiking_state(self, spikes: SparseSpikes) -> Optional[LayerState]:
        initial = self._initial_state(spikes)
        if initial is None:
            return None
        if initial.spikes is None or (self.neuron_model == "synaptic") != (
                initial.synaptic is not None):
            raise ValueError(
                f"{self.name}: a carried state needs spikes"
                + (" and a synaptic current" if self.neuron_model == "synaptic" else "")
                + " (and no synaptic current for a leaky layer)"
            )
        if (self.recurrent and self.max_spikes is not None and self.overflow == "error"
                and values_readable(initial.spikes)):
            # the step-0 recurrent input is the state's spikes, under the list's capacity
            # (with "drop" the lowest-numbered ones, as at every step)
            most = int(initial.spikes.gt(0).sum(-1).max()) if initial.spikes.numel() else 0
            if most > self.max_spikes:
                raise ValueError(
                    f"{self.name}: the carried state has {most} spikes in a sample, more "
                    f"than max_spikes={self.max_spikes}"
                )
        return initial

    # nn.Module's backward hooks see the tensors a module returns, and a spiking layer
    # returns SparseSpikes: a full backward hook (or pre-hook) never ran, silently, and
    # the old-style one failed with SparseSpikes' message about indexing.
    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> NoReturn:
        self._refuse_backward_hook("register_full_backward_hook")

    def register_full_backward_pre_hook(self, hook: Callable,
                                        prepend: bool = False) -> NoReturn:
        self._refuse_backward_hook("register_full_backward_pre_hook")

    def register_backward_hook(self, hook: Callable) -> NoReturn:
        self._refuse_backward_hook("register_backward_hook")

    def _refuse_backward_hook(self, method: str) -> NoReturn:
        raise RuntimeError(
            f"{self.name}: {method}: a spiking layer returns SparseSpikes, not a tensor, so "
            "nn.Module's backward hooks would never run; hook the gradient of its output "
            "spikes with out.values.register_hook(fn) (in a forward hook: "
            "register_forward_hook), and that of a tensor input with its own register_hook")

    def extra_repr(self) -> str:
        return (
            super().extra_repr()
            + f", reset={self.reset!r}, surrogate={self.surrogate}, grad_window={self.grad_window}"
            + f", max_spikes={self.max_spikes}"
        )


class LIFLayer(_SpikingLayer):
    """Leaky integrate-and-fire layer (snnTorch ``Leaky`` after ``nn.Linear``).

    Args:
        in_features, out_features: sizes; ``weight`` is ``[out, in]`` like ``nn.Linear``.
        beta: membrane decay in [0, 1], scalar or ``[out]``.
        threshold: firing threshold > 0, scalar or ``[out]``.
        bias: add a learned bias to the input current.
        reset: ``"subtract"`` | ``"zero"`` | ``"none"``.
        surrogate: an :mod:`snn_ipu.surrogate` instance or name (default ATan(2)).
        grad_window: surrogate support below threshold; ``None`` = exact gradients.
        recurrent: add ``V S[t-1]`` with a learned ``[out, out]`` matrix ``rec_weight``
            (snnTorch ``RLeaky``, except for its zero reset: see the module docstring).
        max_spikes: capacity of the output spike list per (t, b): its spikes and, when
            autograd records the call, its gradient-eligible neurons (all of them with
            ``grad_window=None``); ``None`` sizes it to fit on the CPU and GPU backends
            (the IPU needs a static capacity). Above ``out_features`` it is ``out_features``.
        overflow: ``"error"`` | ``"drop"`` | ``"grow"`` when ``max_spikes`` is too small
            (a dropped spike is not passed on, but its neuron still resets).
        learn_beta, learn_threshold: make them parameters.
        backend: ``"auto"`` | ``"reference"`` | ``"emulator"`` | ``"ipu_graph"`` (the IPU
            program run on the host) | ``"ipu"`` | ``"triton"`` (NVIDIA GPUs; ``auto``
            picks it for CUDA weights, docs/gpu.md).
        dtype: weight dtype, ``torch.float32`` or ``torch.float16`` (state stays float32);
            ``torch.bfloat16`` on the ``triton`` and ``reference`` backends.
        plan_target: the tile plan the emulator executes (``"host"`` or ``"ipu2"``).
        name: used in error messages and reports.
        rec_bias: (recurrent layers) a separate learned bias ``rec_bias`` of the
            recurrent projection, added to ``bias`` (snnTorch's ``RLeaky`` /
            ``RSynaptic`` keep it in ``recurrent.bias``).

    Arguments after ``threshold`` are keyword-only. A call runs the whole sequence
    from zero state (``U = 0``, no spike before step 0); with ``carry_state = True``
    it starts from ``state``, where the last call ended (a constant: truncated BPTT),
    until ``reset_state()``. With ``record_membrane = True`` the layer keeps the
    call's membrane ``[T, B, out]`` in ``last_membrane``, detached (for inspection; a
    loss on a membrane needs a :class:`ReadoutLayer`). An snnTorch network converts with
    :func:`snn_ipu.from_snntorch`.
    """

    neuron_model = "leaky"


class SynapticLayer(_SpikingLayer):
    """Second-order LIF layer (snnTorch ``Synaptic``): a decaying synaptic current
    ``syn[t] = alpha syn[t-1] + I[t]`` drives the membrane. ``alpha`` in [0, 1],
    scalar or ``[out]`` (learned with ``learn_alpha=True``); the other arguments are
    :class:`LIFLayer`'s."""

    neuron_model = "synaptic"

    def __init__(
        self,
        in_features: int,
        out_features: int,
        alpha: Scalar = 0.8,
        beta: Scalar = 0.9,
        threshold: Scalar = 1.0,
        *,
        learn_alpha: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(in_features, out_features, beta, threshold, **kwargs)
        self._register("alpha", decay("alpha", alpha, out_features), learn_alpha)


class ReadoutLayer(_Layer):
    """Non-spiking leaky integrator for losses on the membrane:
    ``U[t] = beta U[t-1] + W x[t] + b``. Returns the membrane ``[T, B, out]``.

    Args:
        in_features, out_features, beta: as :class:`LIFLayer`.
        bias, learn_beta, backend, dtype, plan_target, name: keyword-only, as
            :class:`LIFLayer`.
    """

    neuron_model = "readout"
    max_spikes = None  # its output is the dense membrane

    def config(self) -> LayerConfig:
        return LayerConfig(
            name=self.name,
            model="readout",
            in_features=self.in_features,
            out_features=self.out_features,
            plan_target=self.plan_target,
            record_membrane=self.record_membrane,
            return_state=self.carry_state,
            ipu_tiles=self.ipu_tiles,
        )

    def forward(self, x: Union[SparseSpikes, torch.Tensor]) -> torch.Tensor:
        if compiling():
            return eager(ReadoutLayer.forward)(self, x)
        spikes = self._input(x)
        self._check_parameters()
        initial = self._initial_state(spikes)
        if initial is not None and (initial.synaptic is not None or initial.spikes is not None):
            raise ValueError(f"{self.name}: a readout's carried state is its membrane alone")
        out, record = self._backend().readout_layer(self._call_config(), spikes, self._params(),
                                                    initial, self._backend_cache())
        self._keep(record)
        return out


# The config methods whose inputs _call_config's key holds.
_OWN_CONFIGS = (_SpikingLayer.config, ReadoutLayer.config)
