"""One configuration's sweep over activities: the rows of the results JSON.

For each target activity: make the problem (calibrated random weights; a network in
training has one row, at its trained weights: :mod:`.trained`), time every backend side by
side (:mod:`.timing`), measure peak memory in subprocesses (:mod:`.memory`), time the
emulator on 1 and 2 threads and the spike-matmul kernel (:mod:`.kernel`), then derive
the measured activity, speed-ups and memory ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import __version__
from .configs import (
    BACKENDS,
    BETA,
    CONFIGS,
    DENSE_BASELINES,
    FAMILY,
    OURS,
    SPARSE_WINDOW,
    THRESHOLD,
)
from .kernel import dense_matmul_rate, spike_matmul_rate
from .memory import measure_memory
from .networks import spikingjelly_tau
from .report import row_label
from .timing import Entry, adam_step_cost, emulator_threads, paired_ratio, time_interleaved
from .trained import is_trained, trained_problem
from .workload import calibrate, make_problem

Status = Dict[str, Optional[str]]  # backend family -> None (available) or the error


def config_of(name: str, args: argparse.Namespace) -> dict:
    """The named config with ``--steps`` / ``--batch`` applied."""
    cfg = dict(CONFIGS[name])
    if args.steps is not None:
        cfg["T"] = args.steps
    if args.batch is not None:
        cfg["B"] = args.batch
    return cfg


def baseline_timed_rows(name: str, activities: Sequence[float],
                        args: argparse.Namespace) -> List[int]:
    """Indices of the activities at which the dense baselines are timed; the other rows
    reuse the nearest earlier timing (their cost does not depend on activity)."""
    mode = args.baseline_timing
    if mode == "auto":
        mode = "reuse" if name == "L" else "each"
    if mode == "reuse" and args.baseline_activities:
        # and the first row: it has no earlier timing to reuse, so it is timed anyway
        # (left out here, the result said "timed only at" activities that left it out)
        return sorted({0} | {min(range(len(activities)),
                                 key=lambda j, a=a: abs(activities[j] - a))
                             for a in args.baseline_activities})
    if mode == "reuse" and len(activities) > 3:
        return sorted({0, len(activities) // 2, len(activities) - 1})
    return list(range(len(activities)))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {"torch": torch.__version__, "snn_ipu": __version__}
    for pkg in ("snntorch", "spikingjelly"):
        try:
            from importlib.metadata import version

            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = None
    return out


#: How each backend's activity is measured (the JSON's method).
ACTIVITY_TEXT = ("spikes / (T*B*N) per layer: ours, the mean over its timed steps of its "
                 "layers' own counts; a dense peer's, counted in one forward pass of its own "
                 "after its timed steps (at the same weights with lr 0), not inside the "
                 "timed steps")


def method_text(args: argparse.Namespace, calib_backend: str) -> Dict[str, str]:
    """How each number was measured, written into the JSON next to it."""
    return {
        "time": "median of repeated full training steps (forward, backward, Adam) after "
                f"1 warm-up step; up to {args.repeats} repeats or {args.max_seconds}s per "
                "backend and activity; backends (and 1/2 threads) interleaved one timed "
                "step each per round, steps under 1 s preceded by an untimed one; speed-ups "
                "= median over rounds of the paired step ratios where both were timed in "
                "the same rounds, else the ratio of medians (see speedup_paired); 1 vs 2 "
                "threads: the emulator's executor and torch's intra-op threads (Adam, loss, "
                f"BLAS paths) both set to 1 or 2, up to {args.thread_repeats} repeats each; "
                "SparseSpikes input built once outside the timed region",
        "memory": "subprocess per (backend, config, activity); glibc malloc mmap/trim "
                  "thresholds 128 KiB; RSS high-water mark reset (/proc/self/clear_refs=5) "
                  "before the measured step; peak = VmHWM - VmRSS over one training step; "
                  "warm-up on a 2-step 1-sample slice, Adam state allocated before"
                  if args.memory else "not measured (--no-memory)",
        "activity": "input density = target; per-layer weight gain bisected on a forward "
                    f"pass ({calib_backend}); reported activity = " + ACTIVITY_TEXT,
        "spike_matmul": "the SpikeMatmul kernel alone (emulator.spike_matmul) on layer 1's "
                        "input and weights: the input list's repack and the vertex calls "
                        "over every tile, step and sample (busiest thread), timed in the "
                        "extension; each tile's weight block built by its thread right "
                        "before its steps, untimed; adds = input spikes x out neurons; "
                        "torch.mm of the dense [T*B, in] x [in, out] timed in turn with it, "
                        "median of the per-round rate ratios",
        "peers": "same network, weights, inputs, loss (cross-entropy of output spike "
                 "counts) and Adam for every backend. spikingjelly: nn.Linear on all T "
                 "steps, multi-step LIFNode(decay_input=False, tau=1/(1-beta)="
                 f"{spikingjelly_tau(BETA):.6g}, v_reset=None, detach_reset=True, ATan(2)), "
                 "which subtracts the threshold before the next decay (ours after); "
                 "torch_loop: nn.Linear on all T steps, then a Python loop over T of "
                 "U = beta*U + I - S*thr with an ATan-surrogate Heaviside; torch_compile: "
                 "the torch loop's layers (T unrolled, the surrogate as atan's derivative) "
                 "under torch.compile (inductor, default mode), compiled once per shape "
                 "before timing (compile_s, not in the step times); torch_compile_step: "
                 "the torch loop with its one-step neuron cell (update, threshold, "
                 "surrogate) under torch.compile, the Python loop over T around it, "
                 "compiled before timing (compile_s). compile_s = the network's first "
                 "forward and backward pass in this process; compile_cache: the graphs "
                 "dynamo traced in it, and inductor's graph-cache misses (lowered; their "
                 "C++ compiled unless its kernel cache on disk has it) and hits (loaded); "
                 "all 0 where an earlier network of the same shapes in the process "
                 "compiled them; snntorch: "
                 "nn.Linear + snntorch.Leaky per step",
    }


def new_result(name: str, cfg: dict, args: argparse.Namespace, status: Status,
               calib_backend: str, timed_rows: Sequence[int]) -> dict:
    """The config's header: machine, versions, method, backends available."""
    activities = list(args.activities)
    timed = [activities[j] for j in timed_rows]
    each = len(timed_rows) == len(activities)
    return {
        "config": name, "sizes": list(cfg["sizes"]), "T": cfg["T"], "B": cfg["B"],
        "beta": BETA, "threshold": THRESHOLD, "sparse_grad_window": SPARSE_WINDOW,
        "sparse_grad_window_layers": "hidden (the spiking output layer exact, as the "
                                     "trainer's)",
        "lr": args.lr, "seed": args.seed,
        "optimizer": dict(requested=f"Adam ({args.adam}), every backend",
                          **adam_step_cost(cfg)),
        "machine": {"platform": platform.platform(), "processor": _cpu_model(),
                    "cpus_available": len(os.sched_getaffinity(0)),
                    "torch_threads": torch.get_num_threads(),
                    "emulator_threads": emulator_threads(), **_versions()},
        "backends": {b: {"available": status[FAMILY[b]] is None, "error": status[FAMILY[b]]}
                     for b in BACKENDS},
        "method": method_text(args, calib_backend),
        "baseline_timing": (
            "dense baselines timed at each activity" if each
            else f"dense baselines timed only at activities {timed} and reused (nearest "
                 "earlier timed activity, in log scale) for the others: their cost does not "
                 "depend on activity; see 'timed' and 'reused_from' in each row"),
        "baseline_timed_activities": timed,
        "rows": [],
    }


def _nearest_earlier(i: int, timed_rows: Sequence[int], activities: Sequence[float]):
    earlier = [j for j in timed_rows if j < i]
    if not earlier:
        return None
    return min(earlier, key=lambda j: abs(math.log(activities[j]) - math.log(activities[i])))


def _reused(prev_rows: List[dict], src: int, backend: str, activity: float) -> Optional[dict]:
    prev = prev_rows[src]["results"].get(backend)
    if prev is None:
        return None
    res = {k: v for k, v in prev.items() if k not in ("activity", "traceback")}
    res.update(timed=False, reused_from=activity)
    return res


def summarize_row(row: dict) -> None:
    """Adds the measured activity, speed-ups of ours over each dense backend and memory
    ratios to a row whose results are in."""
    res = row["results"]
    for b in BACKENDS:  # measured activity: ours first, else any backend that has it
        act = res.get(b, {}).get("activity")
        if act is not None:
            row["measured_activity"] = {"input": row["input_activity"], "source": b,
                                        **{f"layer{i + 1}": a for i, a in enumerate(act)}}
            row["measured_hidden_activity"] = statistics.fmean(act[:2])
            break
    row["speedup"], row["speedup_paired"], row["memory_ratio"] = {}, [], {}
    for fast in OURS:
        rf = res.get(fast, {})
        for base in DENSE_BASELINES:
            rb = res.get(base, {})
            key = f"{fast}_vs_{base}"
            if rf.get("median_s") and rb.get("median_s"):
                if rb.get("timed") and rf.get("times_s") and rb.get("times_s"):
                    row["speedup"][key] = paired_ratio(rb["times_s"], rf["times_s"])
                    row["speedup_paired"].append(key)
                else:
                    row["speedup"][key] = rb["median_s"] / rf["median_s"]
            mf = rf.get("memory", {}).get("peak_delta_bytes")
            mb = rb.get("memory", {}).get("peak_delta_bytes")
            if mf and mb:
                row["memory_ratio"][f"{fast}_over_{base}"] = mf / mb


def _thread_check(row: dict, timed: Dict[str, dict]) -> None:
    row["threads"] = {str(n): timed[f"threads={n}"] for n in (1, 2)}
    t1, t2 = row["threads"]["1"].get("times_s"), row["threads"]["2"].get("times_s")
    if t1 and t2:
        row["threads"]["speedup_2_vs_1"] = paired_ratio(t1, t2)
        row["threads"]["ratio_of_medians"] = statistics.median(t1) / statistics.median(t2)


def calibrated_problem(cfg: dict, ai: int, args: argparse.Namespace,
                       calib_backend: str) -> Tuple[dict, dict]:
    """The problem of activity ``ai`` (calibrated random weights) and its row's start."""
    target = args.activities[ai]
    problem = make_problem(cfg, target, seed=args.seed + 1000 * ai)
    row: dict = {"workload": "calibrated", "target_activity": target, "results": {}}
    try:
        calibrate(problem, calib_backend)
        row["calibration"] = problem["calibration"]
    except Exception as exc:
        row["calibration"] = {"error": f"{type(exc).__name__}: {exc}"}
    return problem, row


def run_row(name: str, problem: dict, row: dict, ai: int, args: argparse.Namespace,
            status: Status, timed_rows: Sequence[int], prev_rows: List[dict],
            tmpdir: str, log: Callable[[str], None]) -> dict:
    """One row of a config (``problem`` at one activity, started as ``row``): every
    backend timed, memory, threads, kernel rate."""
    activities = list(args.activities)
    label = row_label(row)
    t_row = time.perf_counter()
    row["gains"] = problem["gains"]
    row["input_activity"] = float(problem["x"].mean())
    problem_path = os.path.join(tmpdir, f"problem_{name}_{ai}.pt")
    torch.save(problem, problem_path)

    entries = []
    for backend in args.backends:
        err = status[FAMILY[backend]]
        if err is not None:
            row["results"][backend] = {"error": err, "skipped": True}
            continue
        src = _nearest_earlier(ai, timed_rows, activities)
        if backend in DENSE_BASELINES and ai not in timed_rows and src is not None:
            reused = _reused(prev_rows, src, backend, activities[src])
            if reused is not None:
                row["results"][backend] = reused
                continue
        entries.append(Entry(backend, backend, None, args.repeats))
    thread_check = name in args.thread_configs and status["emulator"] is None
    if thread_check:
        entries += [Entry(f"threads={n}", "emulator_sparse", n, args.thread_repeats)
                    for n in (1, 2)]
    timed = time_interleaved(problem, entries, args.lr, args.adam, args.max_seconds)

    for e in entries:
        if e.threads is not None:
            continue
        res = timed[e.backend]
        if args.memory and "error" not in res and _measures_memory(e.backend, ai, timed_rows,
                                                                   args):
            res["memory"] = measure_memory(problem_path, e.backend, args.lr, args.adam,
                                           args.memory_timeout)
        row["results"][e.backend] = res
        log(f"  [{name} {label}] {e.backend:18s} " + _short(res))
    if thread_check:
        _thread_check(row, timed)
        for n in ("1", "2"):
            log(f"  [{name} {label}] emulator_sparse threads={n} "
                + _short(row["threads"][n]))
    if status["emulator"] is None:
        try:
            row["spike_matmul"] = spike_matmul_rate(problem)
        except Exception as exc:
            row["spike_matmul"] = {"error": f"{type(exc).__name__}: {exc}"}
    summarize_row(row)
    row["wall_s"] = time.perf_counter() - t_row
    return row


def _measures_memory(backend: str, ai: int, timed_rows: Sequence[int],
                     args: argparse.Namespace) -> bool:
    if args.quick:  # the first activity only, one of ours and one dense backend
        return ai == 0 and backend in ("emulator_sparse", "reference")
    if args.baseline_memory_once and backend in DENSE_BASELINES:
        return ai == timed_rows[0]
    return True


def _short(res: dict) -> str:
    if "error" in res:
        return "ERROR " + res["error"][:160]
    act = ",".join(f"{a:.4f}" for a in res["activity"])
    mem = res.get("memory", {}).get("peak_delta_bytes")
    mem_s = f" peak {mem / 2**20:.0f} MiB" if mem is not None else ""
    return f"{res['median_s'] * 1e3:9.1f} ms  (n={res['repeats']}) act [{act}]{mem_s}"


def run_config(name: str, args: argparse.Namespace, status: Status,
               log: Callable[[str], None] = print,
               partial_path: Optional[Path] = None) -> dict:
    """The whole sweep of one config; with ``partial_path``, the result so far is written
    there after every row, so that an interrupted run leaves its rows behind."""

    cfg = config_of(name, args)
    calib_backend = "emulator" if status["emulator"] is None else "reference"
    trained = is_trained(cfg)
    if trained:  # one row, at the trained network's own activity
        args = argparse.Namespace(**dict(vars(args), activities=[None]))
    timed_rows = baseline_timed_rows(name, args.activities, args)
    result = new_result(name, cfg, args, status, calib_backend, timed_rows)
    result["workload"] = "trained" if trained else "calibrated"
    if trained:
        result["method"]["activity"] = (
            f"the network's own after {cfg['train']['epochs']} epochs of training "
            f"(snn_ipu.training.train, {calib_backend} backend; see each row's 'training'), "
            "on the first B samples of its test set; no calibration; reported activity = "
            + ACTIVITY_TEXT)
    try:
        result["dense_matmul"] = dense_matmul_rate(cfg)
    except Exception as exc:
        result["dense_matmul"] = {"error": repr(exc)}
    with tempfile.TemporaryDirectory(prefix="snn_bench_") as tmpdir:
        for ai in range(len(args.activities)):
            if trained:
                folder = Path(partial_path).parent if partial_path is not None else Path(tmpdir)
                problem = trained_problem(name, cfg, args.seed, calib_backend, folder, log)
                row = {"workload": "trained", "target_activity": None,
                       "training": problem["training"], "results": {}}
            else:
                problem, row = calibrated_problem(cfg, ai, args, calib_backend)
            row = run_row(name, problem, row, ai, args, status, timed_rows, result["rows"],
                          tmpdir, log)
            result["rows"].append(row)
            if partial_path is not None:
                write_json(partial_path, dict(result, partial=True))
    return result


def write_json(path: os.PathLike, result: dict) -> None:
    """``result`` as JSON at ``path``, written atomically: a bench killed mid-write keeps
    the rows written before (``json.dump`` over the file itself left a cut, unreadable
    JSON that lost every row of the config)."""
    import json

    from ..checkpoint import write_atomically

    text = json.dumps(result, indent=1, default=str)
    write_atomically(Path(path), lambda f: f.write(text.encode()))
