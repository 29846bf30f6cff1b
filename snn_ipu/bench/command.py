"""The training benchmark's command line: ``snn-ipu bench`` / ``python -m snn_ipu bench``."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from .._arg_types import at_least, fraction, non_negative, positive
from .._paths import output_folder
from .configs import (
    BACKENDS,
    CONFIGS,
    DEFAULT_ACTIVITIES,
    FAMILY,
    OPT_IN,
    QUICK_ACTIVITIES,
    SLOW_TO_BUILD,
)
from .gpu import GPU_BACKENDS, check_device
from .networks import family_status
from .report import plot, table
from .summary import caption, entries_table, markdown_table, summary_plot
from .sweep import run_config, write_json

#: Where results go without ``--out`` (a full run; a quick one goes to a temporary dir).
DEFAULT_OUT = Path("bench_results")
#: Timed steps per backend and seconds of timed steps per backend, without --quick.
REPEATS, MAX_SECONDS = 15, 20.0
QUICK_MAX_SECONDS = 5.0


def parser(prog: str = "snn-ipu bench") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Training-step benchmark: our emulator (sparse / exact gradients) "
                    "against SpikingJelly 2.0, a plain torch loop (also under "
                    "torch.compile), snnTorch and our dense reference, on the same "
                    "network, weights and inputs. See docs/performance.md.")
    p.add_argument("--device", default="cpu",
                   help="cpu (the emulator against the CPU peers), or cuda / cuda:N: the triton "
                        "backend against the dense GPU peers (snn_ipu/bench/gpu.py)")
    p.add_argument("--gpu-backends", nargs="+", default=None, choices=GPU_BACKENDS,
                   help="with --device cuda: what to time (default: all, "
                        f"{' '.join(GPU_BACKENDS)})")
    p.add_argument("--configs", nargs="+", default=None, choices=list(CONFIGS),
                   help="(default: S L; S with --quick) "
                        "S and L: calibrated random weights at each of --activities; "
                        "S-trained, L-trained and digits-trained: a network trained for a few "
                        "epochs (S on an SHD-shaped randman task, L on an N-MNIST-shaped "
                        "one, the digits network), one row at "
                        "its own activity (the trained weights are kept in --out)")
    p.add_argument("--activities", nargs="+", type=fraction, default=None,
                   help="target fractions of neurons spiking per step, in (0, 1] "
                        f"(default {' '.join(map(str, DEFAULT_ACTIVITIES))}; "
                        f"{' '.join(map(str, QUICK_ACTIVITIES))} with --quick); the "
                        "trained configs ignore them")
    p.add_argument("--backends", nargs="+", default=None, choices=BACKENDS,
                   help=f"default: all but {', '.join(OPT_IN)} (compiling each layer's "
                        "whole unrolled time loop takes minutes per layer shape at T=100); "
                        f"with --quick, also without {', '.join(SLOW_TO_BUILD)}")
    p.add_argument("--repeats", type=at_least(1), default=None,
                   help=f"timed steps per backend (max) (default: {REPEATS}; 1 with --quick)")
    p.add_argument("--max-seconds", type=positive, default=None,
                   help="stop repeating a backend after this many seconds (>= 1 timed step) "
                        f"(default: {MAX_SECONDS:g}; {QUICK_MAX_SECONDS:g} with --quick)")
    p.add_argument("--baseline-timing", choices=("auto", "each", "reuse"), default="auto",
                   help="time dense baselines at each activity, or at 3 and reuse "
                        "(auto: each on S, reuse on L)")
    p.add_argument("--baseline-activities", nargs="+", type=fraction, default=None,
                   help="with reuse: the activities at which dense baselines are timed "
                        "(and the first of --activities, which has no earlier timing to "
                        "reuse)")
    p.add_argument("--baseline-memory-once", action="store_true",
                   help="measure dense baselines' peak memory at their first activity only")
    p.add_argument("--thread-configs", nargs="*", default=None, choices=sorted(CONFIGS),
                   help="configs on which emulator 1 vs 2 threads is timed (default: L; "
                        "none with --quick)")
    p.add_argument("--thread-repeats", type=at_least(1), default=None,
                   help="timed steps per thread count (max): a 2-thread step needs both "
                        "cores free, so a busy spell of one skews a short series "
                        f"(default: {REPEATS}; 1 with --quick)")
    p.add_argument("--no-memory", dest="memory", action="store_false",
                   help="skip the per-step peak-memory subprocesses")
    p.add_argument("--memory-timeout", type=positive, default=300.0)
    p.add_argument("--steps", type=at_least(1), default=None, help="override T")
    p.add_argument("--batch", type=at_least(1), default=None, help="override B")
    p.add_argument("--lr", type=non_negative, default=0.0,
                   help="Adam's learning rate (default 0: the weights, and with them every "
                        "entry's activity, stay at the calibrated point over the repeats, so "
                        "that every backend takes the same step; an Adam step's cost does "
                        "not depend on it)")
    p.add_argument("--adam", choices=("fused", "default"), default="fused",
                   help="Adam implementation, the same for every backend (fused: PyTorch's "
                        "fused CPU kernel where the installed torch has it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: S only, T=20, B=32, 1 repeat, no thread check, results "
                        "in a temporary directory, each unless given")
    p.add_argument("--out", type=Path, default=None,
                   help=f"results directory (default ./{DEFAULT_OUT}/)")
    return p


def parse_args(argv: Optional[Sequence[str]] = None,
               prog: str = "snn-ipu bench") -> argparse.Namespace:
    p = parser(prog)
    args = p.parse_args(argv)
    # --quick's settings where the option is not given: given ones are kept (as train
    # --quick keeps a given --epochs); --quick --configs L ran S, --repeats 5 ran one
    quick = args.quick
    for name, full, short in (("configs", ["S", "L"], ["S"]),
                              ("repeats", REPEATS, 1),
                              ("thread_repeats", REPEATS, 1),
                              ("max_seconds", MAX_SECONDS, QUICK_MAX_SECONDS),
                              ("thread_configs", ["L"], []),
                              ("steps", None, 20),
                              ("batch", None, 32)):
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    if args.device != "cpu":
        why = check_device(args.device)
        if why is not None:
            p.error(why)
        trained = [name for name in args.configs if CONFIGS[name].get("train")]
        if trained:
            p.error(f"--configs {' '.join(trained)}: the trained networks run on the CPU "
                    "benchmark only (--device cpu)")
    elif args.gpu_backends is not None:
        p.error("--gpu-backends needs --device cuda")
    args.gpu_backends = list(args.gpu_backends or GPU_BACKENDS)
    if args.backends is None:
        args.backends = [b for b in BACKENDS
                         if b not in OPT_IN and not (args.quick and b in SLOW_TO_BUILD)]
    if args.activities is None:
        args.activities = list(QUICK_ACTIVITIES if args.quick else DEFAULT_ACTIVITIES)
    return args


def results_dir(args: argparse.Namespace, default: Path = DEFAULT_OUT) -> Path:
    """--out, else ``default``; a quick run without --out writes to a new temporary
    directory, never over committed results."""
    if args.out is not None:
        return Path(args.out)
    if args.quick:
        return Path(tempfile.mkdtemp(prefix="snn_ipu_bench_"))
    return default


def main(argv: Optional[Sequence[str]] = None, default_out: Path = DEFAULT_OUT,
         prog: str = "snn-ipu bench") -> int:
    """Runs the benchmark; writes ``bench_<config>.json`` and ``.png`` per config and,
    for the whole run, ``summary.md`` (the README's table at the run's activities, and
    the listed entries per step) and ``summary.png``."""
    args = parse_args(argv, prog)
    folder = results_dir(args, default_out)
    try:
        out = output_folder(folder, "--out")
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder mkdir refuses (a name too long, no permission, a
        # read-only file system): one line, not a traceback
        print(f"{prog}: error: --out {folder}: cannot create the folder "
              f"({exc.strerror or exc})", file=sys.stderr)
        return 2
    if args.device != "cpu":
        from .gpu import run

        return run(args, out)
    status = {fam: family_status(fam) for fam in sorted(set(FAMILY.values()))}
    for fam, err in status.items():
        if err:
            print(f"note: backend {fam} unavailable: {err}")
    t0 = time.perf_counter()
    results = []
    for name in args.configs:
        print(f"config {name} ...", flush=True)
        json_path = out / f"bench_{name}.json"
        t_config = time.perf_counter()
        result = run_config(name, args, status, partial_path=json_path)
        result["wall_s"] = time.perf_counter() - t_config
        result["args"] = {k: v for k, v in vars(args).items()}
        write_json(json_path, result)  # the partial result stays whole until replaced
        err = plot(result, out / f"bench_{name}.png")
        print(table(result))
        print(f"wrote {json_path}" + ("" if err is None else f" ({err})"), flush=True)
        results.append(result)
    (out / "summary.md").write_text(markdown_table(results, args.activities) + "\n\n"
                                    + caption(results) + "\n\n"
                                    + entries_table(results, args.activities) + "\n")
    summary_plot(results, out / "summary.png")
    print(f"total {time.perf_counter() - t0:.0f}s; README table in {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
