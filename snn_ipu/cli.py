"""Command line: ``python -m snn_ipu train`` and ``python -m snn_ipu bench``.

``train`` fits a three-layer spiking network to the built-in Randman task
(:mod:`snn_ipu.data.randman`) with BPTT and Adam::

    spikes [T, B, inputs] -> LIFLayer(hidden) -> LIFLayer(hidden) -> readout

The readout is a non-spiking :class:`~snn_ipu.ReadoutLayer` trained with the max-over-time
membrane cross-entropy (``--output membrane``, the default) or a spiking
:class:`~snn_ipu.LIFLayer` trained with the spike-count cross-entropy (``--output spikes``).
Everything is seeded by ``--seed``.

``bench`` hands its arguments to ``benchmarks/bench_training.py``'s ``main(argv)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from . import losses
from .data.randman import batches, make_randman, split

__all__ = ["main", "build_model", "train"]

BENCH_SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_training.py"


def build_model(
    num_inputs: int,
    num_hidden: int,
    num_classes: int,
    output: str = "membrane",
    recurrent: bool = False,
    grad_window: Optional[float] = None,
    backend: str = "auto",
    beta: float = 0.9,
    weight_scale: float = 3.0,
) -> nn.Sequential:
    """in -> LIF -> LIF -> readout (membrane) or LIF (spikes).

    Weights are drawn from N(0, (weight_scale / sqrt(fan_in))^2): torch's default
    (uniform, +-1/sqrt(fan_in)) leaves the hidden layers silent on sparse input
    (one spike per input neuron per sample), which starves the next layer.
    """
    from .layers import LIFLayer, ReadoutLayer

    def lif(n_in: int, n_out: int, rec: bool, name: str) -> LIFLayer:
        return LIFLayer(
            n_in, n_out, beta=beta, grad_window=grad_window, recurrent=rec,
            backend=backend, name=name,
        )

    hidden = [
        lif(num_inputs, num_hidden, recurrent, "hidden1"),
        lif(num_hidden, num_hidden, recurrent, "hidden2"),
    ]
    if output == "membrane":
        last: nn.Module = ReadoutLayer(num_hidden, num_classes, beta=beta, backend=backend)
    elif output == "spikes":
        # Exact gradients: a windowed spiking output layer stops learning (output
        # neurons far below threshold never get a gradient), and at 10-20 neurons
        # the window would save nothing.
        last = LIFLayer(num_hidden, num_classes, beta=beta, backend=backend, name="output")
    else:
        raise ValueError(f"output must be 'membrane' or 'spikes', got {output!r}")
    model = nn.Sequential(*hidden, last)
    with torch.no_grad():
        for layer in model:
            nn.init.normal_(layer.weight, 0.0, weight_scale / math.sqrt(layer.in_features))
            if getattr(layer, "rec_weight", None) is not None:
                # Recurrent input is dense in time; keep it weak at the start.
                nn.init.normal_(layer.rec_weight, 0.0, 0.5 / math.sqrt(layer.out_features))
            if layer.bias is not None:
                layer.bias.zero_()
    return model


def _loss_and_accuracy(out, labels: torch.Tensor, output: str):
    if output == "membrane":
        loss = losses.ce_membrane_loss(out, labels, time_reduction="max")
        return loss, losses.accuracy(out, labels, time_reduction="max")
    return losses.ce_count_loss(out, labels), losses.accuracy(out, labels)


def _spiking_layers(model: nn.Sequential) -> List[nn.Module]:
    return [m for m in model if hasattr(m, "threshold")]


def evaluate(model: nn.Sequential, spikes, labels, batch_size: int, output: str) -> float:
    correct = 0.0
    with torch.no_grad():
        for x, y in batches(spikes, labels, batch_size):
            _, acc = _loss_and_accuracy(model(x), y, output)
            correct += acc * len(y)
    return correct / len(labels)


def train(args: argparse.Namespace, log=print) -> Dict[str, float]:
    """Runs the training described by parsed ``train`` arguments; returns final metrics."""
    torch.manual_seed(args.seed)
    spikes, labels = make_randman(
        num_classes=args.classes,
        num_inputs=args.inputs,
        num_steps=args.steps,
        num_samples_per_class=args.samples_per_class,
        dim_manifold=args.dim_manifold,
        alpha=args.alpha,
        seed=args.seed,
    )
    train_set, test_set = split(spikes, labels, test_fraction=0.2)
    model = build_model(
        args.inputs, args.hidden, args.classes, args.output, args.recurrent,
        args.grad_window, args.backend,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffle = torch.Generator().manual_seed(args.seed)
    spiking = _spiking_layers(model)
    log(
        f"randman: {args.classes} classes, {args.inputs} inputs, T={args.steps}, "
        f"{len(train_set)} train / {len(test_set)} test samples | network "
        f"{args.inputs}-{args.hidden}-{args.hidden}-{args.classes} ({args.output} output, "
        f"recurrent={args.recurrent}, grad_window={args.grad_window}, backend={args.backend})"
    )
    metrics: Dict[str, float] = {}
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        total_loss = correct = 0.0
        activity = [0.0] * len(spiking)
        num_batches = 0
        for x, y in batches(
            train_set.spikes, train_set.labels, args.batch_size, shuffle=True, generator=shuffle
        ):
            loss, acc = _loss_and_accuracy(model(x), y, args.output)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += float(loss.detach()) * len(y)
            correct += acc * len(y)
            num_batches += 1
            for i, layer in enumerate(spiking):
                activity[i] += layer.stats.get("activity", float("nan"))
        test_acc = evaluate(model, test_set.spikes, test_set.labels, args.batch_size, args.output)
        metrics = {
            "loss": total_loss / len(train_set),
            "train_acc": correct / len(train_set),
            "test_acc": test_acc,
        }
        layer_activity = " ".join(
            f"{layer.name}={a / num_batches:.3f}" for layer, a in zip(spiking, activity)
        )
        log(
            f"epoch {epoch:3d}  loss {metrics['loss']:.4f}  train acc {metrics['train_acc']:.3f}"
            f"  test acc {test_acc:.3f}  activity {layer_activity}"
            f"  ({time.perf_counter() - start:.1f}s)"
        )
    chance = 1.0 / args.classes
    log(f"final test accuracy {metrics['test_acc']:.3f} (chance {chance:.3f})")
    return metrics


def _at_least(low: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        return value

    return parse


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _window(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=_at_least(1), default=None, help="default 12 (4 with --quick)")
    p.add_argument("--batch-size", type=_at_least(1), default=None,
                   help="default 64 (32 with --quick)")
    p.add_argument("--hidden", type=_at_least(1), default=128, help="neurons per hidden layer")
    p.add_argument("--steps", type=_at_least(1), default=50, help="timesteps T")
    p.add_argument("--lr", type=_positive_float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--grad-window", type=_window, default=None,
        help="surrogate support below threshold (sparse backward); default: exact",
    )
    p.add_argument("--backend", default="auto", choices=("auto", "reference", "emulator", "ipu"))
    p.add_argument("--recurrent", action="store_true", help="recurrent hidden layers")
    p.add_argument("--output", default="membrane", choices=("membrane", "spikes"))
    p.add_argument("--quick", action="store_true", help="small, fast run (smoke test)")
    data = p.add_argument_group("Randman data")
    data.add_argument("--classes", type=_at_least(2), default=10)
    data.add_argument("--inputs", type=_at_least(1), default=100)
    data.add_argument(
        "--samples-per-class", type=_at_least(3), default=None,
        help="default 150 (50 with --quick); 3 or more, so that the 20%% test split of "
             "each class holds a sample",
    )
    data.add_argument("--dim-manifold", type=_at_least(1), default=1)
    data.add_argument("--alpha", type=_positive_float, default=2.0, help="manifold smoothness")


def _apply_defaults(args: argparse.Namespace) -> None:
    if args.epochs is None:
        args.epochs = 4 if args.quick else 12
    if args.samples_per_class is None:
        args.samples_per_class = 50 if args.quick else 150
    if args.batch_size is None:
        args.batch_size = 32 if args.quick else 64


def _run_bench(argv: Sequence[str]) -> int:
    if not BENCH_SCRIPT.is_file():
        print(f"error: benchmark script not found at {BENCH_SCRIPT}", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("snn_ipu_bench_training", BENCH_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "main"):
        print(f"error: {BENCH_SCRIPT} defines no main(argv)", file=sys.stderr)
        return 2
    result = module.main(list(argv))
    return int(result or 0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m snn_ipu", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train_arguments(
        commands.add_parser("train", help="train a 3-layer SNN on the built-in Randman data")
    )
    commands.add_parser(
        "bench", help="run benchmarks/bench_training.py (arguments are passed through)",
        add_help=False,
    )
    if argv and argv[0] == "bench":
        return _run_bench(argv[1:])
    args = parser.parse_args(argv)
    _apply_defaults(args)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
