"""Dense PyTorch implementation of the numerics contract (docs/numerics.md): the
ground truth of the tests.

Everything is dense [T, B, N] autograd; nothing here is fast. The only sparse
step is the last one, listing the output spikes and eligible neurons, so that
the result has the same format (and the same gradient paths) as the emulator.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Optional, Tuple

import torch

from .. import _memory
from .._devices import autocast_enabled, values_readable
from ..lists import listed_only, lists_by_rank, lists_from_masks
from ..spikes import SparseSpikes
from .contract import CallRecord, LayerConfig, LayerParams, LayerState

__all__ = ["spiking_layer", "readout_layer", "spike"]


def _outside_autocast(device: str):
    """A region with the device's autocast off where it is on (entering one costs more
    than many a small op); meta tensors (a traced graph) have none."""
    if device not in ("cpu", "cuda") or not autocast_enabled(device):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, enabled=False)


def _without_autocast(fn):
    """The layer in its own precision whatever autocast region the model runs in, as the
    other backends (whose kernels and native code sum in float32): the ground truth
    must not take the user's bfloat16 where they do not."""
    @functools.wraps(fn)
    def run(cfg, spikes, *args, **kwargs):
        with _outside_autocast(spikes.values.device.type):
            return fn(cfg, spikes, *args, **kwargs)
    return run


class _Matmul(torch.autograd.Function):
    """``a @ b`` (2-D) whose backward runs outside autocast too. autograd's own mm
    backward runs in the autocast state of the ``backward()`` call: a backward inside
    the user's bfloat16 region took the layer's gradients in bfloat16, where the forward
    (``_without_autocast``) and the other backends' backward passes are float32."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        ctx.save_for_forward(a, b)
        return a @ b

    @staticmethod
    def jvp(ctx, ta, tb):
        # carries a tangent on to the layer's spikes, which refuse forward mode by name
        a, b = ctx.saved_tensors
        out = None if ta is None else ta @ b
        if tb is not None:
            out = a @ tb if out is None else out + a @ tb
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad[:2]
        with _outside_autocast(grad.device.type):  # (recorded under create_graph=True)
            return grad @ b.t() if need_a else None, a.t() @ grad if need_b else None


class _Spike(torch.autograd.Function):
    """Heaviside forward, surrogate derivative (only where ``near``) backward."""

    @staticmethod
    def forward(ctx, x, surrogate, near):
        ctx.save_for_backward(x, near)
        ctx.surrogate = surrogate
        return (x > 0).to(x.dtype)

    @staticmethod
    def jvp(ctx, *tangents):
        # torch's own message ("You must implement the jvp function for custom
        # autograd.Function") named no layer or cause
        raise RuntimeError(
            "snn_ipu's spiking layers have no forward-mode gradients "
            "(torch.autograd.forward_ad): the surrogate derivative is defined for the "
            "backward pass; use loss.backward() or torch.autograd.grad")

    @staticmethod
    def backward(ctx, grad):
        x, near = ctx.saved_tensors
        # Selected, not masked by a product: an infinite gradient outside the window
        # gives 0 there, as on the emulator, which never reads it, not inf * 0 = NaN.
        return torch.where(near, grad * ctx.surrogate.derivative(x), grad.new_zeros(())), \
            None, None


def spike(x: torch.Tensor, surrogate, near: Optional[torch.Tensor] = None) -> torch.Tensor:
    """S = H(x) with ``surrogate``'s derivative where ``near`` (bool, like ``x``;
    None: everywhere)."""
    return _Spike.apply(x, surrogate, torch.ones_like(x, dtype=torch.bool) if near is None
                        else near)


def _keep_first(
    spikes: torch.Tensor, eligible: torch.Tensor, capacity: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The entries of one step's [B, N] list that fit: spikes first, each ascending."""
    spk_rank = torch.cumsum(spikes.int(), -1) - 1
    only = eligible & ~spikes
    only_rank = spikes.sum(-1, keepdim=True) + torch.cumsum(only.int(), -1) - 1
    return spikes & (spk_rank < capacity), only & (only_rank < capacity)


def _compute_dtype(weight: torch.Tensor) -> torch.dtype:
    """float32 for the layers' float32 and float16 weights; float64 weights (a layer
    converted with ``.double()``, as the tests' float64 yardstick) compute in float64."""
    return torch.float64 if weight.dtype == torch.float64 else torch.float32


# Bytes of the dense autograd graph per neuron-step, a lower bound (measured 40-80: the
# membrane, spikes, masks and surrogate inputs of every step are kept for backward).
_GRAPH_BYTES_PER_NEURON_STEP = 32


def _preflight(cfg: LayerConfig, spikes: SparseSpikes) -> None:
    T, B, _ = spikes.dense_shape
    _memory.require(cfg.name, T * B * cfg.out_features * _GRAPH_BYTES_PER_NEURON_STEP,
                    "the reference backend keeps every neuron-step of the call (dense); run "
                    "fewer timesteps T or samples B per call, or use backend='emulator'")


def _input_current(spikes: SparseSpikes, weight, bias, where: str) -> torch.Tensor:
    if values_readable(spikes.ids, spikes.counts):
        # The emulator's native scan of every call, here in torch: a list edited in
        # place after its check (counts past K, negative, out-of-range ids) is refused
        # by both backends alike, not read by one and refused by the other.
        try:
            spikes._check_counts_and_ids()
        except ValueError as exc:
            raise ValueError(f"{where}: input list: {exc}") from None
    dtype = _compute_dtype(weight)
    x = spikes.to_dense().to(dtype)
    T, B, n_in = x.shape
    current = _Matmul.apply(x.reshape(T * B, n_in), weight.to(dtype).t()).reshape(T, B, -1)
    return current if bias is None else current + bias


@_without_autocast
def spiking_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[SparseSpikes, CallRecord]:
    _preflight(cfg, spikes)
    T, B, _ = spikes.dense_shape
    N = cfg.out_features
    beta, threshold, alpha = params.beta, params.threshold, params.alpha
    current = _input_current(spikes, params.weight, params.bias, cfg.name)
    record = CallRecord("reference", T, B, N, paths={"path": "dense"})
    window = cfg.window
    drop_per_step = cfg.recurrent and cfg.capacity is not None and cfg.overflow == "drop"

    U = current.new_zeros(B, N)
    syn = current.new_zeros(B, N)
    s_prev = current.new_zeros(B, N)  # reset signal: detached previous spikes
    r_prev = current.new_zeros(B, N)  # recurrent input: listed previous spikes
    if initial is not None:  # a constant: no gradient reaches the previous call
        U = initial.membrane.to(current.dtype)
        if initial.synaptic is not None:
            syn = initial.synaptic.to(current.dtype)
        s_prev = r_prev = initial.spikes.to(current.dtype)
        if drop_per_step:  # the list of step -1 held the lowest-numbered spikes
            kept, _ = _keep_first(s_prev > 0, torch.zeros_like(s_prev, dtype=torch.bool),
                                  cfg.capacity)
            r_prev = kept.to(current.dtype)
    # Cast once: a cast per step would also sum a half V's gradient in half, step by step.
    rec_t = params.rec_weight.to(current.dtype).t() if cfg.recurrent else None
    S_all, spk_all, elig_all, U_all = [], [], [], []
    for t in range(T):
        drive = current[t]
        if cfg.recurrent:
            drive = drive + _Matmul.apply(r_prev, rec_t)
        if cfg.model == "synaptic":
            syn = alpha * syn + drive
            drive = syn
        if cfg.reset == "subtract":
            U = beta * U + drive - s_prev * threshold
        elif cfg.reset == "zero" and cfg.model == "synaptic":
            U = (1 - s_prev) * (beta * U + drive)
        elif cfg.reset == "zero":
            U = beta * (1 - s_prev) * U + drive
        else:
            U = beta * U + drive
        # The window's line as the emulator draws it (U > threshold - grad_window, both
        # in float32), not U - threshold > -grad_window, which rounds differently.
        elig = U.detach() > threshold.detach() - window
        S = spike(U - threshold, cfg.surrogate, elig)
        spk = S.detach() > 0
        if drop_per_step:
            spk_kept, elig_kept = _keep_first(spk, elig, cfg.capacity)
            listed = spk_kept | elig_kept
        else:
            listed = spk | elig
        r_prev = torch.where(listed, S, S.new_zeros(()))
        s_prev = S.detach()
        S_all.append(S)
        if cfg.record_membrane:
            U_all.append(U.detach())
        spk_all.append(spk)
        elig_all.append(elig)

    if cfg.return_state:
        record.final_state = LayerState(
            U.detach().float(), syn.detach().float() if cfg.model == "synaptic" else None,
            spk.float())
    S_all = torch.stack(S_all)
    record.membrane = torch.stack(U_all) if cfg.record_membrane else None
    spk_all = torch.stack(spk_all)
    elig_all = torch.stack(elig_all)
    if not values_readable(S_all):
        # A traced graph (meta tensors): lists of static shape, and nothing to count.
        ids, counts, _ = lists_by_rank(spk_all, cfg.capacity, cfg.overflow, elig_all,
                                       cfg.name)
        values = listed_only(torch.gather(S_all, -1, ids.long()), counts)
        return SparseSpikes._made(ids, counts, N, values), record
    ids, counts, record.overflow = lists_from_masks(spk_all, elig_all, cfg.capacity,
                                                    cfg.overflow)
    values = listed_only(torch.gather(S_all, -1, ids.long()), counts)
    record.capacity = ids.shape[-1]
    record.needed_capacity = int((spk_all | elig_all).sum(-1).max())
    record.total_spikes = int(spk_all.sum())
    record.eligible_listed = int((counts[..., 1] - counts[..., 0]).sum())
    return SparseSpikes._made(ids, counts, N, values), record


@_without_autocast
def readout_layer(cfg: LayerConfig, spikes: SparseSpikes, params: LayerParams,
                  initial: Optional[LayerState], cache: Optional[dict] = None,
                  ) -> Tuple[torch.Tensor, CallRecord]:
    _preflight(cfg, spikes)
    beta = params.beta
    current = _input_current(spikes, params.weight, params.bias, cfg.name)
    # From zero state, as the spiking layers: beta then takes part from step 0 on, and
    # gets a zero gradient (not none) from a one-step call, as on the emulator.
    U = current.new_zeros(current.shape[1:]) if initial is None else initial.membrane.to(
        current.dtype)
    out = []
    for t in range(current.shape[0]):
        U = beta * U + current[t]
        out.append(U)
    out = torch.stack(out)
    T, B, N = out.shape
    record = CallRecord("reference", T, B, N, membrane=out.detach() if cfg.record_membrane
                        else None)
    if cfg.return_state:
        record.final_state = LayerState(out[-1].detach().float(), None, None)
    return out, record
