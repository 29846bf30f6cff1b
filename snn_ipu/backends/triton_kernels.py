"""The Triton kernels of the ``triton`` backend, and the one list of their specialisations.

Written for a GPU (docs/gpu.md says why each is shaped as it is). Each is a
:class:`Kernel`: compiled by Triton's JIT for CUDA tensors, run by Triton's interpreter
for CPU tensors (the tests), from the same source. :data:`SPECIALISATIONS` lists every
compiled variant the backend launches, which the tests compile ahead of time for sm_80
and sm_90.

Lists are the :class:`~snn_ipu.SparseSpikes` format: ``ids [R, K]`` int32 and
``counts [R, 2]`` int32 over the rows ``R = T * B`` (time-major), the first
``counts[r, 0]`` entries spikes, up to ``counts[r, 1]`` eligible-only entries.
Matrices are read by rows of their transposes (``wt = W.T`` is ``[in, out]``), so that
the row of a listed id is one contiguous, coalesced load. Accumulation is float32 for
float32, float16 and bfloat16 weights; offsets are int64 where a product of sizes could
pass 2**31.

Codes of models, resets and surrogates are those of ``codelets/Codes.hpp`` (through
:mod:`snn_ipu._codes`), baked in as constexpr globals.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from .._codes import RESETS, SURROGATES

__all__ = ["SPECIALISATIONS", "Kernel", "Specialisation", "WEIGHT_TYPES", "launch_options"]

# tl.sum and tl.cumsum are this reduction and this scan; called directly, the interpreter
# runs them as one numpy call each instead of a nested kernel call (~20 ms apiece).
_add = tl.standard._sum_combine

_RESET_SUBTRACT = tl.constexpr(RESETS["subtract"])
_RESET_ZERO = tl.constexpr(RESETS["zero"])
_SG_ATAN = tl.constexpr(SURROGATES["atan"])
_SG_FAST_SIGMOID = tl.constexpr(SURROGATES["fast_sigmoid"])
_SG_SIGMOID = tl.constexpr(SURROGATES["sigmoid"])
_SG_TRIANGLE = tl.constexpr(SURROGATES["triangle"])

#: Tile sizes: list entries per tile, neurons per tile of the row kernels, neurons per
#: block of the per-sample scans (one block covers a 1466-neuron layer in two).
BLOCK_K = 16
BLOCK_N = 128
SCAN_BLOCK_N = 1024
#: Neurons per block of the row-parallel list compaction (one row per program).
COMPACT_BLOCK_N = 512
#: Warps of a per-sample scan program: 8 x 32 threads, 4 neurons each per block.
SCAN_WARPS = 8

#: The tiles the interpreter runs the same source with: small, so that the tests' tiny
#: layers (a dozen neurons) cross tile and block boundaries, which GPU-sized tiles would
#: never show them, and so that each interpreted op (a numpy call behind ~1 ms of
#: Python) stays cheap.
INTERPRETER_TILES = {"BLOCK_K": 4, "BLOCK_N": 8}

#: Triton's names of the weight dtypes the kernels read (torch dtype name -> type).
WEIGHT_TYPES: Dict[str, str] = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class Kernel:
    """A kernel as Triton's JIT compiles it for the GPU (``jit``) and as its interpreter
    runs it on CPU tensors (``interpreted``), from one source. ``kernel[grid](...)``
    launches the one for the device of the first argument. Building the interpreted
    one here, rather than through ``TRITON_INTERPRET=1`` at import, keeps both whatever
    imported Triton first (torch.compile does); the kernels call no other jit function
    (``tl.reduce`` and ``tl.associative_scan`` with :data:`_add` are builtins) because
    those would be the compiled kind."""

    def __init__(self, fn):
        self.fn = fn
        self.jit = triton.jit(fn)
        self.interpreted = InterpretedFunction(fn)
        self.arg_names = self.interpreted.arg_names

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            device = args[0].device
            if device.type == "cpu":
                kwargs.pop("num_warps", None)
                return self.interpreted[grid](*args, **kwargs)
            # Triton launches on the current device's stream: a layer on cuda:1 while
            # cuda:0 is current would run there, unordered with torch's ops on cuda:1
            with torch.cuda.device(device):
                return self.jit[grid](*args, **kwargs)

        return launch


# --------------------------------------------------------------------------- forward
@Kernel
def spike_matmul_kernel(ids_ptr, counts_ptr, wt_ptr, bias_ptr, out_ptr, K, N, has_bias,
                        BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[r, n] = sum over the spikes j of row r of wt[j, n] (+ bias[n]): every (t, b)
    row at once, one program per row and block of neurons."""
    r = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    n_spk = tl.load(counts_ptr + r * 2)
    acc = tl.full([BLOCK_N], 0, tl.float32)
    for k0 in range(0, n_spk, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        mk = ks < n_spk
        j = tl.load(ids_ptr + r * K + ks, mask=mk, other=0).to(tl.int64)
        rows = tl.load(wt_ptr + j[:, None] * N + offs[None, :], mask=mk[:, None] & mn[None, :],
                       other=0.0)
        acc += tl.reduce(rows.to(tl.float32), 0, _add)
    if has_bias:
        acc += tl.load(bias_ptr + offs, mask=mn, other=0.0)
    tl.store(out_ptr + r * N + offs, acc, mask=mn)


@Kernel
def neuron_scan_kernel(
    cur_ptr, vt_ptr, beta_ptr, thr_ptr, alpha_ptr,
    u_ptr, syn_ptr, s_ptr,
    ids_ptr, counts_ptr, need_ptr, mem_ptr, flags_ptr, dense_u_ptr, dense_syn_ptr,
    T, B, N, KS, synaptic, reset, window, keep_dense,
    RECURRENT: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per sample runs all T steps of a spiking layer: per step, the state
    update of every neuron block (with ``V R[t-1]`` added from the previous step's
    list where RECURRENT), then the step's list, spikes first, each part in ascending
    id order, up to KS entries; ``need`` counts all of them (an overflow is counted,
    never lost). ``u, syn, s`` [B, N] hold the state (initial in, final out);
    ``flags`` [T, B, N] bit 0 a spike, bit 1 eligible."""
    b = tl.program_id(0).to(tl.int64)
    ar = tl.arange(0, BLOCK_N)
    for t in range(0, T):
        row = t * B + b
        # 1. state update
        n_prev = tl.load(counts_ptr + (row - B) * 2, mask=t > 0, other=0)
        for n0 in range(0, N, BLOCK_N):
            offs = n0 + ar
            mn = offs < N
            cur = tl.load(cur_ptr + row * N + offs, mask=mn, other=0.0)
            if RECURRENT:
                for k in range(0, n_prev):
                    j = tl.load(ids_ptr + (row - B) * KS + k).to(tl.int64)
                    cur += tl.load(vt_ptr + j * N + offs, mask=mn, other=0.0).to(tl.float32)
            beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
            thr = tl.load(thr_ptr + offs, mask=mn, other=1.0)
            u = tl.load(u_ptr + b * N + offs, mask=mn, other=0.0)
            s = tl.load(s_ptr + b * N + offs, mask=mn, other=0.0)
            drive = cur
            if synaptic:
                alpha = tl.load(alpha_ptr + offs, mask=mn, other=0.0)
                syn = alpha * tl.load(syn_ptr + b * N + offs, mask=mn, other=0.0) + cur
                tl.store(syn_ptr + b * N + offs, syn, mask=mn)
                if keep_dense:
                    tl.store(dense_syn_ptr + row * N + offs, syn, mask=mn)
                drive = syn
            if reset == _RESET_SUBTRACT:
                u = beta * u + drive - s * thr
            elif reset == _RESET_ZERO:
                if synaptic:
                    u = (1.0 - s) * (beta * u + drive)
                else:
                    u = beta * (1.0 - s) * u + drive
            else:
                u = beta * u + drive
            spike = u > thr
            eligible = u > thr - window
            tl.store(u_ptr + b * N + offs, u, mask=mn)
            tl.store(s_ptr + b * N + offs, spike.to(tl.float32), mask=mn)
            tl.store(flags_ptr + row * N + offs,
                     (spike.to(tl.int32) + 2 * eligible.to(tl.int32)).to(tl.uint8), mask=mn)
            if keep_dense:
                tl.store(dense_u_ptr + row * N + offs, u, mask=mn)
        tl.debug_barrier()
        # 2. the step's list: spikes, then eligible-only neurons
        n_spk = tl.reduce(tl.full([BLOCK_N], 0, tl.int32), 0, _add)
        for n0 in range(0, N, BLOCK_N):
            offs = n0 + ar
            mn = offs < N
            f = tl.load(flags_ptr + row * N + offs, mask=mn, other=0).to(tl.int32)
            hit = (f & 1) != 0
            rank = n_spk + tl.associative_scan(hit.to(tl.int32), 0, _add) - 1
            keep = hit & (rank < KS)
            tl.store(ids_ptr + row * KS + rank, offs, mask=keep)
            tl.store(mem_ptr + row * KS + rank,
                     tl.load(u_ptr + b * N + offs, mask=mn, other=0.0), mask=keep)
            n_spk += tl.reduce(hit.to(tl.int32), 0, _add)
        n_all = n_spk
        for n0 in range(0, N, BLOCK_N):
            offs = n0 + ar
            mn = offs < N
            f = tl.load(flags_ptr + row * N + offs, mask=mn, other=0).to(tl.int32)
            hit = f == 2
            rank = n_all + tl.associative_scan(hit.to(tl.int32), 0, _add) - 1
            keep = hit & (rank < KS)
            tl.store(ids_ptr + row * KS + rank, offs, mask=keep)
            tl.store(mem_ptr + row * KS + rank,
                     tl.load(u_ptr + b * N + offs, mask=mn, other=0.0), mask=keep)
            n_all += tl.reduce(hit.to(tl.int32), 0, _add)
        tl.store(need_ptr + row * 2, n_spk)
        tl.store(need_ptr + row * 2 + 1, n_all)
        tl.store(counts_ptr + row * 2, tl.minimum(n_spk, KS))
        tl.store(counts_ptr + row * 2 + 1, tl.minimum(n_all, KS))
        tl.debug_barrier()


@Kernel
def neuron_scan_ff_kernel(
    cur_ptr, beta_ptr, thr_ptr, alpha_ptr, u_ptr, syn_ptr, s_ptr, flags_ptr, dense_u_ptr,
    dense_syn_ptr, T, B, N, synaptic, reset, window, keep_syn, BLOCK_N: tl.constexpr,
):
    """A feed-forward spiking layer's state over T steps: one program per sample and
    block of neurons (no coupling between neurons), the state in registers. Writes
    ``flags`` [T, B, N] (bit 0 a spike, bit 1 eligible) and the membrane [T, B, N],
    from which :func:`list_compact_kernel` makes the lists; ``u, syn, s`` [B, N] hold
    the initial state in, the final state out."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    p = b * N + offs
    beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
    thr = tl.load(thr_ptr + offs, mask=mn, other=1.0)
    alpha = tl.load(alpha_ptr + offs, mask=mn, other=0.0)
    line = thr - window
    u = tl.load(u_ptr + p, mask=mn, other=0.0)
    syn = tl.load(syn_ptr + p, mask=mn, other=0.0)
    s = tl.load(s_ptr + p, mask=mn, other=0.0)
    for t in range(0, T):
        q = (t * B + b) * N + offs
        drive = tl.load(cur_ptr + q, mask=mn, other=0.0)
        if synaptic:
            syn = alpha * syn + drive
            if keep_syn:
                tl.store(dense_syn_ptr + q, syn, mask=mn)
            drive = syn
        if reset == _RESET_SUBTRACT:
            u = beta * u + drive - s * thr
        elif reset == _RESET_ZERO:
            if synaptic:
                u = (1.0 - s) * (beta * u + drive)
            else:
                u = beta * (1.0 - s) * u + drive
        else:
            u = beta * u + drive
        spike = u > thr
        s = spike.to(tl.float32)
        tl.store(flags_ptr + q, (spike.to(tl.int32) + 2 * (u > line).to(tl.int32)).to(tl.uint8),
                 mask=mn)
        tl.store(dense_u_ptr + q, u, mask=mn)
    tl.store(u_ptr + p, u, mask=mn)
    tl.store(syn_ptr + p, syn, mask=mn)
    tl.store(s_ptr + p, s, mask=mn)


@Kernel
def list_compact_kernel(flags_ptr, dense_u_ptr, ids_ptr, counts_ptr, need_ptr, mem_ptr, N, KS,
                        BLOCK_N: tl.constexpr):
    """The lists of every (t, b) row at once from ``flags``: spikes, then eligible-only
    neurons, each in ascending id order (a prefix sum per block and a running offset),
    up to KS entries, with the membrane at each; ``need`` counts every entry the row
    needed, so an overflow is counted, never lost."""
    r = tl.program_id(0).to(tl.int64)
    ar = tl.arange(0, BLOCK_N)
    n_spk = tl.reduce(tl.full([BLOCK_N], 0, tl.int32), 0, _add)
    for n0 in range(0, N, BLOCK_N):
        offs = n0 + ar
        mn = offs < N
        f = tl.load(flags_ptr + r * N + offs, mask=mn, other=0).to(tl.int32)
        hit = (f & 1) != 0
        rank = n_spk + tl.associative_scan(hit.to(tl.int32), 0, _add) - 1
        keep = hit & (rank < KS)
        tl.store(ids_ptr + r * KS + rank, offs, mask=keep)
        tl.store(mem_ptr + r * KS + rank, tl.load(dense_u_ptr + r * N + offs, mask=keep,
                                                  other=0.0), mask=keep)
        n_spk += tl.reduce(hit.to(tl.int32), 0, _add)
    n_all = n_spk
    for n0 in range(0, N, BLOCK_N):
        offs = n0 + ar
        mn = offs < N
        f = tl.load(flags_ptr + r * N + offs, mask=mn, other=0).to(tl.int32)
        hit = f == 2
        rank = n_all + tl.associative_scan(hit.to(tl.int32), 0, _add) - 1
        keep = hit & (rank < KS)
        tl.store(ids_ptr + r * KS + rank, offs, mask=keep)
        tl.store(mem_ptr + r * KS + rank, tl.load(dense_u_ptr + r * N + offs, mask=keep,
                                                  other=0.0), mask=keep)
        n_all += tl.reduce(hit.to(tl.int32), 0, _add)
    tl.store(need_ptr + r * 2, n_spk)
    tl.store(need_ptr + r * 2 + 1, n_all)
    tl.store(counts_ptr + r * 2, tl.minimum(n_spk, KS))
    tl.store(counts_ptr + r * 2 + 1, tl.minimum(n_all, KS))


@Kernel
def readout_scan_kernel(cur_ptr, beta_ptr, u_ptr, T, B, N, BLOCK_N: tl.constexpr):
    """U[t] = beta U[t-1] + I[t] in place over ``cur`` [T, B, N]; ``u`` [B, N] holds
    the initial membrane. One program per sample and block of neurons."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
    u = tl.load(u_ptr + b * N + offs, mask=mn, other=0.0)
    for t in range(0, T):
        p = cur_ptr + (t * B + b) * N + offs
        u = beta * u + tl.load(p, mask=mn, other=0.0)
        tl.store(p, u, mask=mn)


# --------------------------------------------------------------------------- backward
@Kernel
def neuron_scan_backward_kernel(
    gval_ptr, ids_ptr, counts_ptr, mem_ptr, flags_ptr, s0_ptr, u0_ptr, syn0_ptr,
    dense_u_ptr, dense_syn_ptr, vt_ptr, beta_ptr, thr_ptr, alpha_ptr,
    di_ptr, gsrc_ptr, cu_ptr, csyn_ptr, recg_ptr, dthr_ptr, dbeta_ptr, dalpha_ptr,
    T, B, N, K, synaptic, reset, sg_kind, sg_p0, sg_p1, decay_grads,
    RECURRENT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """BPTT of a spiking layer, one program per sample, steps T-1 .. 0. Per step: the
    surrogate at the step's listed entries only (dL/dS there, plus ``V^T dL/dI[t+1]``
    where RECURRENT), scattered into a [N] row; the exact membrane (and synaptic)
    recurrence over the neuron blocks, which writes dL/dI[t] ([T, B, N]) and the
    per-sample partial gradients of threshold, beta and alpha ([B, N]); then, where
    RECURRENT, ``V^T dL/dI[t]`` at the entries listed at t-1 (a gather of V's columns)."""
    b = tl.program_id(0).to(tl.int64)
    ar = tl.arange(0, BLOCK_N)
    ak = tl.arange(0, BLOCK_K)
    for tt in range(0, T):
        t = T - 1 - tt
        row = t * B + b
        # 1. surrogate at the listed entries of step t
        n_list = tl.load(counts_ptr + row * 2 + 1)
        for k0 in range(0, n_list, BLOCK_K):
            ks = k0 + ak
            mk = ks < n_list
            j = tl.load(ids_ptr + row * K + ks, mask=mk, other=0).to(tl.int64)
            g = tl.load(gval_ptr + row * K + ks, mask=mk, other=0.0)
            if RECURRENT:
                g += tl.load(recg_ptr + b * K + ks, mask=mk, other=0.0)
            x = tl.load(mem_ptr + row * K + ks, mask=mk, other=0.0) - tl.load(
                thr_ptr + j, mask=mk, other=0.0)
            # dS/dU at x = U - threshold (p0, p1: surrogate_constants in triton.py); a
            # branch on a uniform value, inline: a nested jit call costs the interpreter
            ax = tl.abs(x)
            if sg_kind == _SG_ATAN:  # p0 = alpha / 2, p1 = pi / 2 * alpha
                y = sg_p1 * x
                d = sg_p0 / (1.0 + y * y)
            elif sg_kind == _SG_FAST_SIGMOID:  # p0 = slope
                q = sg_p0 * ax + 1.0
                d = 1.0 / (q * q)
            elif sg_kind == _SG_SIGMOID:  # p0 = slope
                e = tl.exp(-sg_p0 * ax)
                d = sg_p0 * e / ((1.0 + e) * (1.0 + e))
            elif sg_kind == _SG_TRIANGLE:  # p0 = width, p1 = height
                d = sg_p1 * tl.maximum(1.0 - ax / sg_p0, 0.0)
            else:  # straight through
                d = ax * 0.0 + 1.0
            gd = g * d
            tl.store(gsrc_ptr + b * N + j, gd, mask=mk)
            dthr = tl.load(dthr_ptr + b * N + j, mask=mk, other=0.0)
            tl.store(dthr_ptr + b * N + j, dthr - gd, mask=mk)
        tl.debug_barrier()
        # 2. the recurrence in time, every neuron
        for n0 in range(0, N, BLOCK_N):
            offs = n0 + ar
            mn = offs < N
            p = b * N + offs
            du = tl.load(gsrc_ptr + p, mask=mn, other=0.0) + tl.load(cu_ptr + p, mask=mn,
                                                                     other=0.0)
            tl.store(gsrc_ptr + p, tl.full([BLOCK_N], 0, tl.float32), mask=mn)
            if t > 0:
                s_prev = (tl.load(flags_ptr + (row - B) * N + offs, mask=mn, other=0)
                          & 1).to(tl.float32)
            else:
                s_prev = tl.load(s0_ptr + p, mask=mn, other=0.0)
            if reset == _RESET_ZERO:
                gate = 1.0 - s_prev
            else:
                gate = s_prev * 0.0 + 1.0
            beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
            di = du
            if synaptic:
                alpha = tl.load(alpha_ptr + offs, mask=mn, other=0.0)
                dsyn = gate * du + alpha * tl.load(csyn_ptr + p, mask=mn, other=0.0)
                tl.store(csyn_ptr + p, dsyn, mask=mn)
                di = dsyn
                if decay_grads:
                    if t > 0:
                        syn_prev = tl.load(dense_syn_ptr + (row - B) * N + offs, mask=mn,
                                           other=0.0)
                    else:
                        syn_prev = tl.load(syn0_ptr + p, mask=mn, other=0.0)
                    tl.store(dalpha_ptr + p, tl.load(dalpha_ptr + p, mask=mn, other=0.0)
                             + dsyn * syn_prev, mask=mn)
            if decay_grads:
                if t > 0:
                    u_prev = tl.load(dense_u_ptr + (row - B) * N + offs, mask=mn, other=0.0)
                else:
                    u_prev = tl.load(u0_ptr + p, mask=mn, other=0.0)
                tl.store(dbeta_ptr + p, tl.load(dbeta_ptr + p, mask=mn, other=0.0)
                         + du * gate * u_prev, mask=mn)
            if reset == _RESET_SUBTRACT:
                tl.store(dthr_ptr + p, tl.load(dthr_ptr + p, mask=mn, other=0.0)
                         - du * s_prev, mask=mn)
            tl.store(cu_ptr + p, beta * gate * du, mask=mn)
            tl.store(di_ptr + row * N + offs, di, mask=mn)
        tl.debug_barrier()
        # 3. V^T dL/dI[t] at the entries listed at step t-1 (their recurrent input)
        if RECURRENT:
            if t > 0:
                n_prev = tl.load(counts_ptr + (row - B) * 2 + 1)
                for k0 in range(0, n_prev, BLOCK_K):
                    ks = k0 + ak
                    mk = ks < n_prev
                    j = tl.load(ids_ptr + (row - B) * K + ks, mask=mk, other=0).to(tl.int64)
                    acc = tl.full([BLOCK_K], 0, tl.float32)
                    for n0 in range(0, N, BLOCK_N):
                        offs = n0 + ar
                        mn = offs < N
                        cols = tl.load(vt_ptr + j[:, None] * N + offs[None, :],
                                       mask=mk[:, None] & mn[None, :], other=0.0)
                        d = tl.load(di_ptr + row * N + offs, mask=mn, other=0.0)
                        acc += tl.reduce(cols.to(tl.float32) * d[None, :], 1, _add)
                    tl.store(recg_ptr + b * K + ks, acc, mask=mk)
            tl.debug_barrier()


@Kernel
def state_grad_ff_kernel(
    gu_ptr, flags_ptr, s0_ptr, u0_ptr, syn0_ptr, dense_u_ptr, dense_syn_ptr, beta_ptr,
    alpha_ptr, di_ptr, dthr_ptr, dbeta_ptr, dalpha_ptr, T, B, N, synaptic, reset, decay_grads,
    BLOCK_N: tl.constexpr,
):
    """BPTT of a feed-forward spiking layer, one program per sample and block of neurons,
    steps T-1 .. 0, the carries in registers: ``gu`` [T, B, N] holds dL/dS dS/dU at the
    listed entries (0 elsewhere), scattered from the list; the exact membrane (and
    synaptic) recurrence gives dL/dI [T, B, N] and the per-sample partial gradients of
    threshold, beta and alpha ([B, N])."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    p = b * N + offs
    beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
    alpha = tl.load(alpha_ptr + offs, mask=mn, other=0.0)
    cu = tl.full([BLOCK_N], 0, tl.float32)
    csyn = tl.full([BLOCK_N], 0, tl.float32)
    dthr = tl.full([BLOCK_N], 0, tl.float32)
    dbeta = tl.full([BLOCK_N], 0, tl.float32)
    dalpha = tl.full([BLOCK_N], 0, tl.float32)
    for tt in range(0, T):
        t = T - 1 - tt
        q = (t * B + b) * N + offs
        gd = tl.load(gu_ptr + q, mask=mn, other=0.0)
        du = gd + cu
        dthr -= gd
        if t > 0:
            s_prev = (tl.load(flags_ptr + q - B * N, mask=mn, other=0) & 1).to(tl.float32)
        else:
            s_prev = tl.load(s0_ptr + p, mask=mn, other=0.0)
        if reset == _RESET_ZERO:
            gate = 1.0 - s_prev
        else:
            gate = s_prev * 0.0 + 1.0
        di = du
        if synaptic:
            csyn = gate * du + alpha * csyn
            di = csyn
            if decay_grads:
                if t > 0:
                    syn_prev = tl.load(dense_syn_ptr + q - B * N, mask=mn, other=0.0)
                else:
                    syn_prev = tl.load(syn0_ptr + p, mask=mn, other=0.0)
                dalpha += csyn * syn_prev
        if decay_grads:
            if t > 0:
                u_prev = tl.load(dense_u_ptr + q - B * N, mask=mn, other=0.0)
            else:
                u_prev = tl.load(u0_ptr + p, mask=mn, other=0.0)
            dbeta += du * gate * u_prev
        if reset == _RESET_SUBTRACT:
            dthr -= du * s_prev
        cu = beta * gate * du
        tl.store(di_ptr + q, di, mask=mn)
    tl.store(dthr_ptr + p, dthr, mask=mn)
    tl.store(dbeta_ptr + p, dbeta, mask=mn)
    tl.store(dalpha_ptr + p, dalpha, mask=mn)


@Kernel
def readout_scan_backward_kernel(g_ptr, u_ptr, u0_ptr, beta_ptr, di_ptr, dbeta_ptr, T, B, N,
                                 BLOCK_N: tl.constexpr):
    """dL/dI[t] = g[t] + beta dL/dI[t+1], steps T-1 .. 0, and the per-sample partial
    dL/dbeta = sum_t dL/dI[t] U[t-1] ([B, N]). One program per sample and neuron block."""
    b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    beta = tl.load(beta_ptr + offs, mask=mn, other=0.0)
    carry = tl.full([BLOCK_N], 0, tl.float32)
    dbeta = tl.full([BLOCK_N], 0, tl.float32)
    for tt in range(0, T):
        t = T - 1 - tt
        row = t * B + b
        di = tl.load(g_ptr + row * N + offs, mask=mn, other=0.0) + carry
        tl.store(di_ptr + row * N + offs, di, mask=mn)
        if t > 0:
            u_prev = tl.load(u_ptr + (row - B) * N + offs, mask=mn, other=0.0)
        else:
            u_prev = tl.load(u0_ptr + b * N + offs, mask=mn, other=0.0)
        dbeta += di * u_prev
        carry = beta * di
    tl.store(dbeta_ptr + b * N + offs, dbeta, mask=mn)


@Kernel
def spike_outer_kernel(ids_ptr, counts_ptr, di_ptr, dwt_ptr, R, K, N, rows_per_program,
                       BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """dwt[j, n] += di[r, n] for every spike j of every row r: the weight gradient as
    outer products of the list with dL/dI, float32 atomics into ``dwt`` [in, out]. One
    program per chunk of rows and block of neurons."""
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs < N
    r0 = tl.program_id(0).to(tl.int64) * rows_per_program
    n_rows = tl.minimum(r0 + rows_per_program, R) - r0
    ak = tl.arange(0, BLOCK_K)
    for i in range(0, n_rows):
        r64 = r0 + i
        n_spk = tl.load(counts_ptr + r64 * 2)
        if n_spk > 0:
            d = tl.load(di_ptr + r64 * N + offs, mask=mn, other=0.0)
            for k0 in range(0, n_spk, BLOCK_K):
                ks = k0 + ak
                mk = ks < n_spk
                j = tl.load(ids_ptr + r64 * K + ks, mask=mk, other=0).to(tl.int64)
                tl.atomic_add(dwt_ptr + j[:, None] * N + offs[None, :],
                              tl.broadcast_to(d[None, :], [BLOCK_K, BLOCK_N]),
                              mask=mk[:, None] & mn[None, :], sem="relaxed")


@Kernel
def spike_gather_dot_kernel(ids_ptr, counts_ptr, di_ptr, wt_ptr, out_ptr, K, N,
                            BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[r, k] = wt[id_k] . di[r] for the listed entries k of row r (0 elsewhere): the
    input gradient, only where the upstream layer listed a neuron. One program per row
    and tile of entries."""
    r = tl.program_id(0).to(tl.int64)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    n_list = tl.load(counts_ptr + r * 2 + 1)
    mk = ks < n_list
    acc = tl.full([BLOCK_K], 0, tl.float32)
    if tl.program_id(1) * BLOCK_K < n_list:
        j = tl.load(ids_ptr + r * K + ks, mask=mk, other=0).to(tl.int64)
        for n0 in range(0, N, BLOCK_N):
            offs = n0 + tl.arange(0, BLOCK_N)
            mn = offs < N
            rows = tl.load(wt_ptr + j[:, None] * N + offs[None, :],
                           mask=mk[:, None] & mn[None, :], other=0.0)
            d = tl.load(di_ptr + r * N + offs, mask=mn, other=0.0)
            acc += tl.reduce(rows.to(tl.float32) * d[None, :], 1, _add)
    tl.store(out_ptr + r * K + ks, acc, mask=ks < K)


# --------------------------------------------------------------------------- the list
class Specialisation(NamedTuple):
    """One compiled variant: the kernel, its argument types (Triton's signature
    strings; ``constexpr`` for compile-time ones) and the values of its constexprs."""

    name: str
    kernel: object
    signature: Dict[str, str]
    constexprs: Dict[str, int]
    num_warps: int = 4


def _sig(kernel, types: List[str]) -> Dict[str, str]:
    names = kernel.arg_names
    if len(names) != len(types):
        raise AssertionError(f"{kernel.fn.__name__}: {len(types)} types for {names}")
    return dict(zip(names, types))


def _specialisations() -> Tuple[Specialisation, ...]:
    """Every variant the backend launches: weight dtypes where a kernel reads weights,
    RECURRENT on or off (with V's dtype). The backend launches with exactly these
    constexprs (``launch_options``)."""
    out: List[Specialisation] = []
    p32, i32, f32 = "*fp32", "i32", "fp32"
    c = "constexpr"
    for wname, wtype in WEIGHT_TYPES.items():
        w = "*" + wtype
        out.append(Specialisation(
            f"spike_matmul[{wname}]", spike_matmul_kernel,
            _sig(spike_matmul_kernel, ["*i32", "*i32", w, p32, p32, i32, i32, i32, c, c]),
            {"BLOCK_K": BLOCK_K, "BLOCK_N": BLOCK_N}))
        out.append(Specialisation(
            f"spike_gather_dot[{wname}]", spike_gather_dot_kernel,
            _sig(spike_gather_dot_kernel, ["*i32", "*i32", p32, w, p32, i32, i32, c, c]),
            {"BLOCK_K": BLOCK_K, "BLOCK_N": BLOCK_N}))
    out.append(Specialisation(
        "neuron_scan_ff", neuron_scan_ff_kernel,
        # flags is uint8, as the backend allocates it: the compile test builds the
        # variant that the JIT launches
        _sig(neuron_scan_ff_kernel, [p32] * 7 + ["*u8", p32, p32] + [i32] * 5 + [f32, i32, c]),
        {"BLOCK_N": BLOCK_N}))
    out.append(Specialisation(
        "list_compact", list_compact_kernel,
        _sig(list_compact_kernel, ["*u8", p32, "*i32", "*i32", "*i32", p32, i32, i32, c]),
        {"BLOCK_N": COMPACT_BLOCK_N}))
    for vname in WEIGHT_TYPES:
        out.append(Specialisation(
            f"neuron_scan[recurrent, {vname}]", neuron_scan_kernel,
            _sig(neuron_scan_kernel, [p32, "*" + WEIGHT_TYPES[vname], p32, p32, p32, p32, p32,
                                      p32, "*i32", "*i32", "*i32", p32, "*u8", p32, p32, i32,
                                      i32, i32, i32, i32, i32, f32, i32, c, c]),
            {"RECURRENT": True, "BLOCK_N": SCAN_BLOCK_N}, SCAN_WARPS))
    out.append(Specialisation(
        "state_grad_ff", state_grad_ff_kernel,
        _sig(state_grad_ff_kernel, ["*fp32", "*u8"] + [p32] * 11 + [i32] * 6 + [c]),
        {"BLOCK_N": BLOCK_N}))
    for vname in WEIGHT_TYPES:
        out.append(Specialisation(
            f"neuron_scan_backward[recurrent, {vname}]",
            neuron_scan_backward_kernel,
            _sig(neuron_scan_backward_kernel,
                 [p32, "*i32", "*i32", p32, "*u8", p32, p32, p32, p32, p32,
                  "*" + WEIGHT_TYPES[vname]] + [p32] * 11 + [i32] * 7 + [f32, f32, i32, c, c, c]),
            {"RECURRENT": True, "BLOCK_N": SCAN_BLOCK_N, "BLOCK_K": BLOCK_K},
            SCAN_WARPS))
    out.append(Specialisation(
        "readout_scan", readout_scan_kernel,
        _sig(readout_scan_kernel, [p32, p32, p32, i32, i32, i32, c]), {"BLOCK_N": BLOCK_N}))
    out.append(Specialisation(
        "readout_scan_backward", readout_scan_backward_kernel,
        _sig(readout_scan_backward_kernel, [p32, p32, p32, p32, p32, p32, i32, i32, i32, c]),
        {"BLOCK_N": BLOCK_N}))
    out.append(Specialisation(
        "spike_outer", spike_outer_kernel,
        _sig(spike_outer_kernel, ["*i32", "*i32", p32, p32, i32, i32, i32, i32, c, c]),
        {"BLOCK_K": BLOCK_K, "BLOCK_N": BLOCK_N}))
    return tuple(out)


#: Every kernel specialisation the backend launches (compiled for sm_80 / sm_90 in CI).
SPECIALISATIONS: Tuple[Specialisation, ...] = _specialisations()


def launch_options(kernel, interpreted: bool = False, **variant) -> Dict[str, int]:
    """The constexprs and ``num_warps`` to launch ``kernel`` with: those of its entry in
    :data:`SPECIALISATIONS` that matches ``variant`` (e.g. ``RECURRENT=True``), so that
    the backend launches exactly what the compile test compiles. ``interpreted``: for the
    interpreter, with :data:`INTERPRETER_TILES`."""
    for spec in SPECIALISATIONS:
        if spec.kernel is kernel and all(spec.constexprs.get(k) == v for k, v in variant.items()):
            opts = dict(spec.constexprs, num_warps=spec.num_warps)
            if interpreted:
                opts.update({k: v for k, v in INTERPRETER_TILES.items() if k in opts})
            return opts
    raise KeyError(f"no specialisation of {kernel} with {variant}")
