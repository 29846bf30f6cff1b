"""Training-step benchmark: emulator (sparse / exact gradients) vs dense reference vs snnTorch.

One run times a full BPTT training step (forward, backward, Adam step) of the same
three-layer LIF network ``in -> h -> h -> out`` (loss: cross-entropy on the output
spike counts) on this machine, with

* ``emulator_sparse``: our emulator backend, ``grad_window = 0.1 * threshold``;
* ``emulator_exact``:  our emulator backend, ``grad_window = None`` (exact gradients);
* ``reference``:       our dense PyTorch backend (``grad_window = None``);
* ``snntorch``:        ``nn.Linear`` + ``snntorch.Leaky`` (ATan surrogate), Python loop over T.

All backends start from identical weights for a configuration and activity level.
Activity (fraction of neurons spiking per step) is set by the input spike density
(= the target) and by a per-layer weight gain found by bisection on a forward pass;
the activity that is *reported* is the one measured during the timed steps.

Methods (also written into the JSON under ``"method"``):

* time: median wall time of repeated steps after one warm-up step. The backends of
  an activity (and the emulator's step on 1 and on 2 threads: its executor and
  torch's intra-op threads both) are timed interleaved, one
  step of each in turn per round, so that a slow spell of a shared machine hits all
  of them alike and the ratios stay meaningful; a backend whose step is under 1 s
  runs an untimed step right before each timed one (warm caches, as in training). The input
  conversion to SparseSpikes happens once, outside the timed region (snnTorch gets
  the dense tensor). Every backend runs up to 15 rounds (``--repeats``); slow ones
  stop early (``--max-seconds`` of timed steps, at least one): a step of ~15 ms
  met a spell of the machine in 4 of 7 rounds of one run, which moved its median
  by a third. The two thread counts run ``--thread-repeats`` (15) rounds, the
  later ones between the two alone: a 2-thread step needs both vCPUs free; the
  speed-up is the median over rounds of the 1-thread step over the 2-thread one (as
  the kernel rate below; the JSON also keeps the ratio of the medians). The
  learning rate is tiny (``--lr``, default 1e-5) so that the weights, and with them
  the activity, stay at the calibrated point over the repeats; the cost of an Adam
  step does not depend on it.
  Adam is PyTorch's fused CPU implementation for every backend (``--adam fused``, the
  default; ``--adam default`` for torch's per-parameter passes). The JSON's
  ``"optimizer"`` records one step of each over the config's parameters: ~2.5-4.5 vs
  ~11-13 ms on L here, the same for every backend but 1/10 of a sparse step.
* peak memory: one subprocess per (backend, config, activity) with glibc's malloc
  told to hand big blocks back to the OS (``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``
  = 128 KiB); code paths are warmed up on a 2-step, 1-sample slice and Adam's state
  is allocated (a zero-gradient step) first, then the kernel's RSS high-water mark is
  reset (``/proc/self/clear_refs`` <- 5) and the reported number is
  ``VmHWM - VmRSS`` across one full training step (activations, gradients, lists).
  ``--quick`` measures memory at the first activity only, for emulator_sparse and
  reference.
* spike-matmul rate: the SpikeMatmul kernel alone (``emulator.spike_matmul``: the
  input list's repack and the vertex calls over every tile, step and sample, on the
  busiest thread, timed inside the extension; as in the layer, each tile's weight
  block is built by its thread right before its steps, untimed) on layer 1's input
  spikes and weights; adds = input spikes x out neurons. Compared with ``torch.mm``
  of the same dense shape ``[T*B, in] x [in, out]``, timed in turn with the kernel at
  each activity (one of each per round, median of the per-round ratios); the
  config's header also reports one torch.mm rate measured at its start.

Usage::

    python benchmarks/bench_training.py --out benchmarks/results/
    python benchmarks/bench_training.py --quick --out /tmp/bench
    python -m snn_ipu bench --configs S --activities 0.01 0.1
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import snn_ipu  # noqa: E402
from snn_ipu import LIFLayer, SparseSpikes  # noqa: E402

CONFIGS = {
    "S": dict(sizes=(700, 256, 256, 20), T=100, B=64),
    "L": dict(sizes=(2312, 1466, 1466, 10), T=100, B=48),
}
BACKENDS = ("emulator_sparse", "emulator_exact", "reference", "snntorch")
DENSE_BASELINES = ("reference", "snntorch")
DEFAULT_ACTIVITIES = (0.005, 0.01, 0.02, 0.05, 0.1, 0.3)
BETA, THRESHOLD = 0.9, 1.0
SPARSE_WINDOW = 0.1 * THRESHOLD
WEIGHT_MEAN = 0.25  # W0 ~ N(0.25, 1) / sqrt(fan_in), times a calibrated gain per layer
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


# --------------------------------------------------------------------------- backends
def emulator_status() -> Optional[str]:
    """None when the emulator backend imports, else the error text."""
    try:
        from snn_ipu.backends import emulator  # noqa: F401
    except Exception as exc:  # ImportError, or a broken extension
        return f"{type(exc).__name__}: {exc}"
    return None


def snntorch_status() -> Optional[str]:
    try:
        import snntorch  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def set_emulator_threads(n: int) -> None:
    from snn_ipu.backends import emulator

    emulator.set_num_threads(n)


def emulator_threads() -> Optional[int]:
    try:
        from snn_ipu.backends import emulator

        return emulator.get_num_threads()
    except Exception:
        return None


@contextlib.contextmanager
def threads_for_step(n: Optional[int]):
    """Runs the block on ``n`` threads (None: unchanged), then restores: the emulator's
    executor and torch's intra-op threads alike (Adam, the loss, and the BLAS paths a
    layer takes at high activity), so that "1 thread" is a training step on one core."""
    if n is None:
        yield
        return
    old_emulator, old_torch = emulator_threads(), torch.get_num_threads()
    set_emulator_threads(n)
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old_torch)
        if old_emulator is not None:
            set_emulator_threads(old_emulator)


# --------------------------------------------------------------------------- problem
def make_problem(cfg: dict, target: float, seed: int) -> dict:
    """Input spikes at density ``target``, labels, unit-gain weights W0 (seeded)."""
    sizes, T, B = cfg["sizes"], cfg["T"], cfg["B"]
    g = torch.Generator().manual_seed(seed)
    density = min(max(target, 1e-4), 1.0)
    x = (torch.rand(T, B, sizes[0], generator=g) < density).float()
    y = torch.randint(0, sizes[-1], (B,), generator=g)
    w0 = [
        (WEIGHT_MEAN + torch.randn(n_out, n_in, generator=g)) / math.sqrt(n_in)
        for n_in, n_out in zip(sizes[:-1], sizes[1:])
    ]
    return {"sizes": list(sizes), "T": T, "B": B, "x": x, "y": y, "w0": w0,
            "gains": [1.0] * len(w0), "target": target, "seed": seed}


def weights_of(problem: dict) -> List[torch.Tensor]:
    return [gain * w for gain, w in zip(problem["gains"], problem["w0"])]


def _layer_activity(layer: LIFLayer, out: SparseSpikes) -> float:
    act = layer.stats.get("activity")
    if act is None:
        T, B, N = out.dense_shape
        act = float(out.counts[..., 0].sum()) / (T * B * N)
    return float(act)


def calibrate(problem: dict, backend: str, tol: float = 0.1, max_iter: int = 12) -> dict:
    """Per layer, bisects the weight gain (log scale) until the layer's activity on
    this problem's input is within ``tol`` (relative) of the target."""
    target = problem["target"]
    sizes = problem["sizes"]
    spikes = SparseSpikes.from_dense(problem["x"])
    log = []
    gains = []
    with torch.no_grad():
        for i, w0 in enumerate(problem["w0"]):
            layer = LIFLayer(sizes[i], sizes[i + 1], beta=BETA, threshold=THRESHOLD,
                             grad_window=0.0, backend=backend)
            layer.bias.zero_()

            def run(gain, layer=layer, w0=w0, spikes=spikes):
                layer.weight.copy_(gain * w0)
                out = layer(spikes)
                return _layer_activity(layer, out), out

            lo, hi = None, None  # (log gain, activity) below / above target
            lg = 0.0
            best = None
            for _ in range(max_iter):
                act, out = run(math.exp(lg))
                err = abs(math.log(max(act, 1e-9) / target))
                if best is None or err < best[0]:
                    best = (err, lg, act, out)
                if abs(act / target - 1.0) <= tol:
                    break
                if act < target:
                    lo = lg
                else:
                    hi = lg
                if lo is None:
                    lg = hi - math.log(4.0)
                elif hi is None:
                    lg = lo + math.log(4.0)
                else:
                    lg = 0.5 * (lo + hi)
            _, lg, act, out = best
            gains.append(math.exp(lg))
            log.append({"layer": i + 1, "gain": math.exp(lg), "activity": act})
            spikes = SparseSpikes(out.ids, out.counts, out.num_neurons, out.values.detach(),
                                  validate=False)
    problem["gains"] = gains
    problem["calibration"] = {"backend": backend, "layers": log}
    return problem


# --------------------------------------------------------------------------- models
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


def adam_step_cost(cfg: dict, reps: int = 7) -> dict:
    """Median time of one Adam step over the config's parameters, per implementation:
    the same for every backend, and with the default one a sizeable part of a sparse step."""
    sizes = cfg["sizes"]
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params += [torch.nn.Parameter(torch.randn(n_out, n_in)),
                   torch.nn.Parameter(torch.zeros(n_out))]
    for prm in params:
        prm.grad = torch.randn_like(prm)
    out = {}
    for kind in ("default", "fused"):
        opt = make_adam(params, 1e-5, kind)
        opt.step()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        out[f"{kind}_ms"] = 1000 * statistics.median(times)
        out[f"{kind}_is_fused"] = bool(opt.defaults.get("fused"))
    return out


class OursNet:
    def __init__(self, problem: dict, backend: str, grad_window: Optional[float], lr: float,
                 adam: str):
        sizes = problem["sizes"]
        self.layers = []
        for i, w in enumerate(weights_of(problem)):
            layer = LIFLayer(sizes[i], sizes[i + 1], beta=BETA, threshold=THRESHOLD,
                             grad_window=grad_window, backend=backend, name=f"layer{i + 1}")
            with torch.no_grad():
                layer.weight.copy_(w)
                layer.bias.zero_()
            self.layers.append(layer)
        self.params = [p for layer in self.layers for p in layer.parameters()]
        self.opt = make_adam(self.params, lr, adam)
        self.x = SparseSpikes.from_dense(problem["x"])  # once, outside the timed region
        self.y = problem["y"]

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        s = self.x
        for layer in self.layers:
            s = layer(s)
        loss = F.cross_entropy(s.spike_counts(), self.y)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def activity(self) -> List[float]:
        return [float(layer.stats.get("activity", float("nan"))) for layer in self.layers]


class SnnTorchNet:
    def __init__(self, problem: dict, lr: float, adam: str):
        import snntorch as snn
        from snntorch import surrogate

        sizes = problem["sizes"]
        self.fcs, self.lifs = [], []
        for i, w in enumerate(weights_of(problem)):
            fc = torch.nn.Linear(sizes[i], sizes[i + 1])
            with torch.no_grad():
                fc.weight.copy_(w)
                fc.bias.zero_()
            self.fcs.append(fc)
            self.lifs.append(snn.Leaky(beta=BETA, threshold=THRESHOLD,
                                       spike_grad=surrogate.atan(), reset_mechanism="subtract"))
        self.params = [p for fc in self.fcs for p in fc.parameters()]
        self.opt = make_adam(self.params, lr, adam)
        self.x = problem["x"]
        self.y = problem["y"]
        self._spikes = [0.0] * len(self.fcs)

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        mems = [lif.init_leaky() for lif in self.lifs]
        counts = 0
        n_spk = [0.0] * len(self.fcs)
        for t in range(self.x.shape[0]):
            h = self.x[t]
            for i, (fc, lif) in enumerate(zip(self.fcs, self.lifs)):
                h, mems[i] = lif(fc(h), mems[i])
                n_spk[i] += float(h.detach().sum())
            counts = counts + h
        loss = F.cross_entropy(counts, self.y)
        loss.backward()
        self.opt.step()
        self._spikes = n_spk
        return float(loss.detach())

    def activity(self) -> List[float]:
        T, B = self.x.shape[:2]
        return [s / (T * B * fc.out_features) for s, fc in zip(self._spikes, self.fcs)]


def build(problem: dict, backend: str, lr: float, adam: str):
    if backend == "emulator_sparse":
        return OursNet(problem, "emulator", SPARSE_WINDOW, lr, adam)
    if backend == "emulator_exact":
        return OursNet(problem, "emulator", None, lr, adam)
    if backend == "reference":
        return OursNet(problem, "reference", None, lr, adam)
    if backend == "snntorch":
        return SnnTorchNet(problem, lr, adam)
    raise ValueError(f"unknown backend {backend!r}")


# --------------------------------------------------------------------------- timing
WARM_BELOW_S = 1.0


def time_interleaved(problem: dict, entries: Sequence[tuple], args) -> Dict[str, dict]:
    """Times several (key, backend, threads, repeats) entries side by side: after one warm-up
    step each, every round times one step of every entry in turn, so a slow spell of
    a shared machine hits all of them alike and their ratios stay meaningful. Entries
    whose step takes under ``WARM_BELOW_S`` run one untimed step right before each
    timed one, so that they are timed with warm caches and allocator as in a training
    loop rather than straight after another backend's step (a second-long step's
    cost does not depend on that). An entry stops after its ``repeats`` steps or
    ``args.max_seconds`` of its own steps."""
    nets, out, warm = {}, {}, {}

    def failed(key: str, exc: Exception) -> None:
        out[key] = {"error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=4)}
        nets.pop(key, None)

    try:
        for key, backend, threads, _ in entries:
            try:
                with threads_for_step(threads):
                    nets[key] = build(problem, backend, args.lr, args.adam)
                    t0 = time.perf_counter()
                    nets[key].step()  # warm-up
                    warm[key] = time.perf_counter() - t0 < WARM_BELOW_S
            except Exception as exc:
                failed(key, exc)
        times = {key: [] for key in nets}
        acts = {key: [] for key in nets}
        for _ in range(max((reps for *_, reps in entries), default=0)):
            live = [(k, n) for k, _b, n, reps in entries
                    if k in nets and len(times[k]) < reps
                    and (not times[k] or sum(times[k]) < args.max_seconds)]
            if not live:
                break
            for key, threads in live:
                try:
                    with threads_for_step(threads):
                        if warm[key]:
                            nets[key].step()
                        t0 = time.perf_counter()
                        nets[key].step()
                        times[key].append(time.perf_counter() - t0)
                        acts[key].append(nets[key].activity())
                except Exception as exc:
                    failed(key, exc)
        for key in nets:
            a = acts[key]
            out[key] = {"median_s": statistics.median(times[key]), "times_s": times[key],
                        "repeats": len(times[key]), "timed": True,
                        "activity": [statistics.fmean(x[i] for x in a) for i in range(len(a[0]))]}
    finally:
        nets.clear()
        gc.collect()
    return out


# --------------------------------------------------------------------------- memory
def _proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def memory_worker(problem_path: str, backend: str, lr: float, adam: str) -> dict:
    """Runs in a fresh process: RSS high-water delta of one training step."""
    problem = torch.load(problem_path, weights_only=False)
    # Warm up the code paths on a tiny slice (2 steps, 1 sample), so that lazily loaded
    # code is in place but the heap holds no freed activations of a full-size step.
    tiny = dict(problem, x=problem["x"][:2, :1].contiguous(), y=problem["y"][:1])
    warm = build(tiny, backend, lr, adam)
    warm.step()
    del warm
    net = build(problem, backend, lr, adam)
    # Adam's state (2 x parameters) exists before the measured step: a zero-gradient step.
    for prm in net.params:
        prm.grad = torch.zeros_like(prm)
    net.opt.step()
    net.opt.zero_grad(set_to_none=True)
    gc.collect()
    reset_ok = True
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        reset_ok = False  # the high-water mark then includes set-up and warm-up
    rss0 = _proc_status_kb("VmRSS")
    net.step()
    hwm = _proc_status_kb("VmHWM")
    return {"peak_delta_bytes": (hwm - rss0) * 1024, "rss_before_bytes": rss0 * 1024,
            "hwm_bytes": hwm * 1024, "hwm_reset": reset_ok}


def measure_memory(problem_path: str, backend: str, lr: float, adam: str,
                   timeout: float) -> dict:
    env = dict(os.environ, **MALLOC_ENV)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_memory-worker", problem_path,
           backend, "--lr", str(lr), "--adam", adam]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"memory worker timed out after {timeout:.0f}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"memory worker failed (rc={proc.returncode}): {' | '.join(tail)}"}
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- kernel rates
def dense_matmul_rate(cfg: dict, reps: int = 5) -> dict:
    n_in, n_out = cfg["sizes"][0], cfg["sizes"][1]
    rows = cfg["T"] * cfg["B"]
    a = (torch.rand(rows, n_in) < 0.1).float()
    w = torch.randn(n_in, n_out)
    torch.mm(a, w)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, w)
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    macs = rows * n_in * n_out
    return {"shape": [rows, n_in, n_out], "median_s": sec, "macs": macs, "macs_per_s": macs / sec,
            "torch_threads": torch.get_num_threads()}


def spike_matmul_rate(problem: dict, reps: int = 21) -> dict:
    """The spike-matmul kernel alone (``emulator.spike_matmul``) on layer 1's input and
    weights, against ``torch.mm`` of the same dense shape timed in turn with it (one of
    each per round), so a slow spell of the machine hits both: adds/s = input spikes x
    out / time of the vertex calls; ratio = median over rounds of kernel adds/s over
    dense MAC/s."""
    from snn_ipu.backends.emulator import spike_matmul

    x = SparseSpikes.from_dense(problem["x"])
    w = weights_of(problem)[0]
    T, B, n_in = problem["x"].shape
    dense_in, dense_w = problem["x"].reshape(T * B, n_in).float(), w.t().contiguous()
    macs = T * B * n_in * w.shape[0]
    spike_matmul(x, w)  # warm-up
    torch.mm(dense_in, dense_w)
    kernel_s, dense_s = [], []
    adds = 0
    for _ in range(reps):
        _, sec, adds = spike_matmul(x, w)
        kernel_s.append(sec)
        t0 = time.perf_counter()
        torch.mm(dense_in, dense_w)
        dense_s.append(time.perf_counter() - t0)
    sec = statistics.median(kernel_s)
    ratios = [(adds / k) / (macs / d) for k, d in zip(kernel_s, dense_s) if k > 0]
    return {"input_spikes": int(x.counts[..., 0].sum()), "adds": adds, "median_s": sec,
            "adds_per_s": adds / sec if sec > 0 else float("nan"),
            "dense_macs_per_s": macs / statistics.median(dense_s),
            "ratio_to_dense_macs": statistics.median(ratios) if ratios else float("nan"),
            "method": "SpikeMatmul vertex calls over every tile, step and sample of layer 1 "
                      "(host plan, emulator threads), each tile's weight block built (untimed) by "
                      "its thread right before its steps; torch.mm "
                      f"of the dense [T*B, in] x [in, out] timed in turn with it, {reps} rounds"}


# --------------------------------------------------------------------------- sweep
def nearest_timed(i: int, timed: Sequence[int], activities: Sequence[float]) -> int:
    return min(timed, key=lambda j: abs(math.log(activities[j]) - math.log(activities[i])))


def run_config(name: str, args, status: Dict[str, Optional[str]], log=print,
               partial_path: Optional[Path] = None) -> dict:
    cfg = dict(CONFIGS[name])
    if args.steps is not None:
        cfg["T"] = args.steps
    if args.batch is not None:
        cfg["B"] = args.batch
    activities = list(args.activities)
    backends = [b for b in args.backends]
    mode = args.baseline_timing
    if mode == "auto":
        mode = "reuse" if name == "L" else "each"
    timed_baseline = list(range(len(activities)))
    if mode == "reuse" and args.baseline_activities:
        timed_baseline = sorted(
            {min(range(len(activities)), key=lambda j, a=a: abs(activities[j] - a))
             for a in args.baseline_activities}
        )
    elif mode == "reuse" and len(activities) > 3:
        timed_baseline = sorted({0, len(activities) // 2, len(activities) - 1})
    calib_backend = "emulator" if status["emulator"] is None else "reference"
    thread_check = name in args.thread_configs and status["emulator"] is None
    mach_threads = len(os.sched_getaffinity(0))

    result = {
        "config": name, "sizes": list(cfg["sizes"]), "T": cfg["T"], "B": cfg["B"],
        "beta": BETA, "threshold": THRESHOLD, "sparse_grad_window": SPARSE_WINDOW,
        "lr": args.lr, "seed": args.seed,
        "optimizer": dict(requested=f"Adam ({args.adam}), every backend",
                          **adam_step_cost(cfg)),
        "machine": {"platform": platform.platform(), "processor": _cpu_model(),
                    "cpus_available": mach_threads, "torch_threads": torch.get_num_threads(),
                    "emulator_threads": emulator_threads(), "torch": torch.__version__,
                    "snn_ipu": snn_ipu.__version__},
        "backends": {b: {"available": status[_family(b)] is None, "error": status[_family(b)]}
                     for b in BACKENDS},
        "method": {
            "time": "median of repeated full training steps (forward, backward, Adam) after "
                    f"1 warm-up step; up to {args.repeats} repeats or {args.max_seconds}s per "
                    "backend and activity; backends (and 1/2 threads) interleaved one "
                    "timed step each per round, steps under 1 s preceded by an untimed one; "
                    "1 vs 2 threads: the emulator's executor and torch's intra-op threads "
                    "(Adam, loss, BLAS paths) both set to 1 or 2, up to "
                    f"{args.thread_repeats} repeats each (the rounds after the backends' "
                    "last time the two thread counts only), speed-up = median over rounds "
                    "of the 1-thread over the 2-thread step; "
                    "SparseSpikes input built once outside the timed region",
            "memory": "subprocess per (backend, config, activity); glibc malloc mmap/trim "
                      "thresholds 128 KiB; before the measured step the RSS high-water mark "
                      "is reset "
                      "(/proc/self/clear_refs=5); peak = VmHWM - VmRSS over one training step; "
                      "warm-up on a 2-step 1-sample slice, Adam state allocated before"
                      if args.memory else "not measured (--no-memory)",
            "activity": "input density = target; per-layer weight gain bisected on a forward "
                        f"pass ({calib_backend}); reported activity = mean over the timed steps "
                        "(layer.stats['activity'], spikes / (T*B*N))",
            "spike_matmul": "the SpikeMatmul kernel alone (emulator.spike_matmul) on layer 1's "
                            "input and weights: the input list's repack and the vertex calls "
                            "over every tile, step and sample (busiest thread), timed in the "
                            "extension; each tile's weight block is built by its thread right "
                            "before its steps, as in the layer, untimed; adds = input spikes "
                            "x out neurons",
        },
        "baseline_timing": (
            "dense baselines (reference, snnTorch) timed at each activity" if mode == "each"
            else "dense baselines timed only at activities "
                 f"{[activities[j] for j in timed_baseline]} and reused (nearest earlier "
                 "timed activity, in log scale) for the others: their cost does not depend "
                 "on activity; see 'timed' and 'reused_from' in each row"),
        "baseline_timed_activities": [activities[j] for j in timed_baseline],  # planned
        "rows": [],
    }
    try:
        result["dense_matmul"] = dense_matmul_rate(cfg)
    except Exception as exc:
        result["dense_matmul"] = {"error": repr(exc)}

    tmpdir = tempfile.mkdtemp(prefix="snn_bench_")
    for ai, target in enumerate(activities):
        t_row = time.perf_counter()
        problem = make_problem(cfg, target, seed=args.seed + 1000 * ai)
        row = {"target_activity": target, "results": {}}
        try:
            calibrate(problem, calib_backend)
            row["calibration"] = problem["calibration"]
        except Exception as exc:
            row["calibration"] = {"error": f"{type(exc).__name__}: {exc}"}
        row["gains"] = problem["gains"]
        T, B = cfg["T"], cfg["B"]
        row["input_activity"] = float(problem["x"].sum()) / (T * B * cfg["sizes"][0])
        problem_path = os.path.join(tmpdir, f"problem_{name}_{ai}.pt")
        torch.save(problem, problem_path)

        to_time = []
        for backend in backends:
            fam = _family(backend)
            if status[fam] is not None:
                row["results"][backend] = {"error": status[fam], "skipped": True}
                continue
            earlier = [j for j in timed_baseline if j < ai]
            if backend in DENSE_BASELINES and ai not in timed_baseline and earlier:
                src = nearest_timed(ai, earlier, activities)
                prev = result["rows"][src]["results"].get(backend)
                if prev is not None:
                    row["results"][backend] = {
                        k: v for k, v in prev.items() if k not in ("activity", "traceback")
                    }
                    row["results"][backend].update(timed=False, reused_from=activities[src])
                    continue
            to_time.append((backend, backend, None, args.repeats))
        if thread_check:
            to_time += [(f"threads={n}", "emulator_sparse", n, args.thread_repeats)
                        for n in (1, 2)]
        timed = time_interleaved(problem, to_time, args)

        for backend, _, threads, _ in to_time:
            if threads is not None:
                continue
            res = timed[backend]
            quick_mem = ai == 0 and backend in ("emulator_sparse", "reference")
            dense_again = backend in DENSE_BASELINES and ai != timed_baseline[0]
            skip_mem = (args.quick and not quick_mem) or (args.baseline_memory_once
                                                           and dense_again)
            if args.memory and "error" not in res and not skip_mem:
                mem = measure_memory(problem_path, backend, args.lr, args.adam,
                                     args.memory_timeout)
                res["memory"] = mem
            row["results"][backend] = res
            log(f"  [{name} {target:g}] {backend:16s} " + _short(res))

        if thread_check:
            row["threads"] = {}
            for n in (1, 2):
                res = timed[f"threads={n}"]
                row["threads"][str(n)] = res
                log(f"  [{name} {target:g}] emulator_sparse threads={n} " + _short(res))
            t1 = row["threads"]["1"].get("times_s")
            t2 = row["threads"]["2"].get("times_s")
            if t1 and t2:
                # Paired by round, as the kernel rate: the two steps of a round run
                # back to back, so a busy spell of the machine hits both.
                row["threads"]["speedup_2_vs_1"] = statistics.median(
                    a / b for a, b in zip(t1, t2))
                row["threads"]["ratio_of_medians"] = (statistics.median(t1)
                                                      / statistics.median(t2))
        if status["emulator"] is None:
            try:
                row["spike_matmul"] = spike_matmul_rate(problem)
            except Exception as exc:
                row["spike_matmul"] = {"error": f"{type(exc).__name__}: {exc}"}

        # measured activity: from our sparse emulator run, else any run that has it
        for b in ("emulator_sparse", "emulator_exact", "reference", "snntorch"):
            r = row["results"].get(b, {})
            if r.get("activity") is not None:
                per_layer = {f"layer{i + 1}": a for i, a in enumerate(r["activity"])}
                row["measured_activity"] = {"input": row["input_activity"], "source": b,
                                            **per_layer}
                row["measured_hidden_activity"] = statistics.fmean(r["activity"][:2])
                break
        row["speedup"] = {}
        for fast in ("emulator_sparse", "emulator_exact"):
            tf = row["results"].get(fast, {}).get("median_s")
            for base in DENSE_BASELINES:
                tb = row["results"].get(base, {}).get("median_s")
                if tf and tb:
                    row["speedup"][f"{fast}_vs_{base}"] = tb / tf
        row["memory_ratio"] = {}
        for fast in ("emulator_sparse", "emulator_exact"):
            mf = row["results"].get(fast, {}).get("memory", {}).get("peak_delta_bytes")
            for base in DENSE_BASELINES:
                mb = row["results"].get(base, {}).get("memory", {}).get("peak_delta_bytes")
                if mf and mb:
                    row["memory_ratio"][f"{fast}_over_{base}"] = mf / mb
        row["wall_s"] = time.perf_counter() - t_row
        result["rows"].append(row)
        if partial_path is not None:  # a partial result survives an interrupted run
            with open(partial_path, "w") as f:
                json.dump(dict(result, partial=True), f, indent=1, default=str)
    return result


def _family(backend: str) -> str:
    return {"emulator_sparse": "emulator", "emulator_exact": "emulator",
            "reference": "reference", "snntorch": "snntorch"}[backend]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _short(res: dict) -> str:
    if "error" in res:
        return "ERROR " + res["error"][:160]
    act = ",".join(f"{a:.4f}" for a in res["activity"])
    mem = res.get("memory", {}).get("peak_delta_bytes")
    mem_s = f" peak {mem / 2**20:.0f} MiB" if mem is not None else ""
    return f"{res['median_s'] * 1e3:9.1f} ms  (n={res['repeats']}) act [{act}]{mem_s}"


# --------------------------------------------------------------------------- report
def _fmt_t(res: Optional[dict]) -> str:
    if not res or res.get("median_s") is None:
        return "-"
    s = f"{res['median_s'] * 1e3:.0f}" if res["median_s"] >= 0.1 else f"{res['median_s'] * 1e3:.1f}"
    return s + ("*" if res.get("timed") is False else "")


def _fmt_m(res: Optional[dict]) -> str:
    m = (res or {}).get("memory", {}).get("peak_delta_bytes")
    return "-" if m is None else f"{m / 2**20:.0f}"


def table(result: dict) -> str:
    lines = [
        f"== config {result['config']}: {'-'.join(map(str, result['sizes']))}, "
        f"T={result['T']}, B={result['B']} ==",
        "activity = measured fraction spiking per step (input / layer1 / layer2 / out); "
        "times = median ms per training step (* = reused dense-baseline timing); "
        "x = speedup of emulator over baseline; mem = peak MiB of a step",
    ]
    hdr = (f"{'target':>6} {'in':>6} {'l1':>6} {'l2':>6} {'out':>6} | {'emu_sp':>7} {'emu_ex':>7} "
           f"{'ref':>7} {'snnT':>7} | {'sp/ref':>6} {'ex/ref':>6} {'sp/snn':>6} {'ex/snn':>6} | "
           f"{'mem sp':>6} {'ex':>6} {'ref':>6} {'snn':>6} | {'add/MAC':>7} {'2t/1t':>5}")
    lines += [hdr, "-" * len(hdr)]
    for row in result["rows"]:
        act = row.get("measured_activity", {})
        r = row["results"]
        sp = row["speedup"]

        def x(key, sp=sp):
            return f"{sp[key]:.1f}" if key in sp else "-"

        def a(key, act=act):
            return f"{act[key]:.4f}" if key in act else "-"

        sm = row.get("spike_matmul", {}).get("ratio_to_dense_macs")
        th = row.get("threads", {}).get("speedup_2_vs_1")
        lines.append(
            f"{row['target_activity']:>6g} {row['input_activity']:>6.4f} {a('layer1'):>6} "
            f"{a('layer2'):>6} {a('layer3'):>6} | "
            f"{_fmt_t(r.get('emulator_sparse')):>7} {_fmt_t(r.get('emulator_exact')):>7} "
            f"{_fmt_t(r.get('reference')):>7} {_fmt_t(r.get('snntorch')):>7} | "
            f"{x('emulator_sparse_vs_reference'):>6} {x('emulator_exact_vs_reference'):>6} "
            f"{x('emulator_sparse_vs_snntorch'):>6} {x('emulator_exact_vs_snntorch'):>6} | "
            f"{_fmt_m(r.get('emulator_sparse')):>6} {_fmt_m(r.get('emulator_exact')):>6} "
            f"{_fmt_m(r.get('reference')):>6} {_fmt_m(r.get('snntorch')):>6} | "
            f"{'-' if sm is None else f'{sm:.2f}':>7} {'-' if th is None else f'{th:.2f}':>5}"
        )
    dm = result.get("dense_matmul", {})
    if "macs_per_s" in dm:
        lines.append(f"dense torch.mm {dm['shape']}: {dm['macs_per_s'] / 1e9:.1f} GMAC/s "
                     f"({dm['torch_threads']} torch threads)")
    for b, st in result["backends"].items():
        if not st["available"]:
            lines.append(f"{b}: unavailable ({st['error']})")
    errs = {(row["target_activity"], b): res["error"] for row in result["rows"]
            for b, res in row["results"].items() if "error" in res and not res.get("skipped")}
    for (t, b), e in errs.items():
        lines.append(f"error at {t:g} {b}: {e[:200]}")
    lines.append("baseline timing: " + result["baseline_timing"])
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"no plot: {exc}"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = list(BACKENDS) + ["emulator_sparse (1 thread)"]
    for b in series:
        xs, ys = [], []
        for row in result["rows"]:
            act = row.get("measured_hidden_activity")
            if b.endswith("(1 thread)"):
                res = row.get("threads", {}).get("1", {})
            else:
                res = row["results"].get(b, {})
            if act is None or res.get("median_s") is None:
                continue
            xs.append(act)
            ys.append(res["median_s"])
        if xs:
            style = "--" if "1 thread" in b else "-"
            ax.plot(xs, ys, style, marker="o", label=b)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured activity (mean of hidden layers, fraction spiking per step)")
    ax.set_ylabel("time per training step [s]")
    ax.set_title(f"config {result['config']}: {'-'.join(map(str, result['sizes']))}, "
                 f"T={result['T']}, B={result['B']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- main
def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {text}")
    return value


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_training", description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", default=["S", "L"], choices=sorted(CONFIGS))
    p.add_argument("--activities", nargs="+", type=_fraction, default=None,
                   help="target fractions of neurons spiking per step, in (0, 1] "
                        f"(default {' '.join(map(str, DEFAULT_ACTIVITIES))}; 0.02 0.1 with "
                        "--quick)")
    p.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    p.add_argument("--repeats", type=_positive_int, default=15,
                   help="timed steps per backend (max)")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="stop repeating a backend after this many seconds (>= 1 timed step)")
    p.add_argument("--baseline-timing", choices=("auto", "each", "reuse"), default="auto",
                   help="time dense baselines at each activity, or at 3 and reuse "
                        "(auto: each on S, reuse on L)")
    p.add_argument("--baseline-activities", nargs="+", type=float, default=None,
                   help="with reuse: the activities at which dense baselines are timed")
    p.add_argument("--baseline-memory-once", action="store_true",
                   help="measure dense baselines' peak memory at their first activity only")
    p.add_argument("--thread-configs", nargs="*", default=["L"], choices=sorted(CONFIGS),
                   help="configs on which emulator 1 vs 2 threads is timed")
    p.add_argument("--thread-repeats", type=_positive_int, default=15,
                   help="timed steps per thread count (max): a 2-thread step needs both "
                        "cores free, so a busy spell of one skews a short series")
    p.add_argument("--no-memory", dest="memory", action="store_false",
                   help="skip the per-step peak-memory subprocesses")
    p.add_argument("--memory-timeout", type=float, default=300.0)
    p.add_argument("--steps", type=_positive_int, default=None, help="override T")
    p.add_argument("--batch", type=_positive_int, default=None, help="override B")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--adam", choices=("fused", "default"), default="fused",
                   help="Adam implementation, the same for every backend (fused: PyTorch's "
                        "fused CPU kernel where the installed torch has it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: S only, T=20, B=32, 1 repeat, no thread check, results "
                        "in a temporary directory unless --out is given")
    p.add_argument("--out", default=None,
                   help="results directory (default benchmarks/results/, the committed run)")
    p.add_argument("--_memory-worker", nargs=2, metavar=("PROBLEM", "BACKEND"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.activities is None:
        args.activities = [0.02, 0.1] if args.quick else list(DEFAULT_ACTIVITIES)
    if args.quick:
        args.configs = ["S"]
        args.steps = args.steps or 20
        args.batch = args.batch or 32
        args.repeats = 1
        args.thread_repeats = 1
        args.max_seconds = min(args.max_seconds, 5.0)
        args.thread_configs = []
    return args


def results_dir(args: argparse.Namespace) -> Path:
    """--out, else the committed results' directory; a quick run never writes there."""
    if args.out is not None:
        return Path(args.out)
    if args.quick:
        return Path(tempfile.mkdtemp(prefix="snn_ipu_bench_"))
    return ROOT / "benchmarks" / "results"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args._memory_worker:
        res = memory_worker(args._memory_worker[0], args._memory_worker[1], args.lr,
                            args.adam)
        print(json.dumps(res))
        return 0
    out = results_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    status = {"emulator": emulator_status(), "reference": None, "snntorch": snntorch_status()}
    for fam, err in status.items():
        if err:
            print(f"note: backend {fam} unavailable: {err}")
    t0 = time.perf_counter()
    for name in args.configs:
        print(f"config {name} ...", flush=True)
        json_path = out / f"bench_{name}.json"
        result = run_config(name, args, status, partial_path=json_path)
        result["wall_s"] = time.perf_counter() - t0
        result["args"] = {k: v for k, v in vars(args).items() if not k.startswith("_")}
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1, default=str)
        err = plot(result, out / f"bench_{name}.png")
        print(table(result))
        print(f"wrote {json_path}" + ("" if err is None else f" ({err})"), flush=True)
    print(f"total {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
