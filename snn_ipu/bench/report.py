"""A config's results as a console table and a plot (time per step against activity)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple

from .configs import BACKENDS


def row_label(row: dict) -> str:
    """A row's name in logs and tables: its target activity, or ``trained``."""
    target = row.get("target_activity")
    return "trained" if target is None else f"{target:g}"

#: Short column names of the backends.
SHORT = {"emulator_sparse": "sparse", "emulator_exact": "exact", "reference": "ref",
         "spikingjelly": "sj", "torch_loop": "loop", "snntorch": "snnT",
         "torch_compile_step": "cstep", "torch_compile": "comp"}
#: Legend names of the backends.
LABEL = {"emulator_sparse": "ours, sparse gradients (emulator)",
         "emulator_exact": "ours, exact gradients (emulator)",
         "reference": "ours, dense reference backend",
         "spikingjelly": "SpikingJelly 2.0 multi-step LIF",
         "torch_loop": "plain torch loop", "snntorch": "snnTorch",
         "torch_compile_step": "torch loop, one-step cell under torch.compile",
         "torch_compile": "torch loop under torch.compile (inductor, T unrolled)"}
#: The speed-ups the console table shows.
RATIOS = ("emulator_sparse_vs_reference", "emulator_sparse_vs_spikingjelly",
          "emulator_sparse_vs_torch_loop", "emulator_sparse_vs_torch_compile_step",
          "emulator_sparse_vs_torch_compile", "emulator_exact_vs_spikingjelly",
          "emulator_exact_vs_torch_loop", "emulator_exact_vs_torch_compile_step",
          "emulator_exact_vs_torch_compile", "emulator_exact_vs_snntorch")


def fmt_ms(res: Optional[dict]) -> str:
    """Median ms of a step: one decimal below 100 ms, whole ms from 100 on; ``*`` marks a
    reused timing."""
    if not res or res.get("median_s") is None:
        return "-"
    ms = res["median_s"] * 1e3
    s = f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}"
    return s + ("*" if res.get("timed") is False else "")


def _fmt_mib(res: Optional[dict]) -> str:
    m = (res or {}).get("memory", {}).get("peak_delta_bytes")
    return "-" if m is None else f"{m / 2**20:.0f}"


def _ratio_name(key: str) -> str:
    fast, base = key.split("_vs_")
    return f"{SHORT[fast]}/{SHORT[base]}"


def title(result: dict) -> str:
    return (f"config {result['config']}: {'-'.join(map(str, result['sizes']))}, "
            f"T={result['T']}, B={result['B']}")


def table(result: dict) -> str:
    """The console table of one config: measured activity, step times, speed-ups, peak
    memory, kernel rate and the 2 vs 1 thread speed-up per activity."""
    lines = [
        f"== {title(result)} ==",
        "activity = measured fraction spiking per step (input / layer1 / layer2 / out); "
        "times = median ms per training step (* = reused dense-baseline timing); "
        "x/y = speed-up of x over y; mem = peak MiB of a step",
    ]
    hdr = (f"{'target':>6} {'in':>6} {'l1':>6} {'l2':>6} {'out':>6} | "
           + " ".join(f"{SHORT[b]:>7}" for b in BACKENDS) + " | "
           + " ".join(f"{_ratio_name(k):>10}" for k in RATIOS) + " | "
           + " ".join(f"{SHORT[b]:>6}" for b in BACKENDS) + f" | {'add/MAC':>7} {'2t/1t':>5}")
    lines += [hdr, "-" * len(hdr)]
    for row in result["rows"]:
        act = row.get("measured_activity", {})
        res = row["results"]
        speedup = row.get("speedup", {})
        acts = " ".join(f"{act[k]:.4f}" if k in act else f"{'-':>6}"
                        for k in ("input", "layer1", "layer2", "layer3"))
        kernel = row.get("spike_matmul", {}).get("ratio_to_dense_macs")
        threads = row.get("threads", {}).get("speedup_2_vs_1")
        lines.append(
            f"{row_label(row):>6} {acts} | "
            + " ".join(f"{fmt_ms(res.get(b)):>7}" for b in BACKENDS) + " | "
            + " ".join(f"{speedup[k]:>10.1f}" if k in speedup else f"{'-':>10}"
                       for k in RATIOS) + " | "
            + " ".join(f"{_fmt_mib(res.get(b)):>6}" for b in BACKENDS)
            + f" | {'-' if kernel is None else f'{kernel:.2f}':>7}"
            f" {'-' if threads is None else f'{threads:.2f}':>5}")
    dm = result.get("dense_matmul", {})
    if "macs_per_s" in dm:
        lines.append(f"dense torch.mm {dm['shape']}: {dm['macs_per_s'] / 1e9:.1f} GMAC/s "
                     f"({dm['torch_threads']} torch threads)")
    for b, st in result["backends"].items():
        if not st["available"]:
            lines.append(f"{b}: unavailable ({st['error']})")
    for row in result["rows"]:
        for b, res in row["results"].items():
            if "error" in res and not res.get("skipped"):
                lines.append(f"error at {row_label(row)} {b}: {res['error'][:200]}")
    lines.append("baseline timing: " + result["baseline_timing"])
    return "\n".join(lines)


def series(result: dict, backend: str):
    """(measured hidden activity, median s) points of one backend; ``backend`` may be
    ``"threads=1"`` for the emulator's sparse step on one thread."""
    xs, ys = [], []
    for row in result["rows"]:
        act = row.get("measured_hidden_activity")
        if backend.startswith("threads="):
            res = row.get("threads", {}).get(backend.split("=")[1], {})
        else:
            res = row["results"].get(backend, {})
        if act is not None and res.get("median_s") is not None:
            xs.append(act)
            ys.append(res["median_s"])
    return xs, ys


def draw(ax, result: dict, one_thread: bool = True) -> None:
    """Time per step against measured activity, every backend, on log-log axes."""
    names = list(BACKENDS) + (["threads=1"] if one_thread else [])
    for b in names:
        xs, ys = series(result, b)
        if xs:
            label = "ours, sparse, 1 thread" if b == "threads=1" else LABEL[b]
            ax.plot(xs, ys, "--" if b == "threads=1" else "-", marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured activity (mean of hidden layers, fraction spiking per step)")
    ax.set_ylabel("time per training step [s]")
    ax.set_title(title(result))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def save_plot(path: Path, draw_panels: Callable[[Sequence[Any]], None],
              figsize: Tuple[float, float], panels: int = 1, dpi: int = 110) -> Optional[str]:
    """A figure of ``panels`` axes side by side, drawn by ``draw_panels(axes)``, written
    to ``path``; returns why not where matplotlib is absent (the benchmark runs without)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"no plot: {exc}"
    fig, axes = plt.subplots(1, panels, figsize=figsize, squeeze=False)
    draw_panels(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return None


def plot(result: dict, path: Path) -> Optional[str]:
    """Writes the config's plot to ``path``; returns why not where matplotlib is absent."""
    return save_plot(path, lambda axes: draw(axes[0], result), (7, 4.5))
