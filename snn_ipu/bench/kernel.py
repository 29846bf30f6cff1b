"""The spike-matmul kernel's rate against ``torch.mm`` of the same dense shape.

The kernel is timed as the layer runs it (``emulator.spike_matmul``): the input list's
repack plus the busiest thread's SpikeMatmul vertex calls over every tile, step and
sample of layer 1; each tile's weight block is built by its thread right before the
tile's steps (untimed), so that it sits in that core's cache as in the layer. adds =
input spikes x out neurons.
"""

from __future__ import annotations

import statistics
import time

import torch

from ..spikes import SparseSpikes
from .workload import weights_of


def dense_matmul_rate(cfg: dict, reps: int = 5) -> dict:
    """torch.mm's multiply-add rate on layer 1's dense shape [T*B, in] x [in, out]: the
    machine's speed at the start of a config."""
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
    """The kernel on layer 1's input and weights against ``torch.mm`` of the same dense
    shape timed in turn with it (one of each per round): adds/s = input spikes x out /
    kernel time; ratio = median over rounds of kernel adds/s over dense MAC/s."""
    from ..backends.emulator import spike_matmul

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
            "rounds": reps}
