"""The triton backend: the sparse forward and backward passes as Triton kernels for
NVIDIA GPUs (:mod:`.triton_kernels`; docs/gpu.md).

One autograd Function per layer kind over the kernels, as the emulator has over its
executor: the forward pass adds weight rows for the listed input spikes of all T * B
rows at once, runs the neuron update over time (neuron-parallel for a feed-forward
layer, then every row's list at once; one program per sample for a recurrent layer, the
step's list made inside it); the backward pass runs BPTT from the listed entries, then
the weight gradient as outer products of the lists and the input gradient at the listed
inputs alone. No Python loop runs over timesteps.

CUDA tensors run the compiled kernels. CPU tensors run the same kernels through
Triton's interpreter (slowly: for the tests) where ``TRITON_INTERPRET=1`` is set;
otherwise a CPU tensor is refused with that advice.

What the layer gets back is what the emulator gives (the contract,
:mod:`.contract`): the same lists, the same overflow record (the kernels count every
entry a list needed, so an overflow is known, never silent) and the same state.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
from typing import Optional, Tuple

import torch

from ..lists import capacity_and_overflow, listed_mask, listed_only
from ..spikes import SparseSpikes
from .autograd_limits import first_order_only, no_forward_mode, unbatched_only
from .contract import CallRecord, LayerConfig, LayerParams, LayerState
from .emulator import _forward_values, _keep_forward_values, _storage_of

__all__ = ["available", "spiking_layer", "readout_layer", "kernels"]

_WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Where the list of a backward pass's input side holds more than this fraction of all
# input rows (exact gradients list every neuron), one GEMM on dL/dI (tensor cores, dense)
# replaces the gather-dot / outer-product kernels, whose reads of weight rows then cost
# as much as the GEMM's without its reuse. An estimate from the kernels' bytes per entry
# against a GEMM's (docs/gpu.md), not a measurement: the switch itself is not yet timed.
DENSE_FRACTION = 0.2

# Off: on an H100 (docs/gpu.md, "Measured on an H100") the per-sample kernels of recurrent
# layers gave gradients that differ from the reference's at a few neurons in some
# configurations (tests/test_triton_cuda.py reproduces them), where Triton's interpreter
# agrees with the reference; a wrong gradient would be silent, so a recurrent layer on
# CUDA is refused until that is found and fixed. backend="auto" runs such a layer on the
# dense reference backend instead. The interpreter (CPU tensors) still runs them.
RECURRENT_ON_CUDA = False


def available() -> bool:
    """Whether Triton can be imported (``pip install snn-ipu[gpu]``)."""
    return importlib.util.find_spec("triton") is not None


def kernels():
    """The kernel module, imported on first use (Triton takes a second to import)."""
    if not available():
        raise ImportError("the triton backend needs Triton: pip install 'snn-ipu[gpu]' "
                          "(or pip install triton)")
    from . import triton_kernels

    return triton_kernels


def _interpreter_on() -> bool:
    """Whether CPU tensors may run the kernels through Triton's interpreter: with
    ``TRITON_INTERPRET=1`` set (read at each call), or any value Triton itself reads as
    on (``true``, ``on``, ``yes``, in any case), so that ``TRITON_INTERPRET=false``
    refuses CPU tensors here as Triton leaves its interpreter off."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def _check_inputs(where: str, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState]) -> torch.device:
    for w in (params.weight, params.rec_weight):
        if w is not None and w.dtype not in _WEIGHT_DTYPES:
            raise TypeError(
                f"{where}: the triton backend takes float32, float16 or bfloat16 weights, "
                f"got {w.dtype} (the reference backend runs float64)")
    device = spikes.ids.device
    tensors = [spikes.counts, spikes.values, *params]
    if initial is not None:
        tensors += list(initial)
    for t in tensors:
        if t is not None and t.device != device:
            raise ValueError(f"{where}: the triton backend needs every tensor on one device; "
                             f"the input list is on {device}, a parameter or state on {t.device}")
    if device.type == "cpu":
        if not _interpreter_on():
            raise ValueError(
                f"{where}: the triton backend runs on CUDA tensors, got CPU tensors (Triton's "
                "interpreter runs it on the CPU, slowly, for tests, with TRITON_INTERPRET=1 "
                "set); on a CPU use backend='emulator'")
    elif device.type != "cuda":
        raise ValueError(f"{where}: the triton backend runs on CUDA tensors, got {device}")
    return device


def _check_list(where: str, ids: torch.Tensor, counts: torch.Tensor, n_in: int) -> None:
    """The counts and ids of an input list, on its device, checked before any kernel or
    torch op indexes with them: a list edited after it was made or validated raises
    here, not out of bounds on the GPU (a device-side assert, which ends the process's
    CUDA context). Every id, the padding past ``counts[..., 1]`` too, as the reference
    checks them: the kernels read listed ids alone, but the backward pass's dense paths
    (``_input_grads``) gather and scatter at every id."""
    T, B, K = ids.shape
    c0, c1 = counts[..., 0], counts[..., 1]
    bad_counts = (c0 < 0) | (c1 < c0) | (c1 > K)
    bad_ids = (ids < 0) | (ids >= n_in)
    if not bool(bad_counts.any() | bad_ids.any()):
        return
    if bool(bad_counts.any()):
        t, b = (int(i) for i in bad_counts.nonzero()[0])
        raise ValueError(f"{where}: input list counts {counts[t, b].tolist()} at t={t}, "
                         f"b={b} must satisfy 0 <= spikes <= listed and not exceed capacity {K}")
    t, b, k = (int(i) for i in bad_ids.nonzero()[0])
    padding = "" if k < int(c1[t, b]) else (
        " (padding past counts[..., 1]: pad with a valid id such as 0)")
    raise ValueError(f"{where}: input list id {int(ids[t, b, k])} at t={t}, b={b}, k={k} out "
                     f"of range [0, {n_in}){padding}")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _transposed(w: torch.Tensor) -> torch.Tensor:
    """``W.T`` contiguous: the kernels read a listed id's row of it in one coalesced load."""
    return w.detach().t().contiguous()


def _currents(in_ids, in_counts, wt: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """W x[t] + b for every (t, b) row at once: [T, B, out] float32."""
    k = kernels()
    T, B, K = in_ids.shape
    N = wt.shape[1]
    out = torch.empty(T, B, N, dtype=torch.float32, device=wt.device)
    opts = k.launch_options(k.spike_matmul_kernel, interpreted=wt.device.type == "cpu")
    k.spike_matmul_kernel[(T * B, _cdiv(N, opts["BLOCK_N"]))](
        in_ids, in_counts, wt, out if bias is None else bias.detach().float().contiguous(), out,
        K, N, int(bias is not None), **opts)
    return out


@contextlib.contextmanager
def _float32_matmuls():
    """Autocast off: the dense paths' and the carried state's matmuls in float32, as the
    kernels sum (under a user's autocast they would run in bfloat16/float16, and the
    gradient's precision would depend on which path the list's density takes)."""
    with contextlib.ExitStack() as stack:
        for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
            stack.enter_context(torch.autocast(device_type=device, enabled=False))
        yield


@_float32_matmuls()
def _input_grads(need_in: bool, need_w: bool, in_ids, in_counts, values_dtype: torch.dtype,
                 di: torch.Tensor, weight: torch.Tensor, paths: dict):
    """dL/d(input values) at the listed inputs, and dL/dW from the input spikes, from
    dL/dI [T, B, out]: by the list kernels, or by one GEMM on dL/dI where the list holds
    more than :data:`DENSE_FRACTION` of all input rows (exact gradients list them all).
    The path taken goes into ``paths``."""
    k = kernels()
    T, B, K = in_ids.shape
    N = di.shape[-1]
    n_in = weight.shape[1]
    rows = max(1, T * B * n_in)
    spikes, listed = in_counts.sum((0, 1), dtype=torch.int64).tolist()
    # Under torch.use_deterministic_algorithms the weight gradient takes the GEMM: the
    # outer-product kernel sums with float32 atomics, in an order that varies from run to
    # run on a GPU.
    dense_in, dense_w = need_in and listed > DENSE_FRACTION * rows, \
        need_w and (spikes > DENSE_FRACTION * rows or torch.are_deterministic_algorithms_enabled())
    grad_in = grad_w = None
    if dense_in:
        g_x = (di.reshape(T * B, N) @ weight.float()).reshape(T, B, n_in)
        grad_in = listed_only(torch.gather(g_x, -1, in_ids.long()), in_counts)
    elif need_in:
        grad_in = torch.zeros(T, B, K, dtype=torch.float32, device=di.device)
        opts = k.launch_options(k.spike_gather_dot_kernel, interpreted=di.device.type == "cpu")
        k.spike_gather_dot_kernel[(T * B, _cdiv(K, opts["BLOCK_K"]))](
            in_ids, in_counts, di, _transposed(weight), grad_in, K, N, **opts)
    if grad_in is not None:
        grad_in = grad_in.to(values_dtype)
    if dense_w:
        grad_w = _outer_dense(in_ids, in_counts, di, n_in).to(weight.dtype)
    elif need_w:
        grad_w = _outer(in_ids, in_counts, di, n_in).t().to(weight.dtype)
    for side, need, dense in (("input", need_in, dense_in), ("weight", need_w, dense_w)):
        paths[f"{side}_grad_path"] = "none" if not need else "dense" if dense else "sparse"
    return grad_in, grad_w


def _outer_dense(ids: torch.Tensor, counts: torch.Tensor, di: torch.Tensor,
                 n_in: int) -> torch.Tensor:
    """:func:`_outer`'s sum, transposed ([out, n_in] float32), as one GEMM of ``di`` with
    the list's spikes made dense: no atomics, so the same bits on every run (a scatter_add_
    of distinct ids per row, and of zeros at the padding, is exact in any order)."""
    K = ids.shape[-1]
    R = ids.numel() // max(K, 1)
    x = torch.zeros(R, n_in, dtype=torch.float32, device=di.device).scatter_add_(
        1, ids.long().reshape(R, K), listed_mask(counts.long(), K, 0).float().reshape(R, K))
    return di.reshape(R, di.shape[-1]).t() @ x


def _outer(ids: torch.Tensor, counts: torch.Tensor, di: torch.Tensor, n_in: int) -> torch.Tensor:
    """sum over rows r and spikes j of row r of di[r] as row j: [n_in, out] float32, by
    float32 atomics (their order of summation varies on a GPU)."""
    k = kernels()
    K = ids.shape[-1]
    N = di.shape[-1]
    R = ids.numel() // max(K, 1)
    dwt = torch.zeros(n_in, N, dtype=torch.float32, device=di.device)
    if R == 0:
        return dwt
    opts = k.launch_options(k.spike_outer_kernel, interpreted=di.device.type == "cpu")
    rows_per_program = max(1, _cdiv(R, 1024))
    k.spike_outer_kernel[(_cdiv(R, rows_per_program), _cdiv(N, opts["BLOCK_N"]))](
        ids, counts, di, dwt, R, K, N, rows_per_program, **opts)
    return dwt


def _scan_capacity(cfg: LayerConfig) -> int:
    """The capacity of the lists a recurrent layer's scan writes while it runs: the
    layer's under ``drop`` (what the list keeps is what is fed back), else room for every
    neuron (the recurrent input is every spike), cut to the final capacity after."""
    if cfg.capacity is not None and cfg.overflow == "drop":
        return cfg.capacity
    return cfg.out_features


class _SpikingLayerFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg, record, keep_dense, in_ids, in_counts, in_values, weight, bias,
                rec_weight, beta, threshold, alpha, initial):
        k = kernels()
        T, B, _ = in_ids.shape
        N = cfg.out_features
        dev = in_ids.device
        params = LayerParams(weight, bias, rec_weight, beta, threshold, alpha)
        wt = _transposed(weight)
        cur = _currents(in_ids, in_counts, wt, bias)
        zeros = torch.zeros(B, N, dtype=torch.float32, device=dev)
        u = zeros.clone() if initial is None else initial.membrane.float().clone()
        syn = zeros.clone() if initial is None or initial.synaptic is None else \
            initial.synaptic.float().clone()
        s = zeros.clone() if initial is None else initial.spikes.float().clone()
        u0, syn0, s0 = u.clone(), syn.clone(), s.clone()
        vt = _transposed(rec_weight) if cfg.recurrent else None
        r_init = None
        if cfg.recurrent and initial is not None:
            # step -1's list: the state's spikes, the lowest-numbered ones under "drop"
            r_init = (s0 > 0)
            if cfg.capacity is not None and cfg.overflow == "drop":
                from .reference import _keep_first

                r_init, _ = _keep_first(r_init, torch.zeros_like(r_init), cfg.capacity)
            r_init = r_init.float()
            with _float32_matmuls():
                cur[0] += r_init @ vt.float()
        flags = torch.empty(T, B, N, dtype=torch.uint8, device=dev)
        dense_syn = torch.empty(T, B, N, device=dev) if keep_dense and alpha is not None \
            else zeros
        beta_, thr_ = beta.detach().float().contiguous(), threshold.detach().float().contiguous()
        alpha_ = (alpha if alpha is not None else beta).detach().float().contiguous()
        model = (int(cfg.model == "synaptic"), _reset_code(cfg.reset), cfg.window)
        cpu = dev.type == "cpu"
        if cfg.recurrent:
            # one program per sample: the step's list feeds the next step
            KS = _scan_capacity(cfg)
            ids = torch.zeros(T, B, KS, dtype=torch.int32, device=dev)
            counts = torch.zeros(T, B, 2, dtype=torch.int32, device=dev)
            need = torch.zeros(T, B, 2, dtype=torch.int32, device=dev)
            mem = torch.zeros(T, B, KS, dtype=torch.float32, device=dev)
            dense_u = torch.empty(T, B, N, device=dev) if keep_dense else zeros
            opts = k.launch_options(k.neuron_scan_kernel, RECURRENT=True, interpreted=cpu)
            k.neuron_scan_kernel[(B,)](
                cur, vt, beta_, thr_, alpha_, u, syn, s, ids, counts, need, mem, flags,
                dense_u, dense_syn, T, B, N, KS, *model, int(keep_dense), **opts)
        else:
            # every neuron on its own over time, then every row's list at once
            dense_u = torch.empty(T, B, N, device=dev)
            opts = k.launch_options(k.neuron_scan_ff_kernel, interpreted=cpu)
            k.neuron_scan_ff_kernel[(B, _cdiv(N, opts["BLOCK_N"]))](
                cur, beta_, thr_, alpha_, u, syn, s, flags, dense_u, dense_syn, T, B, N, *model,
                int(keep_dense), **opts)
            need = torch.stack([(flags & 1).sum(-1, dtype=torch.int32),
                                (flags != 0).sum(-1, dtype=torch.int32)], -1)

        # the list's capacity and overflow, from what every row needed
        n_spk, needed = need[..., 0].reshape(-1), need[..., 1].reshape(-1)
        total, max_needed = torch.stack([n_spk.sum(), needed.max()]).tolist()
        K, record.overflow = capacity_and_overflow(n_spk, needed, max_needed, cfg.capacity,
                                                   cfg.overflow, B)
        if cfg.recurrent:
            ids, mem = ids[..., :K].contiguous(), mem[..., :K].contiguous()
            counts = need.clamp(max=K).to(torch.int32)
        else:
            ids = torch.zeros(T, B, K, dtype=torch.int32, device=dev)
            mem = torch.zeros(T, B, K, dtype=torch.float32, device=dev)
            counts = torch.empty(T, B, 2, dtype=torch.int32, device=dev)
            opts = k.launch_options(k.list_compact_kernel, interpreted=cpu)
            k.list_compact_kernel[(T * B,)](flags, dense_u, ids, counts, need, mem, N, K, **opts)
            if not keep_dense:
                dense_u = zeros  # the backward pass needs it only for learned decays
        values = listed_mask(counts.long(), K, 0).float()
        record.total_spikes = int(total)
        record.capacity = K
        record.needed_capacity = int(max_needed)
        record.eligible_listed = int((counts[..., 1] - counts[..., 0]).sum())
        record.paths.update(path="sparse")
        # a copy, as the emulator's: the backward reads the forward's (saved for autograd)
        record.membrane = dense_u.clone() if cfg.record_membrane else None
        if cfg.return_state:
            record.final_state = LayerState(u, syn if cfg.model == "synaptic" else None, s)
        ctx.cfg, ctx.record, ctx.keep_dense = cfg, record, keep_dense
        ctx.param_storage = _storage_of(params)
        ctx.r_init = r_init
        ctx.values_dtype = in_values.dtype
        # private copies of the input list: the kernels index with it unchecked
        _keep_forward_values(ctx, params)
        ctx.save_for_backward(in_ids.clone(), in_counts.clone(), ids, counts, mem, flags,
                              dense_u, dense_syn, u0, syn0, s0,
                              *params._replace(threshold=None))
        ctx.mark_non_differentiable(ids, counts)
        ctx.set_materialize_grads(False)
        return values, ids, counts

    @staticmethod
    def jvp(ctx, *tangents):
        no_forward_mode(ctx.cfg.name, "triton")

    @staticmethod
    def backward(ctx, grad_values, _grad_ids, _grad_counts):
        cfg = ctx.cfg
        first_order_only(cfg.name, "triton")
        unbatched_only(cfg.name, "triton", grad_values)
        if grad_values is None:
            return (None,) * 13
        k = kernels()
        (in_ids, in_counts, ids, counts, mem, flags, dense_u, dense_syn, u0, syn0, s0,
         *tensors) = ctx.saved_tensors
        params, _ = _forward_values(ctx, LayerParams(*tensors))
        need = ctx.needs_input_grad
        T, B, K = ids.shape
        N = cfg.out_features
        dev = ids.device
        synaptic = cfg.model == "synaptic"
        decay_grads = bool(need[9] or need[11]) and ctx.keep_dense
        row = torch.zeros(B, N, dtype=torch.float32, device=dev)
        di = torch.empty(T, B, N, dtype=torch.float32, device=dev)
        dthr, dbeta, dalpha = row.clone(), row.clone(), row.clone()
        beta_ = params.beta.detach().float().contiguous()
        alpha_ = (params.alpha if synaptic else params.beta).detach().float().contiguous()
        thr_ = params.threshold.detach().float().contiguous()
        model = (int(synaptic), _reset_code(cfg.reset))
        cpu = dev.type == "cpu"
        sg = cfg.surrogate
        if cfg.recurrent:
            # one program per sample: dL/dI[t] reaches the entries listed at t-1
            gsrc, cu, csyn = row.clone(), row.clone(), row.clone()
            recg = torch.zeros(B, max(K, 1), dtype=torch.float32, device=dev)
            opts = k.launch_options(k.neuron_scan_backward_kernel, RECURRENT=True,
                                    interpreted=cpu)
            k.neuron_scan_backward_kernel[(B,)](
                grad_values.float().contiguous(), ids, counts, mem, flags, s0, u0, syn0,
                dense_u, dense_syn, _transposed(params.rec_weight), beta_, thr_, alpha_,
                di, gsrc, cu, csyn, recg, dthr, dbeta, dalpha, T, B, N, K, *model, sg.kind,
                *surrogate_constants(sg), int(decay_grads), **opts)
        else:
            # the surrogate at the listed entries (O(listed), the surrogate's one Python
            # definition), scattered; then every neuron on its own back in time
            ids_l = ids.long().reshape(T * B, K)
            x = mem.reshape(T * B, K) - thr_[ids_l]
            gd = listed_only(grad_values.float() * sg.derivative(x).reshape(T, B, K), counts)
            gu = torch.zeros(T * B, N, dtype=torch.float32, device=dev).scatter_add_(
                1, ids_l, gd.reshape(T * B, K))
            opts = k.launch_options(k.state_grad_ff_kernel, interpreted=cpu)
            k.state_grad_ff_kernel[(B, _cdiv(N, opts["BLOCK_N"]))](
                gu, flags, s0, u0, syn0, dense_u, dense_syn, beta_, alpha_, di, dthr, dbeta,
                dalpha, T, B, N, *model, int(decay_grads), **opts)
        grad_in, grad_w = _input_grads(need[5], need[6], in_ids, in_counts, ctx.values_dtype,
                                       di, params.weight, ctx.record.paths)
        grad_v = None
        if need[8]:
            with _float32_matmuls():
                if torch.are_deterministic_algorithms_enabled():  # (as _input_grads' dW)
                    dvt = _outer_dense(ids[:-1], counts[:-1], di[1:], N).t()
                else:
                    dvt = _outer(ids[:-1], counts[:-1], di[1:], N)
                if ctx.r_init is not None:
                    dvt += ctx.r_init.t() @ di[0]
            grad_v = dvt.t().to(params.rec_weight.dtype)
        return (
            None, None, None, None, None, grad_in, grad_w,
            di.sum((0, 1)).to(params.bias.dtype) if need[7] else None,
            grad_v,
            dbeta.sum(0).to(params.beta.dtype) if need[9] else None,
            dthr.sum(0).to(params.threshold.dtype) if need[10] else None,
            dalpha.sum(0).to(params.alpha.dtype) if need[11] else None,
            None,
        )


class _ReadoutFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg, record, in_ids, in_counts, in_values, weight, bias, beta, initial):
        k = kernels()
        T, B, _ = in_ids.shape
        N = cfg.out_features
        membrane = _currents(in_ids, in_counts, _transposed(weight), bias)
        u0 = torch.zeros(B, N, dtype=torch.float32, device=in_ids.device) if initial is None \
            else initial.membrane.float().contiguous()
        opts = k.launch_options(k.readout_scan_kernel, interpreted=membrane.device.type == "cpu")
        k.readout_scan_kernel[(B, _cdiv(N, opts["BLOCK_N"]))](
            membrane, beta.detach().float().contiguous(), u0, T, B, N, **opts)
        record.paths["path"] = "sparse"
        record.membrane = membrane.detach() if cfg.record_membrane else None
        if cfg.return_state:
            record.final_state = LayerState(membrane[-1].clone(), None, None)
        ctx.cfg, ctx.record = cfg, record
        ctx.param_storage = _storage_of(LayerParams(weight, bias, None, beta, None, None))
        ctx.values_dtype = in_values.dtype
        _keep_forward_values(ctx, LayerParams(weight, bias, None, beta, None, None))
        ctx.save_for_backward(in_ids.clone(), in_counts.clone(), membrane, u0, weight, bias,
                              beta)
        return membrane

    @staticmethod
    def jvp(ctx, *tangents):
        no_forward_mode(ctx.cfg.name, "triton")

    @staticmethod
    def backward(ctx, grad_membrane):
        cfg = ctx.cfg
        first_order_only(cfg.name, "triton")
        unbatched_only(cfg.name, "triton", grad_membrane)
        k = kernels()
        in_ids, in_counts, membrane, u0, weight, bias, beta = ctx.saved_tensors
        params, _ = _forward_values(ctx, LayerParams(weight, bias, None, beta, None, None))
        weight, bias, beta = params.weight, params.bias, params.beta
        need = ctx.needs_input_grad
        T, B, N = membrane.shape
        di = torch.empty_like(membrane)
        dbeta = torch.zeros(B, N, dtype=torch.float32, device=membrane.device)
        opts = k.launch_options(k.readout_scan_backward_kernel,
                                interpreted=membrane.device.type == "cpu")
        k.readout_scan_backward_kernel[(B, _cdiv(N, opts["BLOCK_N"]))](
            grad_membrane.float().contiguous(), membrane, u0,
            beta.detach().float().contiguous(), di, dbeta, T, B, N, **opts)
        grad_in, grad_w = _input_grads(need[4], need[5], in_ids, in_counts, ctx.values_dtype,
                                       di, weight, ctx.record.paths)
        return (
            None, None, None, None, grad_in, grad_w,
            di.sum((0, 1)).to(bias.dtype) if need[6] else None,
            dbeta.sum(0).to(beta.dtype) if need[7] else None,
            None,
        )


def _reset_code(reset: str) -> int:
    from .._codes import RESETS

    return RESETS[reset]


def surrogate_constants(sg) -> Tuple[float, float]:
    """The two float32 constants the kernels' surrogate takes (``_surrogate``): ATan's
    ``alpha / 2`` and ``pi / 2 * alpha`` as the reference computes them, the others'
    parameters as they are."""
    from .._codes import SURROGATES

    if sg.kind == SURROGATES["atan"]:
        return sg.alpha / 2, math.pi / 2 * sg.alpha
    return sg.params


def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[SparseSpikes, CallRecord]:
    device = _check_inputs(cfg.name, spikes, params, initial)
    if cfg.recurrent and device.type == "cuda" and not RECURRENT_ON_CUDA:
        raise NotImplementedError(
            f"{cfg.name}: the triton backend's recurrent kernels are off on CUDA: on an H100 "
            "their gradients differed from the reference's (docs/gpu.md); run this layer "
            "with backend='reference' (backend='auto' does), or make it feed-forward")
    _check_list(cfg.name, spikes.ids, spikes.counts, cfg.in_features)
    # Learned decays need the dense state history in backward (as on the emulator).
    keep_dense = cfg.record_membrane or (torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (params.beta, params.alpha)))
    record = CallRecord("triton", spikes.num_steps, spikes.batch_size, cfg.out_features)
    values, ids, counts = _SpikingLayerFn.apply(
        cfg, record, keep_dense, spikes.ids.contiguous(), spikes.counts.contiguous(),
        spikes.values, *params, initial)
    return SparseSpikes._made(ids, counts, cfg.out_features, values), record


def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[torch.Tensor, CallRecord]:
    _check_inputs(cfg.name, spikes, params, initial)
    _check_list(cfg.name, spikes.ids, spikes.counts, cfg.in_features)
    record = CallRecord("triton", spikes.num_steps, spikes.batch_size, cfg.out_features)
    out = _ReadoutFn.apply(cfg, record, spikes.ids.contiguous(), spikes.counts.contiguous(),
                           spikes.values, params.weight, params.bias, params.beta, initial)
    return out, record
