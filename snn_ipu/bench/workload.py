"""The benchmark's workload: input spikes, labels and weights at a target activity.

Activity (the fraction of neurons spiking per step) is set by the input spike density
(= the target) and by a per-layer weight gain that :func:`calibrate` bisects on a
forward pass. The activity the benchmark reports is the one measured during the
timed steps, not this target.
"""

from __future__ import annotations

import math
from typing import List

import torch

from ..layers import LIFLayer
from ..spikes import SparseSpikes
from .configs import BETA, THRESHOLD, WEIGHT_MEAN


def make_problem(cfg: dict, target: float, seed: int) -> dict:
    """Input spikes at density ``target``, labels and unit-gain weights W0 (seeded)."""
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
    """The weights every backend starts from: W0 times the calibrated gains."""
    return [gain * w for gain, w in zip(problem["gains"], problem["w0"])]


def biases_of(problem: dict) -> List[torch.Tensor]:
    """The biases every backend starts from: a trained network's own
    (:mod:`.trained`), else zeros."""
    if problem.get("biases") is not None:
        return list(problem["biases"])
    return [torch.zeros(n) for n in problem["sizes"][1:]]


def spiking_fraction(out: SparseSpikes) -> float:
    """Spikes per neuron and step of one layer's output list."""
    T, B, N = out.dense_shape
    return float(out.counts[..., 0].sum()) / (T * B * N)


def _bisect_gain(layer: LIFLayer, w0: torch.Tensor, spikes: SparseSpikes, target: float,
                 tol: float, max_iter: int):
    """(gain, activity, output) of the log-scale bisection of one layer's gain."""
    lo = hi = None  # log gains known to give activity below / above the target
    lg = 0.0
    best = None
    for _ in range(max_iter):
        layer.weight.copy_(math.exp(lg) * w0)
        out = layer(spikes)
        act = spiking_fraction(out)
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
    return math.exp(lg), act, out


def calibrate(problem: dict, backend: str, tol: float = 0.1, max_iter: int = 12) -> dict:
    """Per layer, in order, bisects the weight gain (log scale) until the layer's activity
    on the previous layer's output is within ``tol`` (relative) of the target; writes the
    gains and a log into ``problem``."""
    spikes = SparseSpikes.from_dense(problem["x"])
    sizes = problem["sizes"]
    gains, log = [], []
    with torch.no_grad():
        for i, w0 in enumerate(problem["w0"]):
            layer = LIFLayer(sizes[i], sizes[i + 1], beta=BETA, threshold=THRESHOLD,
                             grad_window=0.0, backend=backend)
            layer.bias.zero_()
            gain, act, out = _bisect_gain(layer, w0, spikes, problem["target"], tol, max_iter)
            gains.append(gain)
            log.append({"layer": i + 1, "gain": gain, "activity": act})
            spikes = SparseSpikes(out.ids, out.counts, out.num_neurons, out.values.detach(),
                                  validate=False)
    problem["gains"] = gains
    problem["calibration"] = {"backend": backend, "layers": log}
    return problem
