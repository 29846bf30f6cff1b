"""The one place where a layer call's settings and tensors become the native
executor's call objects (``_C.LayerCall``, ``_C.ForwardCall``, ``_C.BackwardCall``;
popops_ext/host/LayerCall.hpp): codes from names, tensors as numpy views, absent
tensors as None."""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import torch

from .._codes import MODELS, OVERFLOWS, RESETS
from .._native import _C, numpy_view
from ..surrogate import Surrogate
from .contract import LayerConfig, LayerParams, LayerState
from .work_split import WorkSplit

__all__ = ["backward_call", "forward_call", "grad_needs", "view"]


def view(t: Optional[torch.Tensor]) -> Optional[np.ndarray]:
    return None if t is None else numpy_view(t)


def _neuron(cfg: LayerConfig) -> _C.NeuronSettings:
    if not cfg.spiking:
        return _neuron_settings(cfg.model, "none", None, 0.0)
    return _neuron_settings(cfg.model, cfg.reset, cfg.surrogate, cfg.window)


# Shared by the calls of a layer: a LayerCall takes a copy (pybind11's field setter), so
# no call can change the cached one.
@functools.lru_cache(maxsize=256)
def _neuron_settings(model: str, reset: str, surrogate: Optional[Surrogate],
                     window: float) -> _C.NeuronSettings:
    n = _C.NeuronSettings()
    n.model = MODELS[model]
    n.reset = RESETS[reset]
    if surrogate is not None:
        n.surrogate = surrogate.kind
        n.surrogate_param, n.surrogate_height = surrogate.params
        n.grad_window = window
    return n


def _layer(cfg: LayerConfig, split: WorkSplit, threads: int, in_ids: torch.Tensor,
           in_counts: torch.Tensor, params: LayerParams,
           initial: Optional[LayerState], in_capacity: int = 0) -> _C.LayerCall:
    c = _C.LayerCall()
    c.neuron = _neuron(cfg)
    c.tile_starts = split.tile_starts
    c.sample_groups = split.sample_groups
    c.num_threads = threads
    c.in_ids = view(in_ids)
    c.in_counts = view(in_counts)
    c.in_capacity = in_capacity
    c.weight = view(params.weight)
    c.bias = view(params.bias)
    c.rec_weight = view(params.rec_weight)
    c.beta = view(params.beta)
    c.threshold = view(params.threshold)
    c.alpha = view(params.alpha)
    if initial is not None:
        c.initial_membrane = view(initial.membrane)
        c.initial_synaptic = view(initial.synaptic)
    return c


def forward_call(cfg: LayerConfig, split: WorkSplit, threads: int, in_ids: torch.Tensor,
                 in_counts: torch.Tensor, params: LayerParams, initial: Optional[LayerState],
                 keep_dense: bool, input_currents: Optional[torch.Tensor],
                 memory_budget: int) -> _C.ForwardCall:
    """A forward call on an input list the caller has scanned already."""
    c = _C.ForwardCall()
    c.layer = _layer(cfg, split, threads, in_ids, in_counts, params, initial)
    c.capacity = cfg.capacity or 0
    c.overflow = OVERFLOWS[cfg.overflow]
    c.keep_dense_state = keep_dense
    c.return_state = cfg.return_state
    c.scan_input = False
    c.memory_budget = memory_budget
    c.input_currents = view(input_currents)
    if initial is not None:
        c.initial_spikes = view(initial.spikes)
    return c


# One object per set of flags: a call takes a copy (pybind11's field setter), so none
# can change the cached one.
@functools.lru_cache(maxsize=256)
def grad_needs(**flags: bool) -> _C.GradNeeds:
    """``input``, ``weight``, ``bias``, ``rec_weight``, ``beta``, ``threshold``,
    ``alpha``: which gradients to compute; ``current``: also return dL/dI."""
    needs = _C.GradNeeds()
    for name, value in flags.items():
        setattr(needs, name, bool(value))
    return needs


def backward_call(cfg: LayerConfig, split: WorkSplit, threads: int, in_ids: torch.Tensor,
                  in_counts: torch.Tensor, params: LayerParams, initial: Optional[LayerState],
                  membrane: torch.Tensor, grad_out: torch.Tensor, needs: _C.GradNeeds,
                  out_ids: Optional[torch.Tensor] = None,
                  out_counts: Optional[torch.Tensor] = None,
                  dense_membrane: Optional[torch.Tensor] = None,
                  dense_synaptic: Optional[torch.Tensor] = None,
                  dropped_ids: Optional[torch.Tensor] = None,
                  dropped_counts: Optional[torch.Tensor] = None,
                  in_capacity: int = 0,
                  layer: Optional[_C.LayerCall] = None) -> _C.BackwardCall:
    """A backward call on lists the forward pass made or scanned (private copies).
    The lists may be compact (``_C.compact_list``: the listed ids row after row, 1-D),
    the input's of capacity ``in_capacity``, the output's of the membrane's. ``layer``:
    the forward call's ``LayerCall``, whose settings and parameter views the caller
    knows to be this call's (it is copied, with this call's lists, threads and
    ``params.threshold``), instead of building them again."""
    c = _C.BackwardCall()
    if layer is None:
        c.layer = _layer(cfg, split, threads, in_ids, in_counts, params, initial,
                         in_capacity)
    else:
        c.layer = layer
        copy = c.layer  # the call's own copy (each read of c.layer makes a wrapper)
        copy.num_threads = threads
        copy.in_ids, copy.in_counts = view(in_ids), view(in_counts)
        copy.in_capacity = in_capacity
        # the caller's threshold: the forward's values, which the forward's view of the
        # layer's tensor no longer holds where it was changed in place since
        copy.threshold = view(params.threshold)
    c.membrane = view(membrane)
    c.grad_out = view(grad_out.float())
    c.needs = needs
    c.scan_lists = False
    # the optional arrays are None in a new call: set where given (each set converts)
    for name, t in (("out_ids", out_ids), ("out_counts", out_counts),
                    ("dense_membrane", dense_membrane), ("dense_synaptic", dense_synaptic),
                    ("dropped_ids", dropped_ids), ("dropped_counts", dropped_counts)):
        if t is not None:
            setattr(c, name, numpy_view(t))
    if initial is not None and initial.spikes is not None:
        # S[-1] of every sample as ascending ids; under a capacity that drops, a
        # recurrent layer's step 0 took the lowest-numbered ``capacity`` of them as its
        # input, as at every other step; all of them reset their neurons.
        nonzero = initial.spikes.nonzero()  # row-major: by sample, ids ascending
        c.initial_spike_ids = numpy_view(nonzero[:, 1].to(torch.int32))
        c.initial_spike_counts = numpy_view(torch.bincount(
            nonzero[:, 0], minlength=initial.spikes.shape[0]).to(torch.int32).reshape(1, -1))
        if cfg.recurrent and cfg.capacity and cfg.overflow == "drop":
            c.initial_recurrent_cap = cfg.capacity
    return c
