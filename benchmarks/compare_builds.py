"""What a build of the extension costs against another: the emulator's sparse training
step (the training benchmark's, snn_ipu.bench: grad_window 0.1), or its exact one
(``--exact``: grad_window None), of one config at one activity.

A build is ``label=TREE[:ARCH]``: a source tree whose extension was built in place
(``python setup.py build_ext --inplace``, with or without SNN_IPU_NATIVE=1) and the
SNN_IPU_ARCH that picks its module there (default ``auto``).

Every build runs in a worker process of its own (two builds of the extension cannot
share a process: they register the same pybind11 types), each driving its own copy
of the same calibrated network; the workers take turns one training step at a time,
the order alternating, so that load from elsewhere on the machine falls on all of
them alike. A round's ratio is a build's step time over the first build's in that
round. The result: per build the median step time, and the median and interquartile
range of its ratios.

    python benchmarks/compare_builds.py native=/tmp/tree_native portable=. \\
        baseline=.:baseline --rounds 200
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


def worker(problem_path: str, lr: float, exact: bool) -> None:
    """Loads one build, then runs one training step per line read, printing its time."""
    import torch

    from snn_ipu import _native
    from snn_ipu.bench.configs import SPARSE_WINDOW
    from snn_ipu.bench.networks import OursNet

    problem = torch.load(problem_path)
    net = OursNet(problem, "emulator", None if exact else SPARSE_WINDOW, lr=lr, adam="fused")
    net.step()  # warm-up
    print(json.dumps({"build": _native.build}), flush=True)
    for _ in sys.stdin:
        t0, c0 = time.perf_counter(), time.process_time()
        net.step()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "activity": net.activity()}),
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="*", help="label=TREE[:ARCH]")
    ap.add_argument("--config", default="S")
    ap.add_argument("--activity", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.0,
                    help="Adam's learning rate (0: the step costs the same, and the activity "
                         "stays where it was calibrated)")
    ap.add_argument("--threads", type=int, default=1,
                    help="executor and torch threads per worker (1: least sensitive to other "
                         "load on the machine)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time a step by the wall clock, or by the worker's CPU time "
                         "(process_time: on a machine others load, with --threads 1, it counts "
                         "the step's own work and not the waits for a core)")
    ap.add_argument("--exact", action="store_true",
                    help="the exact-gradient step (grad_window None) instead of the sparse one")
    ap.add_argument("--trained-folder", default=tempfile.gettempdir(),
                    help="where a trained config's network is trained once and kept")
    ap.add_argument("--worker", metavar="PROBLEM", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.lr, args.exact)
        return
    if len(args.builds) < 2:
        ap.error("give two builds or more")

    from pathlib import Path

    import torch

    from snn_ipu.bench.configs import CONFIGS
    from snn_ipu.bench.trained import is_trained, trained_problem
    from snn_ipu.bench.workload import calibrate, make_problem

    cfg = CONFIGS[args.config]
    if is_trained(cfg):
        # the benchmark's trained network at its own activity (--activity unused), trained
        # once into --trained-folder
        problem = trained_problem(args.config, cfg, args.seed, "emulator",
                                  Path(args.trained_folder), log=lambda _: None)
    else:
        problem = make_problem(cfg, args.activity, args.seed)
        calibrate(problem, "emulator")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "problem.pt")
        torch.save(problem, path)
        workers = []
        for spec in args.builds:
            label, _, rest = spec.partition("=")
            tree, _, arch = rest.partition(":")
            tree = os.path.abspath(tree)
            env = dict(os.environ, PYTHONPATH=tree, SNN_IPU_ARCH=arch or "auto",
                       SNN_IPU_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
            # A worker waiting for its turn would otherwise keep its OpenMP threads
            # spinning on the cores the stepping worker needs (on 2 cores the quartiles
            # of the ratios spread to 0.7-1.35); the same for every build.
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", path, "--lr",
                 str(args.lr)] + ["--exact"] * args.exact, env=env, cwd=tree, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
            build = json.loads(proc.stdout.readline())["build"]
            workers.append((label, build, proc))
        times = {label: [] for label, _, _ in workers}
        activity = {}
        try:
            for r in range(args.rounds):
                for label, _, proc in (workers if r % 2 == 0 else workers[::-1]):
                    proc.stdin.write("step\n")
                    proc.stdin.flush()
                    res = json.loads(proc.stdout.readline())
                    times[label].append(res["seconds" if args.clock == "wall" else "cpu_seconds"])
                    activity[label] = res["activity"]
        finally:
            for _, _, proc in workers:
                proc.stdin.close()
                proc.wait()
    first = workers[0][0]
    step = "exact" if args.exact else "sparse"
    print(f"{args.config} {step} step at activity {args.activity}, {args.rounds} rounds of one "
          f"step per build (a worker process each, order alternating), {args.threads} thread(s), "
          f"{args.clock} clock, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}; "
          f"median step time, and ratio to {first} per round: median [quartiles]")
    for label, build, _ in workers:
        ratios = [a / b for a, b in zip(times[label], times[first])]
        q = statistics.quantiles(ratios, n=4)
        print(f"  {label:>12} ({build}): {1e3 * statistics.median(times[label]):.2f} ms  "
              f"ratio {statistics.median(ratios):.3f} [{q[0]:.3f}, {q[2]:.3f}]  activity "
              + ", ".join(f"{a:.4f}" for a in activity[label]))


if __name__ == "__main__":
    main()
