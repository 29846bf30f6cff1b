"""The README's performance table and plot from the benchmark's results JSON files.

    python -m snn_ipu.bench.summary bench_results/bench_*.json \\
        --activities 0.01 0.02 0.1 0.3 --plot summary.png --entries

prints a Markdown table (ours with sparse and exact gradients against every dense peer,
at the given target activities, and a trained network's one row, with the speed-up over
the fastest dense backend of each row) and writes one plot of every config's time per
step against activity; ``--entries`` adds the listed entries per step of each row and
layer, ``--full`` every config's table of all activities (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .configs import DENSE_BASELINES
from .report import draw, fmt_ms, save_plot

COLUMNS = (("emulator_sparse", "ours, sparse"), ("emulator_exact", "ours, exact"),
           ("spikingjelly", "SpikingJelly 2.0"), ("torch_loop", "torch loop"),
           ("torch_compile_step", "torch.compile, per step"),
           ("torch_compile", "torch.compile, whole loop"),
           ("snntorch", "snnTorch"), ("reference", "our dense reference"))
NAMES = dict(COLUMNS)


def load(paths: Sequence[Path]) -> List[dict]:
    results = []
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        if "rows" not in result or "config" not in result:
            raise ValueError(f"{path} is not a results file of the training benchmark")
        results.append(result)
    return results


def nearest_row(result: dict, target: float) -> dict:
    rows = [r for r in result["rows"] if r.get("target_activity") is not None]
    if not rows:
        raise ValueError(f"config {result['config']} has no rows")
    return min(rows, key=lambda r: abs(r["target_activity"] - target))


def table_rows(result: dict, activities: Sequence[float]) -> List[dict]:
    """The rows of a config in the tables: a trained network's one row, or the rows
    nearest to ``activities`` (each once, in order)."""
    if result.get("workload") == "trained":
        return list(result["rows"])
    rows: List[dict] = []
    for target in activities:
        row = nearest_row(result, target)
        if not any(r is row for r in rows):
            rows.append(row)
    return rows


def network_name(result: dict) -> str:
    """``S: 700-256-256-20``; a trained network says how long it trained and to what
    test accuracy."""
    name = f"{result['config']}: {'-'.join(map(str, result['sizes']))}"
    training = (result["rows"][0].get("training") if result["rows"] else None) or {}
    if "epoch" in training:
        name += (f" (after {training['epoch']} epochs, test accuracy "
                 f"{100 * training['test_acc']:.0f}%)")
    return name


def fastest_dense(row: dict) -> Optional[str]:
    """The dense backend with the shortest median step in this row."""
    timed = [(row["results"][b]["median_s"], b) for b in DENSE_BASELINES
             if row["results"].get(b, {}).get("median_s")]
    return min(timed)[1] if timed else None


def ratio_quartiles(row: dict, fast: str, base: Optional[str]) -> Optional[Tuple[float, float]]:
    """The first and third quartiles of the per-round ratios behind a paired speed-up of
    ``fast`` over ``base``: how far the machine's load spread the rounds of its median.
    None for a ratio of medians (a reused timing) or fewer than two rounds."""
    key = f"{fast}_vs_{base}"
    if key not in row.get("speedup_paired", ()):
        return None
    res = row["results"]
    ratios = [b / a for a, b in zip(res[fast]["times_s"], res[base]["times_s"])]
    if len(ratios) < 2:
        return None
    # inclusive: quartiles within the ratios measured (the default, exclusive method
    # extrapolates past them with few rounds: two rounds of 5.0 and 42.9 gave -4.5)
    q = statistics.quantiles(ratios, n=4, method="inclusive")
    return q[0], q[2]


def _speedup(row: dict, fast: str, base: Optional[str]) -> str:
    value = row.get("speedup", {}).get(f"{fast}_vs_{base}")
    if value is None:
        return "-"
    quartiles = ratio_quartiles(row, fast, base)
    spread = "" if quartiles is None else f" [{quartiles[0]:.1f}, {quartiles[1]:.1f}]"
    return f"{value:.1f}x{spread}"


def markdown_table(results: Sequence[dict], activities: Sequence[float]) -> str:
    """One row per (config, activity) (a trained network's one row whatever the
    activities): median ms per step of every backend and the speed-ups of ours over the
    fastest dense backend of that row."""
    head = (["network", "activity"] + [name for _, name in COLUMNS]
            + ["sparse vs fastest dense", "exact vs fastest dense"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        net = network_name(result)
        for row in table_rows(result, activities):
            act = row.get("measured_hidden_activity")
            best = fastest_dense(row)
            cells = [net, "-" if act is None else f"{100 * act:.1f}%"]
            cells += [fmt_ms(row["results"].get(b)) for b, _ in COLUMNS]
            cells += [f"{_speedup(row, 'emulator_sparse', best)} ({NAMES.get(best, '-')})",
                      _speedup(row, "emulator_exact", best)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def caption(results: Sequence[dict]) -> str:
    """What the table's numbers are, and where they were measured."""
    first = results[0]
    machine = first.get("machine", {})
    configs = "; ".join(f"{r['config']} = {'-'.join(map(str, r['sizes']))}, T={r['T']}, "
                        f"B={r['B']}" for r in results)
    return (f"Median ms per training step (forward, backward, Adam), float32, "
            f"{machine.get('torch_threads', '?')} threads on {machine.get('processor', '?')}"
            f" ({configs}); activity = measured fraction of hidden neurons spiking per "
            "step (a trained network's own, on a batch of its test set); `*` = dense timing "
            "reused from the nearest earlier timed activity; speed-ups are against the dense "
            "peer with the shortest median step, medians [first, third quartiles, within "
            "the rounds' range] of per-round ratios of steps timed side by side (ratios of "
            "medians, without quartiles, against a reused timing).")


def entries_table(results: Sequence[dict], activities: Sequence[float]) -> str:
    """Per row of :func:`markdown_table` and layer, the sparse step's listed entries per
    step (all samples): spikes, eligible-only (near threshold, not spiking), the capacity
    K (the largest row) and the listed share of the layer's neurons."""
    head = ["network", "activity", "layer (neurons)", "spikes / step",
            "eligible-only / step", "K", "listed / neurons"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for result in results:
        for row in table_rows(result, activities):
            listed = row["results"].get("emulator_sparse", {}).get("entries_per_step")
            act = row.get("measured_hidden_activity")
            for i, entry in enumerate(listed or []):
                n, batch = result["sizes"][i + 1], result["B"]
                share = (entry["spikes"] + entry["eligible_only"]) / (batch * n)
                lines.append("| " + " | ".join([
                    result["config"], _pct(act), f"{i + 1} ({n})", f"{entry['spikes']:,.0f}",
                    f"{entry['eligible_only']:,.0f}", str(entry["capacity"]),
                    _pct(share)]) + " |")
    return "\n".join(lines)


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def full_table(result: dict) -> str:
    """Every activity of one config (docs/performance.md): measured activity, every
    backend's median step, ours over the fastest dense backend, peak memory, the kernel
    rate and the 2 vs 1 thread speed-up."""
    from .configs import BACKENDS
    from .report import SHORT

    head = (["activity in / l1 / l2"] + [name for _, name in COLUMNS]
            + ["sparse vs fastest dense", "exact vs fastest dense",
               "peak MiB " + " / ".join(SHORT[b] for b in BACKENDS),
               "spike-matmul G adds/s (÷ dense)", "2 vs 1 thread"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result["rows"]:
        act = row.get("measured_activity", {})
        best = fastest_dense(row)
        mem = []
        for b in BACKENDS:
            m = row["results"].get(b, {}).get("memory", {}).get("peak_delta_bytes")
            mem.append("-" if m is None else f"{m / 2**20:.0f}")
        kernel = row.get("spike_matmul", {})
        threads = row.get("threads", {}).get("speedup_2_vs_1")
        cells = [" / ".join(_pct(act.get(k)) for k in ("input", "layer1", "layer2"))]
        cells += [fmt_ms(row["results"].get(b)) for b, _ in COLUMNS]
        cells += [f"{_speedup(row, 'emulator_sparse', best)} ({NAMES.get(best, '-')})",
                  _speedup(row, "emulator_exact", best), " / ".join(mem),
                  (f"{kernel['adds_per_s'] / 1e9:.1f} ({kernel['ratio_to_dense_macs']:.2f})"
                   if "adds_per_s" in kernel else "-"),
                  "-" if threads is None else f"{threads:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_plot(results: Sequence[dict], path: Path) -> Optional[str]:
    """One panel per config; returns why not where matplotlib is absent."""
    def draw_panels(axes) -> None:
        for ax, result in zip(axes, results):
            draw(ax, result, one_thread=False)

    return save_plot(path, draw_panels, (6.5 * len(results), 4.5), panels=len(results))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m snn_ipu.bench.summary",
                                description="the README's performance table and plot")
    p.add_argument("results", nargs="+", type=Path, help="bench_<config>.json files")
    p.add_argument("--activities", nargs="+", type=float, default=[0.01, 0.02],
                   help="target activities of the rows (nearest row of each config)")
    p.add_argument("--plot", type=Path, default=None, help="write the plot (PNG) here")
    p.add_argument("--entries", action="store_true",
                   help="also print the listed entries per step of each row and layer")
    p.add_argument("--full", action="store_true",
                   help="also print every config's full table (docs/performance.md)")
    args = p.parse_args(argv)
    try:
        results = load(args.results)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(results, args.activities))
    print()
    print(caption(results))
    if args.entries:
        print()
        print(entries_table(results, args.activities))
    if args.full:
        for result in results:
            dm = result.get("dense_matmul", {}).get("macs_per_s")
            rate = "" if dm is None else f", torch.mm {dm / 1e9:.1f} GMAC/s at its start"
            print(f"\n{result['config']} = {'-'.join(map(str, result['sizes']))}, "
                  f"T={result['T']}, B={result['B']}{rate}:\n")
            print(full_table(result))
    if args.plot is not None:
        err = summary_plot(results, args.plot)
        print(f"wrote {args.plot}" if err is None else err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
