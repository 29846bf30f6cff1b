"""One training step of the benchmark's network on each backend.

Every network starts from the same weights and biases
(:func:`~snn_ipu.bench.workload.weights_of`, :func:`~snn_ipu.bench.workload.biases_of`)
and inputs, runs the LIF neuron

    U[t] = beta * U[t-1] + I[t] - S[t-1] * threshold,   S[t] = (U[t] > threshold)

with the reset detached and the ATan surrogate (alpha = 2), and takes the cross-entropy
of the output layer's spike counts over time as its loss; one step is forward, backward
and an Adam step (the same Adam for every backend). Where a peer cannot express that
equation exactly, its class docstring says what differs.
"""

from __future__ import annotations

import logging
import math
import time
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import LIFLayer
from ..spikes import SparseSpikes
from .configs import BETA, SPARSE_WINDOW, THRESHOLD
from .workload import biases_of, weights_of

ATAN_ALPHA = 2.0


def make_adam(params, lr: float, kind: str) -> torch.optim.Optimizer:
    """The optimizer, the same for every backend. ``"fused"``: PyTorch's fused CPU Adam
    (one pass over each parameter, torch >= 2.4), or the default where the installed torch
    lacks it; ``"default"``: torch's default implementation (several passes per parameter)."""
    if kind == "fused":
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.Adam(params, lr=lr)


def _linears(problem: dict) -> List[nn.Linear]:
    sizes = problem["sizes"]
    fcs = []
    for i, (w, b) in enumerate(zip(weights_of(problem), biases_of(problem))):
        fc = nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            fc.weight.copy_(w)
            fc.bias.copy_(b)
        fcs.append(fc)
    return fcs


class TrainingNet:
    """What the timing and memory code need of a network: ``step()`` (one training step,
    returns the loss), ``activity()`` (spikes per neuron and step of each layer),
    ``params`` and ``opt``."""

    params: List[torch.Tensor]
    opt: torch.optim.Optimizer
    #: True where ``activity()`` reads what the last step counted anyway (our layers'
    #: stats); False where it counts in a forward pass of its own (a dense network).
    counts_in_step: bool = True

    def step(self) -> float:
        raise NotImplementedError

    def activity(self) -> List[float]:
        """Spikes per neuron and step of each layer: of the last step where
        ``counts_in_step``, else at the current weights."""
        raise NotImplementedError

    def entries_per_step(self) -> Optional[List[dict]]:
        """Per layer, the listed entries of one step (all samples) in the last training
        step: ``spikes`` and ``eligible_only`` (gradient-eligible, not spiking); None for
        a dense network, which lists nothing."""
        return None


class DenseNet(TrainingNet):
    """Shared by the dense peers: ``nn.Linear`` layers, the dense input [T, B, in], the
    loss on the output spike counts.

    A step counts no spikes: that is no part of a training step, and (a reduction per
    layer, per step on snnTorch's loop) it added ~1% to SpikingJelly's step and 3-4%
    to snnTorch's, in the peers' timed steps only. ``activity()`` counts them in a
    forward pass of its own, outside the timed steps."""

    counts_in_step = False

    def __init__(self, problem: dict, lr: float, adam: str):
        self.fcs = _linears(problem)
        self.params = [p for fc in self.fcs for p in fc.parameters()]
        self.opt = make_adam(self.params, lr, adam)
        self.x = problem["x"]
        self.y = problem["y"]
        self._counting = False  # set by activity() alone
        self._spikes: List[float] = []

    def forward(self) -> torch.Tensor:
        """Output spikes [T, B, out]; in ``activity()``'s pass (``_counting``), also
        each layer's spike total in ``_spikes``."""
        raise NotImplementedError

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        out = self.forward()
        loss = F.cross_entropy(out.sum(0), self.y)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def activity(self) -> List[float]:
        """Counted in a forward pass at the current weights (with grad, as a step's:
        a compiled peer's graphs are kept for that), outside any step."""
        self._counting = True
        try:
            self.forward()
        finally:
            self._counting = False
        T, B = self.x.shape[:2]
        return [s / (T * B * fc.out_features) for s, fc in zip(self._spikes, self.fcs)]

    def _count(self, outputs: List[torch.Tensor]) -> None:
        """Each layer's spike total of ``activity()``'s pass (a no-op in a step)."""
        if self._counting:
            self._spikes = [float(h.detach().sum()) for h in outputs]


class OursNet(TrainingNet):
    """Our :class:`~snn_ipu.LIFLayer` on one backend; the input list is built once,
    outside the timed step. ``grad_window`` applies to the hidden layers; the spiking
    output layer keeps exact gradients, as the trainer's (a windowed spiking output
    layer stops learning: docs/guide.md)."""

    def __init__(self, problem: dict, backend: str, grad_window: Optional[float], lr: float,
                 adam: str):
        sizes = problem["sizes"]
        self.layers = []
        last = len(sizes) - 2
        for i, (w, b) in enumerate(zip(weights_of(problem), biases_of(problem))):
            layer = LIFLayer(sizes[i], sizes[i + 1], beta=BETA, threshold=THRESHOLD,
                             grad_window=grad_window if i < last else None, backend=backend,
                             name=f"layer{i + 1}")
            with torch.no_grad():
                layer.weight.copy_(w)
                layer.bias.copy_(b)
            self.layers.append(layer)
        self.params = [p for layer in self.layers for p in layer.parameters()]
        self.opt = make_adam(self.params, lr, adam)
        self.x = SparseSpikes.from_dense(problem["x"])
        self.y = problem["y"]

    def forward(self) -> SparseSpikes:
        s = self.x
        for layer in self.layers:
            s = layer(s)
        return s

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.forward().spike_counts(), self.y)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def activity(self) -> List[float]:
        return [float(layer.stats.get("activity", float("nan"))) for layer in self.layers]

    def entries_per_step(self) -> List[dict]:
        B = self.x.batch_size
        return [{"spikes": layer.stats["activity"] * B * layer.out_features,
                 "eligible_only": layer.stats["eligible_activity"] * B * layer.out_features,
                 "capacity": layer.stats["capacity"]} for layer in self.layers]


class SnnTorchNet(DenseNet):
    """``nn.Linear`` + ``snntorch.Leaky`` (subtract reset, ATan surrogate), the way
    snnTorch's tutorials write it: a Python loop over T, each step through every layer."""

    def __init__(self, problem: dict, lr: float, adam: str):
        import snntorch as snn
        from snntorch import surrogate

        super().__init__(problem, lr, adam)
        self.lifs = [snn.Leaky(beta=BETA, threshold=THRESHOLD, spike_grad=surrogate.atan(),
                               reset_mechanism="subtract") for _ in self.fcs]

    def forward(self) -> torch.Tensor:
        mems = [lif.init_leaky() for lif in self.lifs]
        counting = self._counting
        totals = [0.0 for _ in self.fcs]
        outputs = []
        for t in range(self.x.shape[0]):
            h = self.x[t]
            for i, (fc, lif) in enumerate(zip(self.fcs, self.lifs)):
                h, mems[i] = lif(fc(h), mems[i])
                if counting:
                    totals[i] += float(h.detach().sum())
            outputs.append(h)
        if counting:
            self._spikes = totals
        return torch.stack(outputs)


class _HeavisideATan(torch.autograd.Function):
    """S = (x > 0) forward; dS/dx = (alpha/2) / (1 + (pi/2 * alpha * x)^2) backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        z = (math.pi / 2 * ATAN_ALPHA) * x
        return grad * ((ATAN_ALPHA / 2) / (1 + z * z))


def lif_loop(currents: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    """The plain per-step LIF loop over currents [T, ...]: spikes [T, ...]."""
    u = torch.zeros_like(currents[0])
    s = torch.zeros_like(currents[0])
    spikes = []
    for t in range(currents.shape[0]):
        u = beta * u + currents[t] - s.detach() * threshold
        s = _HeavisideATan.apply(u - threshold)
        spikes.append(s)
    return torch.stack(spikes)


class TorchLoopNet(DenseNet):
    """The simplest fast dense baseline: each ``nn.Linear`` on all T steps at once (one
    GEMM), then a Python loop over T of the neuron update with a tiny autograd Function
    for the spike (:func:`lif_loop`); the same equation as ours and snnTorch's."""

    def forward(self) -> torch.Tensor:
        h = self.x
        outputs = []
        for fc in self.fcs:
            h = lif_loop(fc(h), BETA, THRESHOLD)
            outputs.append(h)
        self._count(outputs)
        return h


def spikingjelly_tau(beta: float) -> float:
    """SpikingJelly's LIF time constant for a decay factor: with ``decay_input=False`` its
    charge is H = V - V / tau + X, so beta = 1 - 1 / tau."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"SpikingJelly's LIFNode needs 0 < beta < 1 (tau > 1), got {beta}")
    return 1.0 / (1.0 - beta)


def spikingjelly_lif(tau: float, threshold: float):
    """SpikingJelly 2.0's multi-step ``LIFNode`` set as close to our neuron as it allows:
    ``decay_input=False`` (the input is not scaled by 1/tau), ``tau`` from
    :func:`spikingjelly_tau`, ``v_reset=None`` (soft reset: subtract the threshold),
    ``detach_reset=True``, ATan surrogate (alpha = 2), ``step_mode='m'``. On a CPU its
    multi-step op runs a Python loop over T whose steps autograd records (its registered
    CPU autograd kernel is the torch reference; the fused CUDA and Triton kernels need a
    GPU).

    What differs from ours: SpikingJelly subtracts the threshold right after the spike,
    before the next step's decay, so a spike lowers the next membrane by
    ``beta * threshold`` where ours (and snnTorch's) lowers it by ``threshold``; it fires
    at ``H >= threshold`` where ours fires at ``U > threshold``; and it decays as
    ``V - V / tau`` where ours computes ``beta * U`` (a rounding apart). With a tau so
    large that V / tau rounds away (beta = 1) the two equations coincide."""
    _quiet_triton_probe()
    from spikingjelly.activation_based import neuron, surrogate

    return neuron.LIFNode(tau=tau, decay_input=False, v_threshold=threshold, v_reset=None,
                          surrogate_function=surrogate.ATan(alpha=ATAN_ALPHA),
                          detach_reset=True, step_mode="m")


def _quiet_triton_probe() -> None:
    # SpikingJelly registers its ops through torch.library.triton_op, whose probe for
    # Triton logs a warning per op on a machine without it (a CPU has no use for it).
    logging.getLogger("torch._library.triton").setLevel(logging.ERROR)


class SpikingJellyNet(DenseNet):
    """SpikingJelly 2.0: ``nn.Linear`` on all T steps at once (as its
    ``SeqToANNContainer``), then a multi-step ``LIFNode`` (:func:`spikingjelly_lif`) per
    layer; the neurons' state is reset before every step."""

    def __init__(self, problem: dict, lr: float, adam: str, tau: Optional[float] = None):
        super().__init__(problem, lr, adam)
        tau = spikingjelly_tau(BETA) if tau is None else tau
        self.lifs = [spikingjelly_lif(tau, THRESHOLD) for _ in self.fcs]

    def forward(self) -> torch.Tensor:
        h = self.x
        outputs = []
        for fc, lif in zip(self.fcs, self.lifs):
            lif.reset()
            h = lif(fc(h))
            outputs.append(h)
        self._count(outputs)
        return h


def spike_atan(x: torch.Tensor) -> torch.Tensor:
    """S = (x > 0) forward, the ATan surrogate backward, in plain tensor ops that
    ``torch.compile`` traces whole: the step plus ``p - p.detach()`` (exactly zero) for
    ``p = atan(pi/2 * alpha * x) / pi``, whose derivative is the surrogate
    (alpha/2) / (1 + (pi/2 * alpha * x)^2)."""
    p = torch.atan((math.pi / 2 * ATAN_ALPHA) * x) / math.pi
    return (x > 0).to(x.dtype) + (p - p.detach())


def compiled_lif_layer(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       beta: float, threshold: float) -> torch.Tensor:
    """One layer of the torch loop's network (one GEMM on all T steps, then the per-step
    neuron update, T unrolled) with :func:`spike_atan` for the spike: what
    :class:`TorchCompileNet` compiles."""
    currents = F.linear(x, weight, bias)
    u = torch.zeros_like(currents[0])
    s = torch.zeros_like(currents[0])
    spikes = []
    for t in range(currents.shape[0]):
        u = beta * u + currents[t] - s.detach() * threshold
        s = spike_atan(u - threshold)
        spikes.append(s)
    return torch.stack(spikes)


def lif_cell(current: torch.Tensor, u: torch.Tensor, s: torch.Tensor, beta: float,
             threshold: float):
    """One timestep of one layer's neurons, ``(U[t], S[t])`` from ``I[t]``, ``U[t-1]`` and
    ``S[t-1]``, with :func:`spike_atan` for the spike: what :class:`TorchCompileStepNet`
    compiles."""
    u = beta * u + current - s.detach() * threshold
    return u, spike_atan(u - threshold)


_COMPILED: dict = {}
#: Compiled graphs one function may keep: one per layer width over every config of a
#: run; dynamo's default (8) was reached within one run of digits, S and L (when the
#: cell's first step compiled apart: 10), after which it ran the function uncompiled,
#: with a log warning only.
GRAPHS_PER_FUNCTION = 64


def _compiled(fn):
    # One torch.compile object per function and process: layers and networks of the same
    # shapes reuse its compiled graphs (dynamo caches them on the function's code).
    if fn not in _COMPILED:
        import torch._dynamo

        config = torch._dynamo.config
        config.cache_size_limit = max(config.cache_size_limit, GRAPHS_PER_FUNCTION)
        if hasattr(config, "fail_on_cache_limit_hit"):  # an error, not eager timings
            config.fail_on_cache_limit_hit = True
        _COMPILED[fn] = torch.compile(fn, dynamic=False)
    return _COMPILED[fn]


def _compile_counts() -> dict:
    """Dynamo's and inductor's counts so far in this process (empty where this torch
    keeps none)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return {}
    return {"graphs_traced": counters["stats"]["unique_graphs"],
            "inductor_graph_cache_misses": counters["inductor"]["fxgraph_cache_miss"],
            "inductor_graph_cache_hits": counters["inductor"]["fxgraph_cache_hit"]}


class _Compiled(DenseNet):
    """A dense peer whose constructor compiles: a forward and backward pass whose
    gradients are dropped, timed apart (``compile_s``): a training run pays it once per
    shape. ``compile_cache`` says what that pass did: graphs dynamo traced, and inductor
    lowered (a miss of its on-disk graph cache: C++ generated, and compiled unless its
    on-disk kernel cache has that code) or loaded (a hit); all 0: an earlier network of
    the same shapes in this process compiled them, and ``compile_s`` is a plain first
    pass."""

    def __init__(self, problem: dict, lr: float, adam: str):
        super().__init__(problem, lr, adam)
        before = _compile_counts()
        t0 = time.perf_counter()
        F.cross_entropy(self.forward().sum(0), self.y).backward()
        self.compile_s = time.perf_counter() - t0
        after = _compile_counts()
        self.compile_cache = {key: after[key] - before[key] for key in after}
        self.opt.zero_grad(set_to_none=True)


class TorchCompileNet(_Compiled):
    """The torch loop's network under ``torch.compile`` (inductor; on a CPU it emits
    C++/OpenMP kernels): each layer, forward and backward, is one compiled graph in which
    the T steps' elementwise updates are fused (:func:`compiled_lif_layer`, T unrolled:
    compiling takes minutes per layer shape at T=100, see ``compile_s``)."""

    def forward(self) -> torch.Tensor:
        layer = _compiled(compiled_lif_layer)
        h = self.x
        outputs = []
        for fc in self.fcs:
            h = layer(h, fc.weight, fc.bias, BETA, THRESHOLD)
            outputs.append(h)
        self._count(outputs)
        return h


class TorchCompileStepNet(_Compiled):
    """The torch loop with its per-step neuron update compiled: per layer one GEMM on
    all T steps (``nn.Linear``, as the torch loop), then a Python loop over T of the
    compiled one-step cell :func:`lif_cell` (inductor fuses the update, the threshold
    and the surrogate into one C++ loop forward and one backward). What a user tries
    when compiling the whole unrolled loop takes minutes: the cell compiles in seconds,
    once per layer width (``compile_s``)."""

    def forward(self) -> torch.Tensor:
        cell = _compiled(lif_cell)
        h = self.x
        outputs = []
        for fc in self.fcs:
            currents = fc(h)
            # step 0 from zero state (U = I[0]) outside the cell, and S[t-1] passed
            # detached (the cell detaches it anyway): every call of the cell then has
            # the same inputs needing gradients, so it compiles once per layer width
            u = currents[0]
            s = spike_atan(u - THRESHOLD)
            spikes = [s]
            for t in range(1, currents.shape[0]):
                u, s = cell(currents[t], u, s.detach(), BETA, THRESHOLD)
                spikes.append(s)
            h = torch.stack(spikes)
            outputs.append(h)
        self._count(outputs)
        return h


def build(problem: dict, backend: str, lr: float, adam: str) -> TrainingNet:
    """The network of ``backend`` (one of :data:`~snn_ipu.bench.configs.BACKENDS`)."""
    if backend == "emulator_sparse":
        return OursNet(problem, "emulator", SPARSE_WINDOW, lr, adam)
    if backend == "emulator_exact":
        return OursNet(problem, "emulator", None, lr, adam)
    if backend == "reference":
        return OursNet(problem, "reference", None, lr, adam)
    if backend == "snntorch":
        return SnnTorchNet(problem, lr, adam)
    if backend == "spikingjelly":
        return SpikingJellyNet(problem, lr, adam)
    if backend == "torch_loop":
        return TorchLoopNet(problem, lr, adam)
    if backend == "torch_compile":
        return TorchCompileNet(problem, lr, adam)
    if backend == "torch_compile_step":
        return TorchCompileStepNet(problem, lr, adam)
    raise ValueError(f"unknown backend {backend!r}")


def family_status(family: str) -> Optional[str]:
    """None when a backend family can run here, else why not (the import error)."""
    try:
        if family == "emulator":
            from ..backends import emulator  # noqa: F401
        elif family == "snntorch":
            import snntorch  # noqa: F401
        elif family == "spikingjelly":
            _quiet_triton_probe()
            from spikingjelly.activation_based import neuron, surrogate  # noqa: F401
        elif family == "torch_compile":
            _check_inductor()
    except Exception as exc:  # ImportError, or a broken extension or package
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_inductor() -> None:
    """Compiles a tiny function with inductor: raises where it cannot run here (no C++
    compiler, an unsupported platform)."""
    fn = torch.compile(lambda a: (a * 2 + 1).relu(), dynamic=False)
    a = torch.arange(8.0)
    if not torch.equal(fn(a), (a * 2 + 1).relu()):
        raise RuntimeError("torch.compile computed a wrong result")
