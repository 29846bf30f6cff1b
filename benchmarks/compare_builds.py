"""What a build of the extension costs against another: the emulator's sparse training
step (the training benchmark's, snn_ipu.bench: grad_window 0.1) of one config at one activity.

A build is ``label=TREE[:ARCH]``: a source tree whose extension was built in place
(``python setup.py build_ext --inplace``, with or without SNN_IPU_NATIVE=1) and the
SNN_IPU_ARCH that picks its module (default ``auto``).

Default: every build's module is loaded into this one process, each drives its own
copy of the same network, and the builds take turns step by step (the order
alternating), so that load from elsewhere on the machine falls on all of them alike;
a pair's ratio is a build's step time over the first build's in the same round. The
result: per build the median step time, and the median and interquartile range of
its ratios. ``--processes``: alternating subprocesses instead, one per build and
round, each timing ``--steps`` steps.

    python benchmarks/compare_builds.py native=/tmp/tree_native portable=.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(problem_path: str, steps: int, lr: float) -> None:
    import torch

    from snn_ipu import _native
    from snn_ipu.bench.configs import SPARSE_WINDOW
    from snn_ipu.bench.networks import OursNet

    problem = torch.load(problem_path)
    net = OursNet(problem, "emulator", SPARSE_WINDOW, lr=lr, adam="fused")
    net.step()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        net.step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"build": _native.build, "median_s": statistics.median(times),
                      "activity": net.activity()}))


def load_build(tree: str, arch: str):
    """(build name, module) of the extension build ``arch`` picks in ``tree``."""
    import glob
    import importlib.util

    from snn_ipu import _native

    files = {name: glob.glob(os.path.join(tree, "snn_ipu", f"{module}.*.so"))
             for name, (module, _) in _native.BUILDS.items()}
    name = _native.choose(arch, [n for n, f in files.items() if f], _native._cpu_level())
    module = _native.BUILDS[name][0]
    spec = importlib.util.spec_from_file_location(f"snn_ipu.{module}", files[name][0])
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return name, loaded


def in_process(builds, problem, args) -> None:
    import torch

    from snn_ipu import _native
    from snn_ipu.backends import emulator
    from snn_ipu.bench.configs import SPARSE_WINDOW
    from snn_ipu.bench.networks import OursNet

    torch.set_num_threads(args.threads)
    emulator.set_num_threads(args.threads)
    runs = []
    for label, tree, arch in builds:
        name, module = load_build(tree, arch)
        runs.append((label, name, module, OursNet(problem, "emulator", SPARSE_WINDOW,
                                                   lr=args.lr, adam="fused")))

    def step(module, net) -> float:
        _native._C = emulator._C = module  # every user reads it from these two
        t0 = time.perf_counter()
        net.step()
        return time.perf_counter() - t0

    for _, _, module, net in runs:  # warm-up
        step(module, net)
    times = {label: [] for label, *_ in runs}
    for r in range(args.rounds * args.steps):
        for label, _, module, net in (runs if r % 2 == 0 else runs[::-1]):
            times[label].append(step(module, net))
    first = runs[0][0]
    print(f"{args.config} at activity {args.activity}, {len(times[first])} rounds of one step "
          f"per build (in one process, order alternating), {args.threads} thread(s); median "
          f"step time, and ratio to {first} per round: median [quartiles]")
    for label, name, _, net in runs:
        ratios = sorted(a / b for a, b in zip(times[label], times[first]))
        q = statistics.quantiles(ratios, n=4)
        print(f"  {label:>12} ({name}): {1e3 * statistics.median(times[label]):.2f} ms  "
              f"ratio {statistics.median(ratios):.3f} [{q[0]:.3f}, {q[2]:.3f}]  activity "
              + ", ".join(f"{a:.4f}" for a in net.activity()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="*", help="label=TREE[:ARCH]")
    ap.add_argument("--config", default="S")
    ap.add_argument("--activity", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.0,
                    help="Adam's learning rate (0: the step costs the same, and the activity "
                         "stays where it was calibrated)")
    ap.add_argument("--threads", type=int, default=1,
                    help="executor and torch threads per process (1: least sensitive to "
                         "other load on the machine)")
    ap.add_argument("--processes", action="store_true",
                    help="alternating subprocesses instead of one process")
    ap.add_argument("--worker", nargs=2, metavar=("PROBLEM", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.lr)
        return

    import torch

    from snn_ipu.bench.configs import CONFIGS
    from snn_ipu.bench.workload import calibrate, make_problem

    builds = []
    for spec in args.builds:
        label, _, rest = spec.partition("=")
        tree, _, arch = rest.partition(":")
        builds.append((label, str(Path(tree).resolve()), arch or "auto"))
    problem = make_problem(CONFIGS[args.config], args.activity, args.seed)
    calibrate(problem, "emulator")
    if not args.processes:
        in_process(builds, problem, args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "problem.pt")
        torch.save(problem, path)
        times = {label: [] for label, _, _ in builds}
        loaded = {}
        for r in range(args.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            for label, tree, arch in order:
                env = dict(os.environ, PYTHONPATH=tree, SNN_IPU_ARCH=arch,
                           SNN_IPU_NUM_THREADS=str(args.threads),
                           OMP_NUM_THREADS=str(args.threads))
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", path, str(args.steps), "--lr",
                     str(args.lr)],
                    env=env, capture_output=True, text=True, check=True, cwd=tree)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                times[label].append(res["median_s"])
                loaded[label] = res["build"]
            print(f"round {r + 1}: " + ", ".join(
                f"{label} {1e3 * times[label][-1]:.2f} ms" for label, _, _ in builds),
                flush=True)
    first = builds[0][0]
    print(f"\n{args.config} at activity {args.activity}, {args.rounds} rounds x "
          f"{args.steps} steps, {args.threads} thread(s); median step time, and ratio to "
          f"{first} per round")
    for label, _, _ in builds:
        ratios = [a / b for a, b in zip(times[label], times[first])]
        print(f"  {label:>12} ({loaded[label]}): {1e3 * statistics.median(times[label]):.2f} ms"
              f"  ratio median {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
