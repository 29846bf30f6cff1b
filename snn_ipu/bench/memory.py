"""Peak memory of one training step, measured in a fresh process per backend.

The worker runs with glibc's malloc told to hand big blocks back to the OS (so that a
freed activation is not counted as still held), warms the code paths up on a 2-step,
1-sample slice, allocates Adam's state with a zero-gradient step, resets the kernel's
RSS high-water mark (``/proc/self/clear_refs`` <- 5) and reports ``VmHWM - VmRSS``
across one full training step: activations, gradients and spike lists.

Run as ``python -m snn_ipu.bench.memory PROBLEM BACKEND [--lr LR] [--adam KIND]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from typing import Optional, Sequence

import torch

from .networks import build

#: glibc's mmap and trim thresholds for the worker (128 KiB): importing the extension
#: raises them for speed, which would keep freed blocks in the process and hide peaks.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def peak_of_one_step(problem_path: str, backend: str, lr: float, adam: str) -> dict:
    """In this process: the RSS high-water delta of one training step."""
    problem = torch.load(problem_path, weights_only=False)
    # Warm up the code paths on a tiny slice (2 steps, 1 sample), so that lazily loaded
    # code is in place but the heap holds no freed activations of a full-size step.
    tiny = dict(problem, x=problem["x"][:2, :1].contiguous(), y=problem["y"][:1])
    warm = build(tiny, backend, lr, adam)
    warm.step()
    del warm
    net = build(problem, backend, lr, adam)
    for prm in net.params:  # Adam's state (2 x parameters) exists before the measured step
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
    """:func:`peak_of_one_step` in a fresh subprocess; ``{"error": ...}`` if it fails."""
    env = dict(os.environ, **MALLOC_ENV)
    cmd = [sys.executable, "-m", __name__, problem_path, backend, "--lr", repr(lr),
           "--adam", adam]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"memory worker timed out after {timeout:.0f}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"memory worker failed (rc={proc.returncode}): {' | '.join(tail)}"}
    return json.loads(lines[-1])


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m snn_ipu.bench.memory",
                                description="peak memory of one training step (worker)")
    p.add_argument("problem")
    p.add_argument("backend")
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--adam", choices=("fused", "default"), default="fused")
    args = p.parse_args(argv)
    print(json.dumps(peak_of_one_step(args.problem, args.backend, args.lr, args.adam)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
