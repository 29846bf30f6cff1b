"""Paired, interleaved timing of training steps.

The backends of an activity are timed side by side: after one warm-up step each, every
round times one step of every entry in turn, so that a slow spell of a shared machine
hits all of them alike and their ratios stay meaningful. Speed-ups are then taken as
medians of per-round ratios where the entries ran in the same rounds.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
import traceback
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence

import torch

from .networks import build, make_adam

#: Steps shorter than this are timed warm: an untimed step of the same backend right
#: before each timed one, as in a training loop, rather than straight after another
#: backend's step evicted its caches (a second-long step's cost does not depend on that).
WARM_BELOW_S = 1.0


class Entry(NamedTuple):
    """One timed series: its key in the results, the backend, the thread count (None:
    unchanged) and the most steps to time."""

    key: str
    backend: str
    threads: Optional[int]
    repeats: int


def emulator_threads() -> Optional[int]:
    """The emulator's thread count, or None where the emulator does not import."""
    try:
        from ..backends import emulator
    except Exception:
        return None
    return emulator.get_num_threads()


@contextlib.contextmanager
def threads_for_step(n: Optional[int]) -> Iterator[None]:
    """Runs the block on ``n`` threads (None: unchanged), then restores: the emulator's
    executor and torch's intra-op threads alike (Adam, the loss, and the BLAS paths a
    layer takes at high activity), so that "1 thread" is a training step on one core."""
    if n is None:
        yield
        return
    old_emulator, old_torch = emulator_threads(), torch.get_num_threads()
    if old_emulator is not None:
        from ..backends import emulator

        emulator.set_num_threads(n)
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old_torch)
        if old_emulator is not None:
            emulator.set_num_threads(old_emulator)


def time_interleaved(problem: dict, entries: Sequence[Entry], lr: float, adam: str,
                     max_seconds: float) -> Dict[str, dict]:
    """Times the entries side by side (see the module docstring). An entry stops after
    its ``repeats`` steps or ``max_seconds`` of its own timed steps (at least one); one
    that fails to build or raises in a step gets ``{"error", "traceback"}`` and the others
    go on."""
    nets, out, warm = {}, {}, {}

    def failed(key: str, exc: Exception) -> None:
        out[key] = {"error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=4)}
        nets.pop(key, None)

    try:
        for e in entries:
            try:
                with threads_for_step(e.threads):
                    nets[e.key] = build(problem, e.backend, lr, adam)
                    t0 = time.perf_counter()
                    nets[e.key].step()  # warm-up
                    warm[e.key] = time.perf_counter() - t0 < WARM_BELOW_S
            except Exception as exc:
                failed(e.key, exc)
        times: Dict[str, List[float]] = {key: [] for key in nets}
        acts: Dict[str, List[List[float]]] = {key: [] for key in nets}
        listed: Dict[str, Optional[List[dict]]] = {key: None for key in nets}
        for _ in range(max((e.repeats for e in entries), default=0)):
            live = [e for e in entries if e.key in nets and len(times[e.key]) < e.repeats
                    and sum(times[e.key]) < max_seconds]
            if not live:
                break
            for e in live:
                try:
                    with threads_for_step(e.threads):
                        if warm[e.key]:
                            nets[e.key].step()
                        t0 = time.perf_counter()
                        nets[e.key].step()
                        times[e.key].append(time.perf_counter() - t0)
                        if nets[e.key].counts_in_step:
                            acts[e.key].append(nets[e.key].activity())
                    listed[e.key] = nets[e.key].entries_per_step()
                except Exception as exc:
                    failed(e.key, exc)
        for e in entries:  # a dense network counts its spikes after its timed steps,
            # in a forward pass of its own: counting in the step added work to it alone
            if e.key in nets and not nets[e.key].counts_in_step:
                try:
                    with threads_for_step(e.threads):
                        acts[e.key].append(nets[e.key].activity())
                except Exception as exc:
                    failed(e.key, exc)
        for key in nets:
            per_step = acts[key]
            out[key] = {"median_s": statistics.median(times[key]), "times_s": times[key],
                        **({"compile_s": nets[key].compile_s,
                            "compile_cache": nets[key].compile_cache}
                           if hasattr(nets[key], "compile_s") else {}),
                        **({"entries_per_step": listed[key]} if listed[key] else {}),
                        "repeats": len(times[key]), "timed": True,
                        # whether an untimed step ran right before each timed one
                        "warm_step": warm[key],
                        "activity": [statistics.fmean(a[i] for a in per_step)
                                     for i in range(len(per_step[0]))]}
    finally:
        nets.clear()
        gc.collect()
    return out


def paired_ratio(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Median over rounds of slow / fast: the two steps of a round ran back to back, so
    a busy spell of the machine hits both."""
    return statistics.median(a / b for a, b in zip(slow, fast))


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
