"""The training benchmark on a GPU: ``snn-ipu bench --device cuda`` (``make bench-gpu``).

Times one full training step (forward, backward, Adam) of the S and L networks at each
activity on the ``triton`` backend (sparse gradients, ``grad_window`` = 0.1 threshold,
and exact ones) against the dense GPU peers on the same weights and inputs:
SpikingJelly 2.0's multi-step LIF (on CUDA tensors it dispatches to its fused GPU
kernels), a plain torch loop, the same loop under ``torch.compile``, and snnTorch; with
the peak GPU memory of a step. One table (console and JSON) and one plot per config.

Results of a run on an H100: docs/gpu.md and ``benchmarks/results_gpu/``. The networks
are :mod:`.networks`' (built on the CPU, then moved), the inputs and the calibrated
weights :mod:`.workload`'s.
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional

import torch

from .configs import BETA, CONFIGS, SPARSE_WINDOW, THRESHOLD
from .networks import (
    DenseNet,
    OursNet,
    SnnTorchNet,
    SpikingJellyNet,
    TorchLoopNet,
    TrainingNet,
    lif_loop,
    make_adam,
)
from .report import save_plot
from .sweep import write_json
from .workload import calibrate, make_problem

__all__ = ["GPU_BACKENDS", "check_device", "run"]

#: Ours on the triton backend (sparse and exact gradients) and the dense GPU peers.
GPU_BACKENDS = ("triton_sparse", "triton_exact", "spikingjelly", "torch_loop",
                "torch_compile", "snntorch")
LABEL = {"triton_sparse": "ours, sparse gradients (triton)",
         "triton_exact": "ours, exact gradients (triton)",
         "spikingjelly": "SpikingJelly 2.0 multi-step LIF", "torch_loop": "plain torch loop",
         "torch_compile": "torch loop, torch.compile", "snntorch": "snnTorch"}
DENSE = ("spikingjelly", "torch_loop", "torch_compile", "snntorch")


def check_device(device: str) -> Optional[str]:
    """None when ``device`` can run the GPU benchmark, else why not."""
    if not device.startswith("cuda"):
        return f"the GPU benchmark runs on a CUDA device, got {device!r}"
    if not torch.cuda.is_available():
        return (f"--device {device}: torch.cuda.is_available() is False (torch "
                f"{torch.__version__}); it needs an NVIDIA GPU and a CUDA build of torch")
    from ..backends import triton as triton_backend

    if not triton_backend.available():
        return "--device cuda: Triton is not installed: pip install 'snn-ipu[gpu]'"
    return None


class TorchCompileNet(TorchLoopNet):
    """:class:`~.networks.TorchLoopNet` with its neuron loop under ``torch.compile``."""

    def __init__(self, problem: dict, lr: float, adam: str):
        super().__init__(problem, lr, adam)
        self._loop = torch.compile(lif_loop)

    def forward(self) -> torch.Tensor:
        h = self.x
        outputs = []
        for fc in self.fcs:
            h = self._loop(fc(h), BETA, THRESHOLD)
            outputs.append(h)
        self._count(outputs)
        return h


def _build(problem: dict, name: str, device: torch.device, lr: float, adam: str) -> TrainingNet:
    """The network of ``name``, built as the CPU benchmark builds it, then moved."""
    if name in ("triton_sparse", "triton_exact"):
        net: TrainingNet = OursNet(problem, "triton",
                                   SPARSE_WINDOW if name == "triton_sparse" else None, lr, adam)
        modules = net.layers
    else:
        cls = {"spikingjelly": SpikingJellyNet, "torch_loop": TorchLoopNet,
               "torch_compile": TorchCompileNet, "snntorch": SnnTorchNet}[name]
        net = cls(problem, lr, adam)
        # the neurons too: snnTorch's keep beta and the threshold as buffers
        modules = net.fcs + [m for m in getattr(net, "lifs", []) if isinstance(m, torch.nn.Module)]
    for m in modules:
        m.to(device)
    if isinstance(net, DenseNet):
        net.x = net.x.to(device)
    else:
        net.x = net.x.__class__.from_dense(problem["x"].to(device))
    net.y = net.y.to(device)
    net.params = [p for m in modules for p in m.parameters()]
    net.opt = make_adam(net.params, lr, adam)
    return net


def _time(net: TrainingNet, repeats: int, max_seconds: float, warmup: int) -> dict:
    for _ in range(warmup):  # compilation, autotuning, allocator warm-up
        net.step()
    torch.cuda.synchronize()
    times = []
    spent = 0.0
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    while len(times) < repeats and (not times or spent < max_seconds):
        start = time.perf_counter()
        net.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    peak = torch.cuda.max_memory_allocated() - base  # before activity(): a dense
    # network counts its spikes in a forward pass of its own
    return {"median_s": statistics.median(times), "times_s": times, "peak_bytes": peak,
            "activity": net.activity()}


def run_config(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    cfg = dict(CONFIGS[name])
    cfg["T"] = args.steps or cfg["T"]
    cfg["B"] = args.batch or cfg["B"]
    result = {"config": name, "sizes": list(cfg["sizes"]), "T": cfg["T"], "B": cfg["B"],
              "device": torch.cuda.get_device_name(device), "activities": {}}
    for target in args.activities:
        problem = make_problem(cfg, target, args.seed)
        calibrate(problem, "emulator" if _emulator_available() else "reference")
        row: Dict[str, dict] = {}
        for backend in args.gpu_backends:
            try:
                net = _build(problem, backend, device, args.lr, args.adam)
                row[backend] = _time(net, args.repeats, args.max_seconds,
                                     warmup=3 if backend == "torch_compile" else 1)
            except Exception as exc:  # one failing peer does not end the run
                row[backend] = {"error": f"{type(exc).__name__}: {exc}",
                                "traceback": traceback.format_exc(limit=4)}
            finally:
                net = None
                torch.cuda.empty_cache()
        result["activities"][str(target)] = row
        print(table(result), flush=True)
    return result


def _emulator_available() -> bool:
    try:
        from ..backends import emulator  # noqa: F401
    except Exception:
        return False
    return True


def table(result: dict) -> str:
    """Median ms per step and peak MiB per backend, per target activity, with the
    speed-up of sparse triton over the fastest dense peer."""
    names = list(next(iter(result["activities"].values())).keys()) if result["activities"] \
        else []
    lines = [f"== {result['config']}: {'-'.join(map(str, result['sizes']))}, T={result['T']}, "
             f"B={result['B']}, {result.get('device', '?')} ==",
             "target | " + " ".join(f"{n:>13}" for n in names)
             + " | best dense / sparse | peak MiB " + " ".join(f"{n[:6]:>6}" for n in names)]
    for target, row in result["activities"].items():
        ms = [row[n].get("median_s") for n in names]
        dense = [row[n]["median_s"] for n in names if n in DENSE and "median_s" in row[n]]
        ours = row.get("triton_sparse", {}).get("median_s")
        ratio = f"{min(dense) / ours:.2f}x" if dense and ours else "-"
        mib = [row[n].get("peak_bytes") for n in names]
        lines.append(f"{float(target):>6.3f} | "
                     + " ".join(f"{m * 1e3:>13.2f}" if m else f"{'error':>13}" for m in ms)
                     + f" | {ratio:>19} | "
                     + " ".join(f"{b / 2**20:>6.0f}" if b else f"{'-':>6}" for b in mib))
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Optional[str]:
    """Time per step against activity, one line per backend; None, or why not drawn."""
    def draw_panels(axes) -> None:
        ax = axes[0]
        targets = sorted(result["activities"], key=float)
        for name in LABEL:
            pts = [(float(t), result["activities"][t][name]["median_s"] * 1e3) for t in targets
                   if "median_s" in result["activities"][t].get(name, {})]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=LABEL[name])
        ax.set(xscale="log", yscale="log", xlabel="target activity (fraction spiking per step)",
               ylabel="ms per training step",
               title=f"{result['config']} on {result.get('device', 'GPU')}")
        ax.legend(fontsize=8)

    return save_plot(path, draw_panels, (7, 4.5), dpi=120)


def run(args: argparse.Namespace, out: Path) -> int:
    """The whole GPU benchmark: ``bench_gpu_<config>.json`` and ``.png`` per config."""
    why = check_device(args.device)
    if why is not None:
        raise RuntimeError(why)
    device = torch.device(args.device)
    results: List[dict] = []
    for name in args.configs:
        result = run_config(name, args, device)
        result["args"] = {k: v for k, v in vars(args).items()}
        path = out / f"bench_gpu_{name}.json"
        write_json(path, result)
        err = plot(result, out / f"bench_gpu_{name}.png")
        print(f"wrote {path}" + ("" if err is None else f" ({err})"), flush=True)
        results.append(result)
    return 0
