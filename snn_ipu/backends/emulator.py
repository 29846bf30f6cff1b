"""The IPU emulator backend: the codelets run on the CPU by the C++ host executor.

One autograd Function per layer kind over ``_C.layer_forward`` /
``_C.layer_backward`` (their calls are built in :mod:`.native_call`). Every
forward call checks the counts and listed ids of the layer's input list with the
executor's own scan, however the list was made or checked before: a tensor
edited through ``.data`` or ``.numpy()`` escapes autograd's version counters.
Its errors are raised with the layer's name. The scan is also the copy of the
list that the backward pass reads (the listed entries alone, row after row,
O(entries) where a clone of a ``[T, B, K]`` list is O(T B K)), which the
executor's sparse path takes as it repacks the list for its tiles
(``copy_input``; ``_C.compact_list`` where the input takes the dense path), and
the output list gets such a private copy too, made by the executor's forward
while the list is in cache; the backward pass
reads them without scanning them again: the user cannot reach them, so no edit
can make the native backward index out of bounds or differentiate another
batch. The parameters' shapes are checked again before the backward pass. The
executor runs the tile plan that the planner makes for ``plan_target``
(``host`` by default, ``ipu2`` to run the IPU's tiling on the CPU). A layer's
plan, memory pre-flight and native call object are kept in the ``cache`` it
passes (the Backend contract's) for its next call, while nothing they were made
from changes: on a small layer, building them cost as much as the native call.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch

from .. import _memory
from .._devices import autocast_enabled
from .._native import _C, numpy_view
from ..lists import listed_mask
from ..overflow import Overflow
from ..spikes import SparseSpikes
from .autograd_limits import first_order_only, no_forward_mode, unbatched_only
from .contract import CallRecord, LayerConfig, LayerParams, LayerState
from .dense_paths import backward_dense_fractions, forward_dense_fraction
from .emulator_threads import get_num_threads, set_num_threads, threads_for
from .native_call import backward_call, forward_call, grad_needs
from .work_split import WorkSplit, work_split_for

__all__ = [
    "spiking_layer", "readout_layer", "set_num_threads", "get_num_threads", "spike_matmul",
]

MEMORY_ADVICE = (
    "list fewer entries (a finite grad_window lists only neurons near threshold; a "
    "smaller max_spikes with overflow='drop'), or run fewer timesteps T or samples B "
    "per call (carry_state runs a long sequence in chunks)"
)
# What the forward's dense input path and the backward's dL/dI history cost whatever the
# lists hold: [T, B, in] and [T, B, out] float32 arrays, which only T and B shrink.
DENSE_MEMORY_ADVICE = (
    "run fewer timesteps T or samples B per call (carry_state runs a long sequence in "
    "chunks)"
)


def _plan(cfg: LayerConfig, spikes: SparseSpikes, weight: torch.Tensor) -> WorkSplit:
    return work_split_for(
        cfg.in_features, cfg.out_features, spikes.batch_size, spikes.num_steps,
        cfg.recurrent, cfg.model, spikes.capacity, cfg.out_features, weight.element_size(),
        cfg.plan_target,
    )


def _dense_spikes(in_ids: torch.Tensor, in_counts: torch.Tensor, n_in: int) -> torch.Tensor:
    """The input list's spikes as a dense float [T*B, n_in] (eligible-only entries 0)."""
    T, B, K = in_ids.shape
    spikes = listed_mask(in_counts.long(), K, 0).float().reshape(T * B, K)
    # scatter_add_: padding entries (id 0, value 0) must not overwrite neuron 0's spike.
    return torch.zeros(T * B, n_in).scatter_add_(1, in_ids.long().reshape(T * B, K), spikes)


def _rows_bytes(rows: int, width: int) -> int:
    """Bytes of a float32 [rows, width] array whose rows are padded to 8 floats (the
    GEMMs' and the tiles' rows)."""
    return 4 * rows * (-(-width // 8) * 8)


def _dense_input(name: str, in_ids: torch.Tensor, in_counts: torch.Tensor, n_in: int,
                 n_out: int) -> torch.Tensor:
    """The input list's spikes as a dense [T*B, n_in], for a call whose input the
    executor found dense enough for the GEMM (``wants_dense``). The dense input and the
    currents ([T*B, n_out]) must fit in the free memory: the pre-flight
    (_preflight_bytes) cannot count them, since the path depends on the input's
    density, and the executor's budget does not see them (a windowed layer of 100,000
    neurons on 1,000 rows took 0.4 GB of currents under a budget of 0.15 GB)."""
    T, B, _ = in_ids.shape
    # (not a fall-back to the sparse path: the path must not depend on the free memory,
    # or a layer's bits would)
    _memory.require(name, _rows_bytes(T * B, n_in) + _rows_bytes(T * B, n_out),
                    "its input is dense enough for the dense input path, which holds the "
                    "input and the currents of every step; " + DENSE_MEMORY_ADVICE)
    return _dense_spikes(in_ids, in_counts, n_in)


def _dense_weight_grad(spikes: int, steps: int, batch: int, n_in: int, n_out: int) -> bool:
    """Whether the backward computes dL/dW with its GEMM: the input's ``spikes`` are more
    than the layer's dL/dW fraction of its ``steps * batch * n_in`` input rows."""
    return spikes / max(1, steps * batch * n_in) > backward_dense_fractions(n_in, n_out)[1]


class _PrivateList:
    """A private copy of a list for the backward pass: the listed ids, compact (row
    after row), a copy of the counts, and the list's capacity K and spike total. The
    forward pass makes its output list's (``from_forward``); :meth:`of_input` copies an
    input list, checking its counts and listed ids (in ``[0, num_ids)``: the executor's
    scan of its input) in the same pass as the copy."""

    def __init__(self, ids: torch.Tensor, counts: torch.Tensor, capacity: int, spikes: int,
                 padded: Optional[torch.Tensor] = None):
        self.ids, self.counts, self.capacity, self.spikes = ids, counts, capacity, spikes
        T, B = counts.shape[:2]
        # A full list (exact gradients list every neuron) is its compact ids.
        self._padded = ids.view(T, B, capacity) if ids.numel() == T * B * capacity \
            else padded

    @classmethod
    def of_input(cls, ids: torch.Tensor, counts: torch.Tensor, num_ids: int,
                 n_out: int) -> _PrivateList:
        compact, spikes = _C.compact_list(numpy_view(ids), numpy_view(counts), num_ids,
                                          get_num_threads())
        return cls.of_copy(ids, torch.from_numpy(compact), counts.clone(), spikes, num_ids,
                           n_out)

    @classmethod
    def of_copy(cls, ids: torch.Tensor, compact: torch.Tensor, counts: torch.Tensor,
                spikes: int, num_ids: int, n_out: int) -> _PrivateList:
        """The private list of an input list ``ids`` [T, B, K] whose compact ids and
        counts have been copied (and checked) already."""
        T, B, K = ids.shape
        # The backward's dense dL/dW path scatters the spikes of the [T, B, K] list into
        # a dense input, and takes it only where more than the dL/dW fraction of
        # all T*B*n_in input rows are spikes, where keeping the list is still
        # O(entries) and rebuilding it from the compact ids (a mask and an index_put)
        # costs more.
        dense = _dense_weight_grad(spikes, T, B, num_ids, n_out)
        return cls(compact, counts, K, spikes, ids.clone() if dense else None)

    @classmethod
    def from_forward(cls, res) -> _PrivateList:
        """The copy the executor's forward made of its output list."""
        return cls(torch.from_numpy(res.private_ids), torch.from_numpy(res.private_counts),
                   res.ids.shape[-1], res.private_spikes)

    def padded(self) -> torch.Tensor:
        """The ids as a [T, B, K] list (padding 0), for the dense dL/dW path."""
        if self._padded is not None:
            return self._padded
        mask = listed_mask(self.counts, self.capacity, 1)
        ids = torch.zeros(mask.shape, dtype=torch.int32)
        ids[mask] = self.ids
        return ids


def _currents(x: torch.Tensor, weight: torch.Tensor, T: int, B: int) -> torch.Tensor:
    """W x[t] for every step of a dense input: [T, B, out rounded up to a multiple of
    8], the executor reading the first ``out`` of each row."""
    return _matmul_padded_rows(x, weight.float().t()).reshape(T, B, -1)


def _matmul_padded_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` [m, n] in the first n columns of an [m, n rounded up to a multiple of
    8] buffer (the rest not written), which it returns: rows that start 32 bytes
    apart. BLAS's sgemm stores whole AVX vectors; into rows that are not 32-byte
    aligned it ran 1.2-1.6x slower (MKL on AVX2: [4800, 1466] out of a 1466-deep
    product 1.4x, [6400, 300] 1.2x, L's dL/dW [1466, 1466] out of a 4800-deep one 1.4x
    with the copy into .grad; a width that is a multiple of 8 gains nothing from more
    padding)."""
    n = b.shape[1]
    padded = -(-n // 8) * 8
    if padded == n:
        return a @ b
    out = torch.empty(a.shape[0], padded, dtype=a.dtype)
    torch.mm(a, b, out=out[:, :n])
    return out


def _as(array, like: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(array)
    return (t if t.dtype == like.dtype else t.to(like.dtype)).reshape(like.shape)


# The executor's own torch ops (its dense GEMM paths) compute in float32 whatever autocast
# region the user's model runs in: their results go to native code, which takes float32
# (a bfloat16 GEMM result was refused by numpy once an input was dense enough).
def _float32(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not _cpu_autocast():  # entering the region costs more than many a call
            return fn(*args, **kwargs)
        with torch.autocast(device_type="cpu", enabled=False):
            return fn(*args, **kwargs)
    return run


_cpu_autocast = functools.partial(autocast_enabled, "cpu")


_PATHS = {(False, False): "none", (False, True): "none", (True, False): "sparse",
          (True, True): "dense"}  # (wanted, dense): the record's path of a gradient


@_float32
def _backward(cfg: LayerConfig, ctx, record: CallRecord, inputs: _PrivateList, params,
              wants: dict, same_storage: bool, out: Optional[_PrivateList] = None,
              **call_args):
    """Runs the executor's backward for the gradients ``wants`` names (grad_needs'
    flags), taking the dense GEMM path for the input side where it is faster, and
    records the choice in ``record.paths``. ``same_storage``: the parameters are on
    the storage of the forward's views. Returns the result and dL/d(input values),
    dL/dW."""
    weight = params.weight
    n_out, n_in = weight.shape
    in_ids, in_counts = inputs.ids, inputs.counts
    T, B = in_counts.shape[:2]
    want_in, want_w = wants["input"], wants["weight"]
    dense_in = want_in and in_ids.numel() / max(1, T * B * n_in) > backward_dense_fractions(
        n_in, n_out)[0]
    dense_w = want_w and _dense_weight_grad(inputs.spikes, T, B, n_in, n_out)
    needs = grad_needs(**{**wants, "input": want_in and not dense_in,
                          "weight": want_w and not dense_w, "current": dense_in or dense_w})
    # The executor keeps dL/dI of every step where it computes dL/dx or hands dL/dI to
    # the GEMMs ([T, B, out]), and the GEMM paths take [T, B, in] arrays: whatever the
    # lists hold, and counted by neither the forward's pre-flight nor the executor's
    # budget (a windowed 32-100,000 layer on 1,000 rows took 0.4 GB under a 0.15 GB one).
    needed = _rows_bytes(T * B, n_out) if want_in or dense_w else 0
    if dense_in:
        needed += _rows_bytes(T * B, n_in)  # dL/dx, dense
    if dense_w and ctx.dense_x is None:
        needed += _rows_bytes(T * B, n_in)  # the input, dense
    _memory.require(f"{cfg.name}'s backward pass", needed,
                    "it holds dL/dI of every step; " + DENSE_MEMORY_ADVICE)
    if out is not None:
        call_args.update(out_ids=out.ids, out_counts=out.counts)
    # The input gradient writes all T*B*K of its [T, B, K] values (the padding's
    # zeros too): a readout of few neurons behind a wide list has that much work
    # whatever its width.
    width = max(cfg.out_features, inputs.capacity if needs.input else 0)
    # The forward's settings and parameter views, where the parameters are on the
    # same storage (not assigned through .data since).
    res = _C.layer_backward(backward_call(
        cfg, ctx.split, threads_for(T, B, width), in_ids, in_counts, params,
        ctx.initial, needs=needs, in_capacity=inputs.capacity,
        layer=ctx.layer_call if same_storage else None, **call_args))
    grad_in = torch.from_numpy(res.grad_in_values) if want_in and not dense_in else None
    grad_w = None
    if want_w and not dense_w:
        grad_w = torch.from_numpy(res.grad_weight)  # [out, in] float32
        if grad_w.dtype != weight.dtype:
            grad_w = grad_w.to(weight.dtype)
    if dense_in or dense_w:
        g_current = torch.from_numpy(res.grad_current).reshape(T * B, -1)
    if dense_in:
        g_x = _matmul_padded_rows(g_current, weight.float())[:, :n_in]
        # dL/dx at the listed entries, 0 at the padding (read in place, rows padded)
        grad_in = torch.from_numpy(_C.gather_listed(
            g_x.numpy(), numpy_view(in_ids), numpy_view(in_counts), inputs.capacity,
            get_num_threads()))
    if dense_w:
        x = ctx.dense_x if ctx.dense_x is not None else _dense_spikes(
            inputs.padded(), in_counts, n_in)
        # (autograd copies the padded rows into .grad's layout)
        grad_w = _matmul_padded_rows(g_current.t(), x)[:, :x.shape[1]].to(weight.dtype)
    paths = record.paths
    paths["input_grad_path"] = _PATHS[want_in, dense_in]
    paths["weight_grad_path"] = _PATHS[want_w, dense_w]
    paths["weight_grad_bucketed_steps"] = res.bucketed_steps
    paths["input_grad_bucketed_steps"] = res.input_grad_bucketed_steps
    if paths["input_grad_path"] == "sparse":
        # which list's entries the sparse dL/dx walked (LayerBackward.cpp,
        # prefersOutputEntries)
        paths["input_grad_walk"] = "outputs" if res.input_grad_walked_outputs else "inputs"
    return res, grad_in, grad_w


_NO_IDS = np.zeros(0, np.int32)


def _storage_of(params: LayerParams) -> tuple:
    """What the native calls' views of the parameters depend on."""
    return tuple(None if t is None else (t.data_ptr(), t.shape, t.stride(), t.dtype)
                 for t in params)


def _check_unchanged(where: str, storage: tuple, params: LayerParams) -> bool:
    """Whether the parameters autograd saved are still on the storage the forward's
    views read (``storage``, the forward's :func:`_storage_of`). Raises where one has
    another shape or dtype (assigned through ``.data`` between the forward and the
    backward pass), which would make the native code read past its end."""
    now = _storage_of(params)
    if now == storage:
        return True
    for name, t, was in zip(params._fields, params, storage):
        if t is not None and (tuple(t.shape), t.dtype) != (tuple(was[1]), was[3]):
            raise RuntimeError(
                f"{where}: {name} changed from {list(was[1])} {was[3]} in the forward pass "
                f"to {list(t.shape)} {t.dtype} before its backward pass (assigned through "
                "`.data`?); run the forward pass again after changing a parameter"
            )
    return False


def _keep_forward_values(ctx, params: LayerParams) -> None:
    """What the backward pass reads of the parameters as the forward pass used them:
    aliases of their storage (a parameter assigned through ``.data`` since keeps its
    old storage here, as torch's own saved tensors do), and a copy of the threshold
    (but of the layer's own fill, ``layer_owned``, which nothing else changes), which is
    not saved for autograd's version check (torch's ops do not save it either: a
    threshold changed in place between the passes, a schedule between the chunks of one
    backward, still differentiates the forward pass that ran)."""
    # (beta and alpha are the layer's own clamped or filled copies, which no one else
    # holds; this runs on every call, so only the tensors a user can reassign are aliased)
    weight, bias, rec_weight, beta, threshold, alpha = params
    ctx.forward_params = LayerParams(
        weight.detach(), None if bias is None else bias.detach(),
        None if rec_weight is None else rec_weight.detach(), beta, threshold, alpha)
    ctx.threshold = threshold if threshold is None or getattr(
        threshold, "layer_owned", False) else threshold.clone()  # (no grad here)


def _forward_values(ctx, saved: LayerParams) -> Tuple[LayerParams, bool]:
    """The parameters for the backward call (the forward's values, _keep_forward_values)
    and whether they are on the storage of the forward's views (its call object can
    then be reused). ``saved``: the tensors autograd saved, checked for their shapes."""
    same_storage = _check_unchanged(ctx.cfg.name, ctx.param_storage,
                                    saved._replace(threshold=ctx.forward_params.threshold))
    params = saved if same_storage else ctx.forward_params
    return params._replace(threshold=ctx.threshold), same_storage


def _views_all(layer: _C.LayerCall, params: LayerParams) -> bool:
    """Whether ``layer`` reads every parameter through a view of its storage. A tensor
    that is not contiguous (a learned scalar expanded to every neuron, a transposed
    weight) or not of the dtype its field takes is copied instead: the copy does not
    follow the tensor's later changes, and the tensor's storage can be freed and its
    address reused by another tensor, so a call holding a copy cannot be kept."""
    return all(t is None
               or getattr(layer, name).__array_interface__["data"][0] == t.data_ptr()
               for name, t in zip(params._fields, params))


def _kept_call(cache: Optional[dict], key: tuple) -> Optional[_C.ForwardCall]:
    """The layer's forward call object of an earlier call made with ``key`` (its
    settings, plan, threads and parameter storage), taken out of ``cache`` while it is
    in use (so that a call from another thread builds its own), or None."""
    kept = None if cache is None else cache.pop("forward_call", None)
    if kept is None:
        return None
    (cfg, split, *rest), (kept_cfg, kept_split, *kept_rest) = key, kept[0]
    # the plan by identity (its arrays do not compare as a bool; the planner's cache
    # returns one object per plan, and the key holds it)
    same = split is kept_split and (cfg is kept_cfg or cfg == kept_cfg) and rest == kept_rest
    return kept[1] if same else None


@_float32
def _forward(cfg: LayerConfig, ctx, in_ids, in_counts, params: LayerParams, initial,
             keep_dense: bool, cache: Optional[dict]):
    """Runs the executor's forward on a checked input list; keeps what the backward
    needs of the call in ``ctx``, and the call object for the layer's next call in
    ``cache`` (a dict the layer keeps; None: nothing kept)."""
    T, B = in_ids.shape[:2]
    n_out, n_in = params.weight.shape
    # read before the dense input path allocates, which the budget then takes out
    budget = _memory.available_bytes() or 0
    threads, storage = threads_for(T, B, cfg.out_features), _storage_of(params)
    # A call's settings and parameter views (a dozen fields, each a conversion) are
    # those of the layer's last call where nothing they were made from changed: the
    # storage holds the parameters' addresses, which the kept views keep in use (a
    # call is kept only where it views every parameter: see _views_all).
    key = (cfg, ctx.split, threads, storage, keep_dense)
    call = None if initial is not None else _kept_call(cache, key)
    kept = call is not None
    if call is None:
        call = forward_call(cfg, ctx.split, threads, in_ids, in_counts, params, initial,
                            keep_dense, None, budget)
    else:
        layer = call.layer
        layer.in_ids, layer.in_counts = numpy_view(in_ids), numpy_view(in_counts)
        call.memory_budget = budget
    # The executor's scan of the input list and the backward's private copy of it (the
    # native backward indexes with the copy unchecked, and the user can reach the list
    # passed in: .data, .numpy()), taken as the sparse path repacks the list. Where the
    # input is dense enough for the GEMM, the call runs nothing and says so.
    call.copy_input = True
    call.dense_above = forward_dense_fraction(n_out) * T * B * n_in
    res = _C.layer_forward(call)
    dense_x = None
    if res.wants_dense:
        inputs = _PrivateList.of_input(in_ids, in_counts, n_in, n_out)
        dense_x = _dense_input(cfg.name, in_ids, in_counts, n_in, n_out)
        currents = _currents(dense_x, params.weight, T, B)
        call.copy_input = False
        call.input_currents = numpy_view(currents)
        if budget:  # the dense input and the currents are taken already
            call.memory_budget = max(1, budget - dense_x.nbytes - currents.nbytes)
        res = _C.layer_forward(call)
    else:
        inputs = _PrivateList.of_copy(in_ids, torch.from_numpy(res.input_ids),
                                      torch.from_numpy(res.input_counts), res.input_spikes,
                                      n_in, n_out)
    # for the backward call (backward_call's layer), with what it was built from; not
    # holding on to the input list (the backward takes its private copy) nor the currents
    layer = call.layer
    layer.in_ids = layer.in_counts = _NO_IDS
    call.input_currents = None
    if cache is not None and initial is None and (kept or _views_all(layer, params)):
        cache["forward_call"] = (key, call)
    ctx.layer_call, ctx.param_storage = layer, storage
    ctx.initial = initial
    ctx.inputs = inputs
    # the dense input, for dL/dW's GEMM
    ctx.dense_x = dense_x if params.weight.requires_grad else None
    return res, dense_x


def _tensor(array) -> Optional[torch.Tensor]:
    return None if array is None else torch.from_numpy(array)


class _Call(NamedTuple):
    """What a layer Function is called with besides the differentiable tensors, in one
    argument: autograd looks at every argument of ``apply``, and the input list's ids
    and counts are not differentiable (the lists' copies are the executor's)."""

    cfg: LayerConfig
    split: WorkSplit
    keep_dense: bool
    record: CallRecord
    cache: Optional[dict]
    in_ids: torch.Tensor
    in_counts: torch.Tensor
    initial: Optional[LayerState]


class _SpikingLayerFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _Call, in_values, weight, bias, rec_weight, beta, threshold, alpha):
        cfg, split, keep_dense, record, cache, in_ids, in_counts, initial = call
        ctx.cfg, ctx.split, ctx.record = cfg, split, record
        params = LayerParams(weight, bias, rec_weight, beta, threshold, alpha)
        res, dense_x = _forward(cfg, ctx, in_ids, in_counts, params, initial, keep_dense,
                                cache)
        ids, counts = torch.from_numpy(res.ids), torch.from_numpy(res.counts)
        first = res.overflow_at
        record.overflow = Overflow(res.spikes_dropped, res.eligible_dropped,
                                   None if first is None else tuple(int(v) for v in first))
        record.total_spikes = res.total_spikes
        record.capacity = ids.shape[-1]
        record.needed_capacity = res.needed_capacity
        record.eligible_listed = res.eligible_listed
        record.paths.update(path="sparse" if dense_x is None else "dense",
                            tiles=len(split.tile_starts) - 1,
                            sample_groups=split.sample_groups, plan_target=cfg.plan_target,
                            bucketed_steps=res.bucketed_steps)
        dense_membrane = _tensor(res.dense_membrane)
        # a copy: the user may edit what a layer recorded, and the backward reads the
        # forward's (saved for autograd, whose version check would refuse the edit)
        record.membrane = dense_membrane.clone() if cfg.record_membrane else None
        if cfg.return_state:
            record.final_state = LayerState(_tensor(res.final_membrane),
                                            _tensor(res.final_synaptic),
                                            _tensor(res.final_spikes))
        # the executor's private copy (as the input's, _forward): the user can reach the
        # list returned
        ctx.outputs = _PrivateList.from_forward(res)
        _keep_forward_values(ctx, params)
        ctx.save_for_backward(
            torch.from_numpy(res.membrane), dense_membrane, _tensor(res.dense_synaptic),
            # spikes past the capacity (overflow "drop"): they reset their neurons
            _tensor(res.dropped_ids), _tensor(res.dropped_counts),
            *params._replace(threshold=None),
        )
        ctx.mark_non_differentiable(ids, counts)
        # No zero "gradients" of ids and counts ([T, B, K] int32 each) for backward.
        ctx.set_materialize_grads(False)
        return torch.from_numpy(res.values), ids, counts

    @staticmethod
    def jvp(ctx, *tangents):
        no_forward_mode(ctx.cfg.name, "emulator")

    @staticmethod
    def backward(ctx, grad_values, _grad_ids, _grad_counts):
        cfg = ctx.cfg
        first_order_only(cfg.name, "emulator")
        unbatched_only(cfg.name, "emulator", grad_values)
        if grad_values is None:  # nothing downstream used the values
            return (None,) * 8
        (membrane, dense_membrane, dense_synaptic, dropped_ids, dropped_counts,
         *tensors) = ctx.saved_tensors
        params, same_storage = _forward_values(ctx, LayerParams(*tensors))
        need = ctx.needs_input_grad
        wants = dict(input=need[1], weight=need[2], bias=need[3], rec_weight=need[4],
                     beta=need[5], threshold=need[6], alpha=need[7])
        res, grad_in, grad_w = _backward(
            cfg, ctx, ctx.record, ctx.inputs, params, wants, same_storage, out=ctx.outputs,
            membrane=membrane, grad_out=grad_values, dense_membrane=dense_membrane,
            dense_synaptic=dense_synaptic, dropped_ids=dropped_ids,
            dropped_counts=dropped_counts)
        return (
            None, grad_in, grad_w,
            _tensor(res.grad_bias) if need[3] else None,
            _as(res.grad_rec_weight, params.rec_weight) if need[4] else None,
            _as(res.grad_beta, params.beta) if need[5] else None,
            _as(res.grad_threshold, params.threshold) if need[6] else None,
            _as(res.grad_alpha, params.alpha) if need[7] else None,
        )


class _ReadoutFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _Call, in_values, weight, bias, beta):
        cfg, split, _, record, cache, in_ids, in_counts, initial = call
        ctx.cfg, ctx.split, ctx.record = cfg, split, record
        params = LayerParams(weight, bias, None, beta, None, None)
        res, dense_x = _forward(cfg, ctx, in_ids, in_counts, params, initial, False, cache)
        record.paths.update(path="sparse" if dense_x is None else "dense",
                            bucketed_steps=res.bucketed_steps)
        membrane = torch.from_numpy(res.membrane)
        record.membrane = membrane.detach() if cfg.record_membrane else None
        if cfg.return_state:
            record.final_state = LayerState(membrane[-1].clone(), None, None)
        _keep_forward_values(ctx, params)
        ctx.save_for_backward(membrane, weight, bias, beta)
        return membrane

    @staticmethod
    def jvp(ctx, *tangents):
        no_forward_mode(ctx.cfg.name, "emulator")

    @staticmethod
    def backward(ctx, grad_membrane):
        cfg = ctx.cfg
        first_order_only(cfg.name, "emulator")
        unbatched_only(cfg.name, "emulator", grad_membrane)
        membrane, weight, bias, beta = ctx.saved_tensors
        params, same_storage = _forward_values(
            ctx, LayerParams(weight, bias, None, beta, None, None))
        need = ctx.needs_input_grad
        wants = dict(input=need[1], weight=need[2], bias=need[3], rec_weight=False,
                     beta=need[4], threshold=False, alpha=False)
        res, grad_in, grad_w = _backward(cfg, ctx, ctx.record, ctx.inputs, params, wants,
                                         same_storage, membrane=membrane,
                                         grad_out=grad_membrane)
        return (
            None, grad_in, grad_w,
            _tensor(res.grad_bias) if need[3] else None,
            _as(res.grad_beta, beta) if need[4] else None,
        )


def _check_inputs(where: str, spikes: SparseSpikes, params: LayerParams) -> None:
    for t in (spikes.values, *params):
        if t is not None and not t.is_cpu:
            raise ValueError(f"the emulator backend runs on the CPU; got a tensor on {t.device}")
    for w in (params.weight, params.rec_weight):
        if w is not None and w.dtype not in (torch.float32, torch.float16):
            raise TypeError(
                f"{where}: the emulator backend takes float32 or float16 weights, got "
                f"{w.dtype} (convert the model with .float() or .half(); the reference "
                "backend runs bfloat16 and float64 weights too)"
            )


class _Named:
    """The executor's argument errors (a bad input list, ...) and its memory budget
    name where they came from. (A class: contextlib's generator form costs several
    times more, and this wraps every layer call.)"""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if kind is not None and issubclass(kind, ValueError):
            raise ValueError(f"{self.where}: {exc}") from exc
        if kind is not None and issubclass(kind, _C.MemoryBudgetExceeded):
            raise MemoryError(f"{self.where}: {exc}; {MEMORY_ADVICE}") from None
        return False


def _preflight_bytes(cfg: LayerConfig, spikes: SparseSpikes, keep_dense: bool) -> int:
    """What the call allocates whatever its activity (_memory.layer_call_bytes)."""
    lists_everyone = cfg.spiking and math.isinf(cfg.window)
    dense_state = 0
    if keep_dense or not cfg.spiking:
        dense_state = 2 if cfg.model == "synaptic" else 1
    return _memory.layer_call_bytes(
        spikes.num_steps, spikes.batch_size, cfg.out_features, cfg.capacity, lists_everyone,
        dense_state)


def _planned(cfg: LayerConfig, spikes: SparseSpikes, weight: torch.Tensor, keep_dense: bool,
             cache: Optional[dict]) -> WorkSplit:
    """The call's plan, after the memory pre-flight; the plan and the bytes the
    pre-flight needs are kept in ``cache`` for the layer's next call of that config and
    shape (the free memory is read again every time)."""
    key = (cfg, spikes.ids.shape, weight.element_size(), keep_dense)
    kept = None if cache is None else cache.get("plan")
    if kept is not None and kept[0] == key:
        split, needed = kept[1]
    else:
        split = _plan(cfg, spikes, weight)
        needed = _preflight_bytes(cfg, spikes, keep_dense)
        if cache is not None:
            cache["plan"] = (key, (split, needed))
    _memory.require(cfg.name, needed, MEMORY_ADVICE)
    return split


def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[SparseSpikes, CallRecord]:
    _check_inputs(cfg.name, spikes, params)
    # Learned decays need the dense state history in backward; decided here because
    # Function.forward always runs with grad disabled.
    keep_dense = cfg.record_membrane or (torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (params.beta, params.alpha)))
    split = _planned(cfg, spikes, params.weight, keep_dense, cache)
    record = CallRecord("emulator", spikes.num_steps, spikes.batch_size, cfg.out_features)
    with _Named(cfg.name):
        values, ids, counts = _SpikingLayerFn.apply(
            _Call(cfg, split, keep_dense, record, cache, spikes.ids, spikes.counts, initial),
            spikes.values, *params)
    return SparseSpikes._made(ids, counts, cfg.out_features, values), record


def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[torch.Tensor, CallRecord]:
    _check_inputs(cfg.name, spikes, params)
    split = _planned(cfg, spikes, params.weight, False, cache)
    record = CallRecord("emulator", spikes.num_steps, spikes.batch_size, cfg.out_features)
    with _Named(cfg.name):
        out = _ReadoutFn.apply(
            _Call(cfg, split, False, record, cache, spikes.ids, spikes.counts, initial),
            spikes.values, params.weight, params.bias, params.beta)
    return out, record


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
    _check_inputs("spike_matmul", spikes, LayerParams(weight, None, None, weight, None, None))
    split = work_split_for(
        weight.shape[1], weight.shape[0], spikes.batch_size, spikes.num_steps,
        capacity_in=spikes.capacity, capacity_out=weight.shape[0],
        weight_bytes=weight.element_size(), target=plan_target,
    )
    with _Named("spike_matmul"):
        currents, seconds, adds = _C.spike_matmul(
            split.tile_starts, numpy_view(spikes.ids), numpy_view(spikes.counts),
            numpy_view(weight), get_num_threads(), split.sample_groups)
    return torch.from_numpy(currents), float(seconds), int(adds)
