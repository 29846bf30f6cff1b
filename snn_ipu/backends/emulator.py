"""The IPU emulator backend: the codelets run on the CPU by the C++ host executor.

One autograd Function per layer kind over ``snn_ipu._C``. Every forward call
checks the counts and listed ids of the layer's input list with the executor's
own scan (``_C.check_spike_list``, which also counts the spikes for the choice
of path), however the list was made or checked before: a tensor edited through
``.data`` or ``.numpy()`` escapes autograd's version counters. Its errors are
raised here with the layer's name. The backward pass reads private copies of
the input and output lists, made in the forward pass after that scan, without
scanning them again (``check_lists=False``): the user cannot reach them, so no
edit can make the native backward index out of bounds or differentiate another
batch; the parameters' shapes are checked again before it. The executor runs the
tile plan that the planner makes for ``plan_target`` (``host`` by default,
``ipu2`` to run the IPU's tiling on the CPU).
"""

from __future__ import annotations

import math
import os
import warnings
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from .. import _memory
from ..layers import LayerState
from ..spikes import Overflow, SparseSpikes, listed_mask, listed_only, numpy_view
from .bookkeeping import apply_overflow, record_stats
from .tiles import WorkSplit, work_split_for

try:
    from .._native import _C
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "snn_ipu's C++ extension is not built; run `make build` (or `pip install -e .`) "
        f"in the repository ({exc})"
    ) from exc

__all__ = [
    "spiking_layer", "readout_layer", "set_num_threads", "get_num_threads", "spike_matmul",
]

_EMPTY = np.zeros(0, dtype=np.float32)

THREADS_ENV = "SNN_IPU_NUM_THREADS"


def _available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _warn_if_oversubscribed(n: int, what: str) -> None:
    cores = _available_cores()
    if n > cores:
        warnings.warn(
            f"{what}={n} is more than the {cores} cores this process may use: the executor's "
            "threads then wait for each other at every join, which can make a step many "
            "times slower", RuntimeWarning, stacklevel=3,
        )


def _threads_from_environment() -> Optional[int]:
    text = os.environ.get(THREADS_ENV)
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer, got {text!r}")
    _warn_if_oversubscribed(n, THREADS_ENV)
    return n


# None: as many threads as torch's intra-op pool (torch.get_num_threads()), whose
# OpenMP team the executor runs on.
_requested_threads: Optional[int] = _threads_from_environment()
# OpenMP (libgomp) cannot start a thread team in a process forked after its parent
# used one: a forked DataLoader worker would wait forever. The child runs on one
# thread, as torch's own ops do there.
_in_forked_child = False


def _note_fork() -> None:
    global _in_forked_child
    _in_forked_child = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)


def set_num_threads(n: int) -> None:
    """Worker threads of the host executor (results do not depend on it). By default
    it uses as many as torch (``torch.get_num_threads()``); in a process forked after
    its parent ran the executor (a DataLoader worker), one."""
    global _requested_threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"number of threads must be a positive integer, got {n!r}")
    _warn_if_oversubscribed(n, "set_num_threads")
    _requested_threads = n


def get_num_threads() -> int:
    """The executor's threads: set_num_threads's, $SNN_IPU_NUM_THREADS's, or torch's."""
    if _in_forked_child:
        return 1
    return _requested_threads if _requested_threads is not None else torch.get_num_threads()


# Layers with less work than this (steps x samples x neurons) run on one thread: a
# fork/join of the thread team costs more than it saves there, and on a loaded machine
# a descheduled worker would stall every such call for a whole scheduler time slice.
MIN_PARALLEL_WORK = 1 << 16


def _threads_for(in_ids: torch.Tensor, out_features: int) -> int:
    T, B = in_ids.shape[:2]
    return get_num_threads() if T * B * out_features >= MIN_PARALLEL_WORK else 1


def _np(t: Optional[torch.Tensor]) -> np.ndarray:
    return _EMPTY if t is None else numpy_view(t)


def _plan(layer, spikes: SparseSpikes) -> WorkSplit:
    # Planned for the machine's threads, not set_num_threads(): the tiles and sample
    # groups fix the summation order, so results stay bit-identical whatever the
    # thread count.
    return work_split_for(
        layer.in_features, layer.out_features, spikes.batch_size, spikes.num_steps,
        layer.recurrent, layer.neuron_model, spikes.capacity, layer.out_features,
        layer.weight.element_size(), layer.plan_target,
    )


def _dense_spikes(in_ids: torch.Tensor, in_counts: torch.Tensor, n_in: int) -> torch.Tensor:
    """The input list's spikes as a dense float [T*B, n_in] (eligible-only entries 0)."""
    T, B, K = in_ids.shape
    spikes = listed_mask(in_counts.long(), K, 0).float().reshape(T * B, K)
    # scatter_add_: padding entries (id 0, value 0) must not overwrite neuron 0's spike.
    return torch.zeros(T * B, n_in).scatter_add_(1, in_ids.long().reshape(T * B, K), spikes)


# Input spike density above which the forward pass computes the feed-forward currents
# with one GEMM (torch's, on the dense input) instead of the tiles' row adds, which run
# at ~0.5-0.65 of the GEMM's rate; the scatter to a dense input and the copy of each
# tile's currents come on top. Measured break-even (training steps, paired): input
# density ~0.5 for 2312- and 4096-input layers, ~0.65 for 1000, above 0.7 for 700.
FORWARD_DENSE_FRACTION = 0.6


def _checked_dense_input(in_ids: torch.Tensor, in_counts: torch.Tensor, ids: np.ndarray,
                         counts: np.ndarray, n_in: int) -> Optional[torch.Tensor]:
    """Checks the input list (``ids``, ``counts``: its arrays; the executor's scan,
    which also counts its spikes) and returns the dense input [T*B, n_in] where it is
    dense enough for the GEMM path."""
    T, B, _ = in_ids.shape
    spikes = _C.check_spike_list(ids, counts, n_in)
    if spikes <= FORWARD_DENSE_FRACTION * T * B * n_in:
        return None
    return _dense_spikes(in_ids, in_counts, n_in)


def _currents(x: Optional[torch.Tensor], weight: torch.Tensor, T: int, B: int) -> np.ndarray:
    """W x[t] for every step [T, B, out] for the executor, or nothing (no dense input)."""
    return _EMPTY if x is None else _np((x @ weight.float().t()).reshape(T, B, -1))


# Where the input side of the backward pass (dL/dx at the listed inputs, dL/dW at the
# input spikes) involves more than this fraction of all input rows, one BLAS GEMM on
# dL/dI beats the sparse row kernels (measured on AVX2: ~12 G row adds/s against
# ~40 GMAC/s for torch's GEMM on 2 cores). Exact gradients list every input neuron.
DENSE_FRACTION = 0.3


def _backward_input_side(layer, in_ids, in_counts, weight, needs, call, dense_x=None):
    """Runs the executor's backward, taking the dense GEMM path for the input side
    where it is faster, and records the choice in ``layer.stats``.

    ``call(needs, return_grad_current)`` invokes ``_C.layer_backward``; ``dense_x`` is
    the forward's dense input, if it made one.
    """
    T, B, K = in_ids.shape
    rows = max(1, T * B * weight.shape[1])
    dense_in = needs[0] and float(in_counts[..., 1].sum()) / rows > DENSE_FRACTION
    dense_w = needs[1] and float(in_counts[..., 0].sum()) / rows > DENSE_FRACTION
    res = call((needs[0] and not dense_in, needs[1] and not dense_w) + tuple(needs[2:]),
               dense_in or dense_w)
    grad_in = torch.from_numpy(res["grad_in_values"]) if needs[0] and not dense_in else None
    grad_w = _grad(res, "grad_weight", weight) if needs[1] and not dense_w else None
    if dense_in or dense_w:
        g_current = torch.from_numpy(res["grad_current"]).reshape(T * B, -1)
    if dense_in:
        g_x = (g_current @ weight.float()).reshape(T, B, -1)
        grad_in = listed_only(torch.gather(g_x, -1, in_ids.long()), in_counts)
    if dense_w:
        x = dense_x if dense_x is not None else _dense_spikes(in_ids, in_counts, weight.shape[1])
        grad_w = (g_current.t() @ x).to(weight.dtype)
    layer.stats["input_grad_path"] = "none" if not needs[0] else "dense" if dense_in else "sparse"
    layer.stats["weight_grad_path"] = "none" if not needs[1] else "dense" if dense_w else "sparse"
    return res, grad_in, grad_w


def _first_order_only(layer) -> None:
    # Autograd runs a backward with grad mode on only for create_graph=True; the
    # executor's gradients have no graph, so a second derivative would come out as
    # a missing grad_fn far from its cause.
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{layer.name}: the emulator backend has first-order gradients only; "
            "create_graph=True (higher-order gradients) needs backend='reference'"
        )


def _grad(result: dict, key: str, like: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if like is None or key not in result:
        return None
    return torch.from_numpy(result[key]).to(like.dtype).reshape(like.shape)


def _initial_forward(initial) -> dict:
    """The executor's arguments for a carried state (none: zero state)."""
    if initial is None:
        return {}
    return {"initial_membrane": _np(initial.membrane), "initial_syn": _np(initial.synaptic),
            "initial_spikes": _np(initial.spikes)}


def _initial_backward(initial, cfg=None) -> dict:
    """The backward's view of a carried state: U[-1], syn[-1] and the spikes S[-1] of
    every sample as ascending ids. Under a capacity that drops, a recurrent layer's
    step 0 took the lowest-numbered ``capacity`` of them as its input, as at every
    other step; all of them reset their neurons."""
    if initial is None:
        return {}
    args = {"initial_membrane": _np(initial.membrane), "initial_syn": _np(initial.synaptic)}
    if cfg is not None and cfg.recurrent and cfg.capacity and cfg.overflow == "drop":
        args["initial_recurrent_cap"] = cfg.capacity
    if initial.spikes is not None:
        nonzero = initial.spikes.nonzero()  # row-major: by sample, ids ascending
        args["initial_spike_ids"] = _np(nonzero[:, 1].to(torch.int32))
        args["initial_spike_counts"] = _np(torch.bincount(
            nonzero[:, 0], minlength=initial.spikes.shape[0]).to(torch.int32).reshape(1, -1))
    return args


def _shapes_of(**tensors) -> dict:
    return {name: (tuple(t.shape), t.dtype) for name, t in tensors.items() if t is not None}


def _check_unchanged(where: str, shapes: dict, **tensors) -> None:
    """The parameters autograd saved still have the forward's shapes and dtypes: one
    assigned through ``.data`` between the forward and the backward pass would make the
    native code read past its end."""
    for name, t in tensors.items():
        if t is not None and (tuple(t.shape), t.dtype) != shapes[name]:
            shape, dtype = shapes[name]
            raise RuntimeError(
                f"{where}: {name} changed from {list(shape)} {dtype} in the forward pass to "
                f"{list(t.shape)} {t.dtype} before its backward pass (assigned through "
                "`.data`?); run the forward pass again after changing a parameter"
            )


class _SpikingLayerFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, cfg, split, keep_dense, in_ids, in_counts, in_values, weight,
                bias, rec_weight, beta, threshold, alpha, initial):
        sur = cfg.surrogate
        T, B = in_ids.shape[:2]
        ids_np, counts_np = _np(in_ids), _np(in_counts)
        dense_x = _checked_dense_input(in_ids, in_counts, ids_np, counts_np, weight.shape[1])
        res = _C.layer_forward(
            cfg.model_code, cfg.reset_code, sur.kind, sur.params[0], sur.params[1], cfg.window,
            cfg.capacity or 0, cfg.overflow_code, keep_dense,
            split.tile_starts, ids_np, counts_np, _np(weight), _np(bias),
            _np(rec_weight), _np(beta), _np(threshold), _np(alpha),
            _threads_for(in_ids, layer.out_features),
            input_currents=_currents(dense_x, weight, T, B), check_lists=False,
            return_state=layer.carry_state, sample_groups=split.sample_groups,
            memory_budget=_memory.available_bytes() or 0, **_initial_forward(initial),
        )
        if layer.carry_state:
            layer.state = LayerState(
                torch.from_numpy(res["final_membrane"]),
                torch.from_numpy(res["final_syn"]) if cfg.model == "synaptic" else None,
                torch.from_numpy(res["final_spikes"]),
            )
        ctx.initial = initial
        ids = torch.from_numpy(res["ids"])
        counts = torch.from_numpy(res["counts"])
        K = ids.shape[-1]
        first = res["overflow_at"]
        overflow = Overflow(
            int(res["spikes_dropped"]), int(res["eligible_dropped"]),
            None if first is None else tuple(int(v) for v in first),
        )
        apply_overflow(layer, K, overflow)
        record_stats(
            layer, "emulator", T, B, int(res["total_spikes"]), K, int(res["needed_capacity"]),
            overflow, int(res["eligible_listed"]),
            path="sparse" if dense_x is None else "dense", tiles=len(split.tile_starts) - 1,
            sample_groups=split.sample_groups, plan_target=cfg.plan_target,
        )
        dense_membrane = torch.from_numpy(res["dense_membrane"])
        layer.last_membrane = dense_membrane if layer.record_membrane else None
        ctx.layer = layer
        ctx.cfg = cfg
        ctx.split = split
        ctx.dense_x = dense_x if ctx.needs_input_grad[7] else None  # for dL/dW's GEMM
        ctx.has_bias = bias is not None
        ctx.has_rec = rec_weight is not None
        ctx.has_alpha = alpha is not None
        ctx.shapes = _shapes_of(weight=weight, rec_weight=rec_weight, beta=beta,
                                threshold=threshold, alpha=alpha)
        ctx.save_for_backward(
            # private copies: the native backward indexes with the lists unchecked, and
            # the user can reach the ones returned or passed in (.data, .numpy())
            in_ids.clone(), in_counts.clone(), weight, rec_weight, beta, threshold, alpha,
            ids.clone(), counts.clone(),
            torch.from_numpy(res["membrane"]),
            dense_membrane,
            torch.from_numpy(res.get("dense_syn", _EMPTY)),
            # spikes past the capacity (overflow "drop"): they reset their neurons
            torch.from_numpy(res["dropped_ids"]),
            torch.from_numpy(res["dropped_counts"]),
        )
        ctx.mark_non_differentiable(ids, counts)
        # No zero "gradients" of ids and counts ([T, B, K] int32 each) for backward.
        ctx.set_materialize_grads(False)
        return torch.from_numpy(res["values"]), ids, counts

    @staticmethod
    def backward(ctx, grad_values, _grad_ids, _grad_counts):
        _first_order_only(ctx.layer)
        if grad_values is None:  # nothing downstream used the values
            return (None,) * 14
        (in_ids, in_counts, weight, rec_weight, beta, threshold, alpha, ids, counts,
         membrane, dense_membrane, dense_syn, dropped_ids, dropped_counts) = ctx.saved_tensors
        _check_unchanged(ctx.layer.name, ctx.shapes, weight=weight, rec_weight=rec_weight,
                         beta=beta, threshold=threshold, alpha=alpha)
        cfg = ctx.cfg
        sur = cfg.surrogate
        needs = tuple(ctx.needs_input_grad[6:13])

        def call(call_needs, return_grad_current):
            return _C.layer_backward(
                cfg.model_code, cfg.reset_code, sur.kind, sur.params[0], sur.params[1],
                cfg.window, ctx.split.tile_starts, _np(in_ids), _np(in_counts), _np(weight),
                ctx.has_bias, _np(rec_weight), _np(beta), _np(threshold), _np(alpha),
                _np(ids), _np(counts), _np(membrane), _np(dense_membrane), _np(dense_syn),
                _np(grad_values.float()), call_needs,
                _threads_for(in_ids, ctx.layer.out_features),
                return_grad_current=return_grad_current, check_lists=False,
                dropped_ids=_np(dropped_ids), dropped_counts=_np(dropped_counts),
                sample_groups=ctx.split.sample_groups, **_initial_backward(ctx.initial, cfg),
            )

        res, grad_in, grad_w = _backward_input_side(
            ctx.layer, in_ids, in_counts, weight, needs, call, ctx.dense_x
        )
        return (
            None, None, None, None, None, None, grad_in, grad_w,
            torch.from_numpy(res["grad_bias"]) if needs[2] and ctx.has_bias else None,
            _grad(res, "grad_rec_weight", rec_weight) if needs[3] and ctx.has_rec else None,
            _grad(res, "grad_beta", beta) if needs[4] else None,
            _grad(res, "grad_threshold", threshold) if needs[5] else None,
            _grad(res, "grad_alpha", alpha) if needs[6] and ctx.has_alpha else None,
            None,
        )


class _ReadoutFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, split, in_ids, in_counts, in_values, weight, bias, beta, initial):
        T, B = in_ids.shape[:2]
        ids_np, counts_np = _np(in_ids), _np(in_counts)
        dense_x = _checked_dense_input(in_ids, in_counts, ids_np, counts_np, weight.shape[1])
        res = _C.layer_forward(
            2, 2, 0, 2.0, 0.0, float("inf"), 0, 0, False, split.tile_starts, ids_np,
            counts_np, _np(weight), _np(bias), _EMPTY, _np(beta), np.ones_like(_np(beta)),
            _EMPTY, _threads_for(in_ids, layer.out_features),
            input_currents=_currents(dense_x, weight, T, B), check_lists=False,
            sample_groups=split.sample_groups, **_initial_forward(initial),
        )
        ctx.initial = initial
        layer.stats = {"backend": "emulator", "path": "sparse" if dense_x is None else "dense"}
        ctx.dense_x = dense_x if ctx.needs_input_grad[5] else None
        membrane = torch.from_numpy(res["membrane"])
        layer.last_membrane = membrane.detach() if layer.record_membrane else None
        if layer.carry_state:
            layer.state = LayerState(membrane[-1].clone(), None, None)
        ctx.layer = layer
        ctx.split = split
        ctx.has_bias = bias is not None
        ctx.shapes = _shapes_of(weight=weight, beta=beta)
        ctx.save_for_backward(in_ids.clone(), in_counts.clone(), weight, beta, membrane)
        return membrane

    @staticmethod
    def backward(ctx, grad_membrane):
        _first_order_only(ctx.layer)
        in_ids, in_counts, weight, beta, membrane = ctx.saved_tensors
        _check_unchanged(ctx.layer.name, ctx.shapes, weight=weight, beta=beta)
        need = ctx.needs_input_grad
        needs = (need[4], need[5], need[6], False, need[7], False, False)

        def call(call_needs, return_grad_current):
            return _C.layer_backward(
                2, 2, 0, 2.0, 0.0, float("inf"), ctx.split.tile_starts, _np(in_ids),
                _np(in_counts),
                _np(weight), ctx.has_bias, _EMPTY, _np(beta), np.ones_like(_np(beta)),
                _EMPTY, _EMPTY.astype(np.int32), _EMPTY.astype(np.int32), _np(membrane),
                _EMPTY, _EMPTY, _np(grad_membrane.float()), call_needs,
                _threads_for(in_ids, ctx.layer.out_features),
                return_grad_current=return_grad_current, check_lists=False,
                sample_groups=ctx.split.sample_groups, **_initial_backward(ctx.initial),
            )

        res, grad_in, grad_w = _backward_input_side(
            ctx.layer, in_ids, in_counts, weight, needs, call, ctx.dense_x
        )
        return (
            None, None, None, None, grad_in, grad_w,
            torch.from_numpy(res["grad_bias"]) if needs[2] and ctx.has_bias else None,
            _grad(res, "grad_beta", beta) if needs[4] else None,
            None,
        )


def _check_inputs(where: str, weights, *tensors) -> None:
    for t in (*weights, *tensors):
        if t is not None and t.device.type != "cpu":
            raise ValueError(f"the emulator backend runs on the CPU; got a tensor on {t.device}")
    for w in weights:
        if w is not None and w.dtype not in (torch.float32, torch.float16):
            raise TypeError(
                f"{where}: the emulator backend takes float32 or float16 weights, got "
                f"{w.dtype} (the reference backend runs float64)"
            )


@contextmanager
def _named(where: str) -> Iterator[None]:
    """The executor's argument errors (a bad input list, ...) and its memory budget
    name where they came from."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    except _C.MemoryBudgetExceeded as exc:
        raise MemoryError(f"{where}: {exc}; {MEMORY_ADVICE}") from None


MEMORY_ADVICE = (
    "list fewer entries (a finite grad_window lists only neurons near threshold; a "
    "smaller max_spikes with overflow='drop'), or run fewer timesteps T or samples B "
    "per call (carry_state runs a long sequence in chunks)"
)


def _preflight(layer, spikes: SparseSpikes, cfg, keep_dense: bool) -> None:
    lists_everyone = cfg.model != "readout" and math.isinf(cfg.window)
    dense_state = (2 if cfg.model == "synaptic" else 1) if keep_dense or cfg.model == "readout" \
        else 0
    _memory.require(layer.name, _memory.layer_call_bytes(
        spikes.num_steps, spikes.batch_size, layer.out_features, cfg.capacity, lists_everyone,
        dense_state), MEMORY_ADVICE)


def spiking_layer(layer, cfg, spikes: SparseSpikes, weight, bias, rec_weight, beta, threshold,
                  alpha, initial=None):
    _check_inputs(layer.name, (weight, rec_weight), spikes.values, bias, beta, threshold, alpha)
    split = _plan(layer, spikes)
    # Learned decays need the dense state history in backward; decided here because
    # Function.forward always runs with grad disabled.
    keep_dense = layer.record_membrane or (
        torch.is_grad_enabled()
        and (beta.requires_grad or (alpha is not None and alpha.requires_grad))
    )
    _preflight(layer, spikes, cfg, keep_dense)
    with _named(layer.name):
        values, ids, counts = _SpikingLayerFn.apply(
            layer, cfg, split, keep_dense, spikes.ids, spikes.counts, spikes.values, weight, bias,
            rec_weight, beta, threshold, alpha, initial,
        )
    return SparseSpikes._made(ids, counts, layer.out_features, values)


def readout_layer(layer, spikes: SparseSpikes, weight, bias, beta, initial=None) -> torch.Tensor:
    _check_inputs(layer.name, (weight,), spikes.values, bias, beta)
    split = _plan(layer, spikes)
    _preflight(layer, spikes, layer.config(), keep_dense=False)
    with _named(layer.name):
        return _ReadoutFn.apply(layer, split, spikes.ids, spikes.counts, spikes.values, weight,
                                bias, beta, initial)


def spike_matmul(
    spikes: SparseSpikes, weight: torch.Tensor, plan_target: str = "host"
) -> Tuple[torch.Tensor, float, int]:
    """The spike-matmul kernel on its own, for measuring it.

    Runs the SpikeMatmul vertex over every tile, step and sample of ``spikes`` (its
    spike entries; eligible-only entries are not inputs) with ``weight`` [out, in]
    (float32 or float16) under the planner's tiles and sample groups for
    ``plan_target``, as a feed-forward layer runs it: each step sets the tiles'
    currents ``x[t] @ W.T``. As in the layer, a thread builds a tile's weight block
    right before the tile's steps (with sample groups, all blocks before any steps),
    so the block is in cache.

    Returns:
        ``(currents [B, out], kernel_seconds, adds)``: the currents of the last step;
        the seconds of the input list's repack plus the busiest thread's vertex calls
        (the block builds are not timed); and the number of additions the calls made
        (spikes x out, over all steps).
    """
    if weight.dim() != 2 or weight.shape[1] != spikes.num_neurons:
        raise ValueError(
            f"weight must be [out, {spikes.num_neurons}], got {list(weight.shape)}"
        )
    _check_inputs("spike_matmul", (weight,), spikes.values)
    split = work_split_for(
        weight.shape[1], weight.shape[0], spikes.batch_size, spikes.num_steps,
        capacity_in=spikes.capacity, capacity_out=weight.shape[0],
        weight_bytes=weight.element_size(), target=plan_target,
    )
    with _named("spike_matmul"):
        res = _C.spike_matmul(split.tile_starts, _np(spikes.ids), _np(spikes.counts),
                              _np(weight), get_num_threads(), split.sample_groups)
    return torch.from_numpy(res["currents"]), float(res["kernel_seconds"]), int(res["adds"])
