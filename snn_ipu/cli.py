"""Command line ``snn-ipu`` (also ``python -m snn_ipu``).

    snn-ipu train --data digits --save runs/digits/model.pt
    snn-ipu train --resume runs/digits/model.pt --epochs 90
    snn-ipu eval runs/digits/model.pt
    snn-ipu plot runs/digits/model.metrics.jsonl
    snn-ipu plan --data shd --hidden 256 256 --batch-size 64
    torchrun --nproc_per_node 2 -m snn_ipu train --data digits

``train`` fits ``inputs -> hidden LIF layers -> readout`` with BPTT and Adam
(:mod:`snn_ipu.training`); ``eval`` scores a checkpoint; ``plot`` draws a run's curves
and spike rasters (:mod:`snn_ipu.plot`); ``plan`` prints the IPU fit report of the
configured network (exit status 1 when it does not fit); ``bench`` runs the training
benchmark. See docs/cli.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import List, Optional, Sequence

from ._arg_types import RateAndStrength, at_least, decay, fraction, non_negative, positive

__all__ = ["main", "build_parser"]

PROG = "snn-ipu"

BACKENDS = ("auto", "reference", "emulator", "triton", "ipu")
DEVICE_HELP = ("where the model runs: cpu, cuda or cuda:N (not saved in the checkpoint: a "
               "run may resume on another device) (default: cpu)")


def _data_name(text: str) -> str:
    from .data.tasks import DATA_CHOICES

    if text in DATA_CHOICES[:-1] or (text.startswith("tonic:") and len(text) > len("tonic:")):
        return text
    raise argparse.ArgumentTypeError(f"must be one of {', '.join(DATA_CHOICES)}, got {text}")


def _add_training_options(p: argparse.ArgumentParser) -> None:
    """The options of a TrainConfig. Every default is None here and filled from
    TrainConfig (shown in the help), so that an option given on the command line can
    be told from one left out (``--resume`` refuses to change most of them)."""
    from .overflow import OVERFLOW_POLICIES
    from .training import MAX_SEED, TrainConfig

    d = TrainConfig()

    def opt(group, flag, help_text, default_text=None, **kw):
        dest = kw.pop("dest", flag.lstrip("-").replace("-", "_"))
        shown = getattr(d, dest, None) if default_text is None else default_text
        group.add_argument(flag, dest=dest, default=None,
                           help=f"{help_text} (default: {shown})", **kw)

    data = p.add_argument_group("data")
    opt(data, "--data", "dataset: randman, digits, shd, ssc or tonic:NAME (a tonic.datasets "
        "class)", type=_data_name, metavar="NAME")
    opt(data, "--data-dir", "folder of the shd/ssc .h5 files or of the tonic dataset")
    opt(data, "--steps", "time steps T", "10 for digits, 50 for randman, 100 for event data",
        dest="num_steps", type=at_least(1))
    opt(data, "--duration", "event data: time covered by the steps, in the events' unit "
        "(SHD/SSC: seconds; tonic: microseconds)", "1.4 for shd, 1.0 for ssc",
        type=positive)
    opt(data, "--dt", "event data: bin width instead of --duration", type=positive)
    opt(data, "--outside", "event data: events past the time grid", choices=("error", "drop"))
    opt(data, "--tonic-pool", "tonic: pixels per input neuron, KX KY", nargs=2,
        type=at_least(1), metavar=("KX", "KY"))
    opt(data, "--merge-polarity", "tonic: one input per pixel for both polarities",
        action="store_const", const=True)
    opt(data, "--randman-classes", "Randman classes", type=at_least(2))
    opt(data, "--randman-inputs", "Randman input neurons", type=at_least(1))
    opt(data, "--randman-samples-per-class", "Randman samples per class (3 or more: the 20%% "
        "test split of each class needs one)", type=at_least(3))
    opt(data, "--randman-dim", "Randman manifold dimension", type=at_least(1))
    opt(data, "--randman-alpha", "Randman manifold smoothness", type=positive)

    net = p.add_argument_group("network")
    opt(net, "--hidden", "hidden layer sizes", " ".join(map(str, d.hidden)), nargs="+",
        type=at_least(1), metavar="N")
    opt(net, "--neuron", "hidden neuron model: lif (snnTorch Leaky) or synaptic (Synaptic)",
        choices=("lif", "synaptic"))
    opt(net, "--recurrent", "recurrent hidden layers (RLeaky/RSynaptic)",
        action="store_const", const=True)
    opt(net, "--readout", "membrane: a leaky readout trained on its membrane; spikes: a "
        "spiking output layer trained on spike counts", choices=("membrane", "spikes"))
    opt(net, "--time-reduction", "membrane readout: the membrane's reduction over time in "
        "the cross-entropy", choices=("max", "mean", "sum", "last", "per_step"))
    opt(net, "--beta", "membrane decay", type=decay)
    opt(net, "--alpha", "synaptic decay (--neuron synaptic)", type=decay)
    opt(net, "--threshold", "firing threshold", type=positive)
    opt(net, "--grad-window", "surrogate support below threshold in the hidden layers "
        "(sparse backward pass); none: exact gradients", type=non_negative)
    opt(net, "--max-spikes", "spike-list capacity per step and sample; none: fitted per call "
        "(CPU and GPU backends)", type=at_least(1))
    opt(net, "--overflow", "when a list overflows max-spikes", choices=OVERFLOW_POLICIES)
    opt(net, "--backend", "layer backend (auto: emulator on the CPU, triton with --device "
        "cuda)", choices=BACKENDS)
    opt(net, "--weight-scale", "initial weights ~ N(0, (scale/sqrt(fan_in))^2)", type=positive)

    fit = p.add_argument_group("training")
    opt(fit, "--epochs", "epochs", type=at_least(1))
    opt(fit, "--batch-size", "samples per batch (over all processes)", type=at_least(1))
    opt(fit, "--lr", "Adam learning rate", type=positive)
    opt(fit, "--lr-schedule", "learning rate over the run", choices=("cosine", "constant"))
    opt(fit, "--seed", "seed of the weights, the data order and the data split",
        type=at_least(0, MAX_SEED))
    opt(fit, "--reg-l1", "l1_rate_sparsity scale on the hidden spikes (0: off)",
        type=non_negative)
    opt(fit, "--reg-lower", "lower_rate_penalty: min spikes/step per neuron, strength",
        nargs=2, type=non_negative, metavar=("RATE", "STRENGTH"),
        action=RateAndStrength)
    opt(fit, "--augment-jitter", "training batches: move each input spike by up to this "
        "many steps, at random", "1 for digits, 0 otherwise", type=at_least(0))
    opt(fit, "--augment-drop", "training batches: delete each input spike with this "
        "probability", "0.1 for digits, 0 otherwise", type=decay)
    opt(fit, "--reg-upper", "upper_rate_penalty: max mean spikes/step per layer, strength",
        nargs=2, type=non_negative, metavar=("RATE", "STRENGTH"),
        action=RateAndStrength)


def _config_from(args: argparse.Namespace, base=None):
    """TrainConfig: ``base`` (or the defaults) with the options given on the command line."""
    from .training import TrainConfig

    config = base or TrainConfig()
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(config)
             if getattr(args, f.name, None) is not None}
    return dataclasses.replace(config, **given), given


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train", help="train a network (default: the digits dataset)",
        description="Train a spiking network with BPTT and Adam. Checkpoints (--save) are "
                    "written atomically after every epoch, with a metrics log next to them.")
    _add_training_options(train)
    run = train.add_argument_group("run")
    run.add_argument("--save", metavar="PATH", help="checkpoint file, written after every "
                     "epoch (default: the --resume file, else none)")
    run.add_argument("--resume", metavar="PATH", help="continue from a checkpoint, with its "
                     "config (only --epochs, --data-dir and --backend may change) "
                     "(default: none)")
    run.add_argument("--overwrite", action="store_true",
                     help="let the run replace an existing --save or --log file (without "
                          "it, only a checkpoint resumed in place and its log) (default: off)")
    run.add_argument("--log", metavar="PATH", help="metrics log, JSON lines (default: next to "
                     "--save, as NAME.metrics.jsonl)")
    run.add_argument("--device", help=DEVICE_HELP)
    run.add_argument("--workers", type=at_least(0), default=0,
                     help="DataLoader processes reading and binning the data (default: 0)")
    run.add_argument("--download", action="store_true",
                     help="tonic:NAME: download the dataset into --data-dir when its files are "
                          "missing (without it nothing is downloaded) (default: off)")
    run.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                     help="per-batch progress bar (auto: on a terminal) (default: auto)")
    run.add_argument("--quick", action="store_true",
                     help="a short smoke run: 2 epochs (50 samples per class on randman) "
                          "unless given (default: off)")

    evaluate = commands.add_parser(
        "eval", help="accuracy and activity of a saved model",
        description="Accuracy, loss and per-layer activity of a checkpoint on its data.")
    evaluate.add_argument("checkpoint")
    evaluate.add_argument("--data", type=_data_name, help="another dataset of the same sizes "
                          "(default: the checkpoint's)")
    evaluate.add_argument("--data-dir", help="where the data is now (default: the "
                          "checkpoint's)")
    evaluate.add_argument("--split", choices=("test", "train"), default="test",
                          help="(default: test)")
    evaluate.add_argument("--backend", choices=BACKENDS, help="(default: the checkpoint's)")
    evaluate.add_argument("--device", help=DEVICE_HELP)
    evaluate.add_argument("--batch-size", type=at_least(1), help="(default: the checkpoint's)")
    evaluate.add_argument("--workers", type=at_least(0), default=0, help="(default: 0)")
    evaluate.add_argument("--download", action="store_true",
                          help="tonic:NAME: download missing files into --data-dir "
                               "(default: off)")

    plot = commands.add_parser(
        "plot", help="PNGs of a run: curves, activity, spike rasters",
        description="Loss/accuracy curves and per-layer activity over epochs from a metrics "
                    "log or a checkpoint, and (from a checkpoint, or a log whose checkpoint "
                    "exists) a spike raster of one test sample per layer.")
    plot.add_argument("source", metavar="LOG_OR_CKPT")
    plot.add_argument("--out", help="folder of the PNGs (default: next to the source)")
    plot.add_argument("--sample", type=at_least(0), default=0,
                      help="test sample of the raster (default: 0)")
    plot.add_argument("--data-dir", help="where the data is now (default: the run's)")

    plan = commands.add_parser(
        "plan", help="IPU fit report of the configured network",
        description="Tiles, memory per tile and estimated cycles of the network that train "
                    "would build (or of a checkpoint's), on a Mk2 IPU. Exit status 1 when "
                    "the network does not fit.")
    _add_training_options(plan)
    plan.add_argument("--checkpoint", help="plan this checkpoint's network; of the options "
                      "above only --batch-size, --steps, --dt, --duration and --max-spikes "
                      "may change (default: none)")
    plan.add_argument("--target", choices=("ipu2", "host"), default="ipu2",
                      help="(default: ipu2)")
    # a fraction checked by argparse: above 1 it passed here and snn_ipu.plan refused it
    # after the report's first line was printed
    plan.add_argument("--activity", type=fraction, default=0.05,
                      help="expected fraction of neurons spiking per step, in (0, 1] "
                           "(default: 0.05)")
    plan.add_argument("--input-max-spikes", type=at_least(1), default=None,
                      help="capacity of the input list (default: from --activity)")
    plan.add_argument("--pipelined", action="store_true",
                      help="plan the pipelined network (snn_ipu.pipeline: each layer reads "
                           "its input one step late, the layers on tiles of their own)")
    plan.add_argument("--graph-report", action="store_true",
                      help="also build the IPU program on the host and print its report "
                           "beside the plan's estimates (ipu2; slow for large networks)")

    commands.add_parser("bench", help="run the training benchmark (snn-ipu bench --help)",
                        add_help=False)
    return parser


def _unused_options(config, given) -> list:
    """The options given on the command line that ``config``'s data, neuron or readout
    does not read (each would be accepted and change nothing)."""
    event_data = config.data in ("shd", "ssc") or config.data.startswith("tonic:")
    applies = {
        "data_dir": (event_data, "event data (shd, ssc, tonic:NAME)"),
        "duration": (event_data, "event data (shd, ssc, tonic:NAME)"),
        "dt": (event_data, "event data (shd, ssc, tonic:NAME)"),
        "outside": (event_data, "event data (shd, ssc, tonic:NAME)"),
        "tonic_pool": (config.data.startswith("tonic:"), "--data tonic:NAME"),
        "merge_polarity": (config.data.startswith("tonic:"), "--data tonic:NAME"),
        "alpha": (config.neuron == "synaptic", "--neuron synaptic"),
        "time_reduction": (config.readout == "membrane", "--readout membrane"),
    }
    for name in given:
        if name.startswith("randman_"):
            applies[name] = (config.data == "randman", "--data randman")
    return [f"--{name.replace('_', '-')} (only for {needs})"
            for name, (used, needs) in applies.items() if name in given and not used]


def _flags(names) -> str:
    """The command line's options of TrainConfig fields (``num_steps`` is ``--steps``)."""
    return ", ".join("--" + {"num_steps": "steps"}.get(name, name).replace("_", "-")
                     for name in names)


def _refuse_unused(command: str, config, given) -> bool:
    """Prints the error and returns True where an option given is not read by
    ``config``'s run (:func:`_unused_options`)."""
    unused = _unused_options(config, given)
    if unused:
        print(f"{PROG} {command}: error: {', '.join(unused)}: not read by this run "
              f"(--data {config.data}, --neuron {config.neuron}, --readout {config.readout})",
              file=sys.stderr)
    return bool(unused)


def _ipu_defaults(config, given):
    """A new run on the IPU: the defaults that PopTorch's loop does not implement (a
    cosine schedule, the dataset's augmentation) replaced by what it does, so that its
    checkpoints record what ran (and the run says so on stderr); options given for
    them are refused by poptorch_training.check_ipu_config."""
    changes = {}
    if "lr_schedule" not in given:
        changes["lr_schedule"] = "constant"
    if "augment_jitter" not in given:
        changes["augment_jitter"] = 0
    if "augment_drop" not in given:
        changes["augment_drop"] = 0.0
    return dataclasses.replace(config, **changes)


def _run_train(args: argparse.Namespace) -> int:
    from .checkpoint import load_checkpoint, require_entries
    from .training import RESUME_OVERRIDES, TrainConfig, train

    if args.resume:
        if args.quick:
            print(f"{PROG} train: error: --quick sets a new run's length; --resume continues "
                  "a run to --epochs", file=sys.stderr)
            return 2
        if args.save is None:  # the resumed epochs go where the run was
            args.save = args.resume
        state = load_checkpoint(args.resume)
        require_entries(state, args.resume, ("config",), "resume training")
        saved = TrainConfig.from_dict(state["config"])
        config, given = _config_from(args, saved)
        refused = sorted(set(given) - set(RESUME_OVERRIDES))
        if refused:
            print(f"{PROG} train: error: --resume continues the checkpoint's run; "
                  f"{_flags(refused)} cannot change (only {_flags(RESUME_OVERRIDES)} can)",
                  file=sys.stderr)
            return 2
    else:
        config, given = _config_from(args)
        if config.backend == "ipu":
            config = _ipu_defaults(config, given)
        if args.quick:
            if "epochs" not in given:
                config.epochs = 2
            if "randman_samples_per_class" not in given:
                config.randman_samples_per_class = 50
    if _refuse_unused("train", config, given):
        return 2
    if config.backend == "ipu":  # PopTorch's own loop (docs/ipu.md)
        from . import poptorch_training
        from ._paths import FileLocks, writable_file
        from .data.tasks import load_task
        from .training import check_not_replacing, training_device

        training_device(args.device, config.backend)  # refuses --device
        unused = [flag for flag, given in (("--log", args.log is not None),
                                           ("--workers", args.workers > 0),
                                           ("--progress on", args.progress == "on")) if given]
        if unused:
            raise ValueError(f"{', '.join(unused)}: not with --backend ipu (PopTorch's loop "
                             "prints a line per epoch and reads the data itself)")
        if args.save is not None:
            writable_file(args.save, "--save")
        if not args.overwrite:
            check_not_replacing(args.save, None, args.resume)
        poptorch_training._poptorch()  # without PopTorch, that error alone
        if not args.resume:
            print(f"{PROG} train: --backend ipu trains at a constant learning rate without "
                  "augmentation (PopTorch's loop)", file=sys.stderr)
        with FileLocks([args.save]):
            poptorch_training.train_config(
                config, load_task(config, download=args.download), checkpoint=args.save,
                resume=args.resume)
        return 0
    progress = {"auto": None, "on": True, "off": False}[args.progress]
    train(config, save=args.save, resume=args.resume, log_path=args.log, progress=progress,
          workers=args.workers, download=args.download, device=args.device,
          overwrite=args.overwrite)
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    from .checkpoint import load_checkpoint, require_entries
    from .data.tasks import load_task
    from .training import (
        TrainConfig,
        _layer_text,
        build_model,
        evaluate,
        load_weights,
        training_device,
    )

    state = load_checkpoint(args.checkpoint)
    require_entries(state, args.checkpoint, ("config", "model", "epoch"), "evaluate it")
    config = TrainConfig.from_dict(state["config"])
    changes = {k: v for k, v in (("data", args.data), ("data_dir", args.data_dir),
                                 ("backend", args.backend), ("batch_size", args.batch_size))
               if v is not None}
    config = dataclasses.replace(config, **changes)
    if _refuse_unused("eval", config, changes):  # --data-dir of digits or randman
        return 2
    device = training_device(args.device, config.backend)
    task = load_task(config, download=args.download)
    model = build_model(config, task.num_inputs, task.num_classes)
    load_weights(model, state, args.checkpoint)
    model.to(device).eval()
    dataset = task.test if args.split == "test" else task.train
    result = evaluate(model, task, config, workers=args.workers, dataset=dataset)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one report (as train's)
        print(f"{args.checkpoint} (epoch {state['epoch']}) on {config.data} {args.split}: "
              f"accuracy {result['accuracy']:.4f}  loss {result['loss']:.4f}  "
              f"({result['samples']} samples)")
        print(_layer_text(result["layers"]))
    return 0


def _run_plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .plot import _load_run, plot_run
    from .training import TrainConfig

    if args.data_dir is not None:  # read by event data only: refused as train refuses it
        config = TrainConfig.from_dict(_load_run(Path(args.source))["config"])
        if _refuse_unused("plot", config, {"data_dir": args.data_dir}):
            return 2
    for path in plot_run(args.source, out=args.out, sample=args.sample, data_dir=args.data_dir):
        print(path)
    return 0


# What may change in the plan of a checkpoint's network: the run it is planned for (the
# batch, the time grid, the lists' capacity), not the network.
PLAN_CHECKPOINT_OVERRIDES = ("batch_size", "num_steps", "dt", "duration", "max_spikes")


def _run_plan(args: argparse.Namespace) -> int:
    from .planning import plan
    from .training import TrainConfig, model_shapes

    if args.checkpoint:
        from .checkpoint import load_checkpoint, require_entries

        state = load_checkpoint(args.checkpoint)
        require_entries(state, args.checkpoint, ("config",), "plan its network")
        config, given = _config_from(args, TrainConfig.from_dict(state["config"]))
        # the checkpoint defines the network (--hidden planned another network under its
        # name) and a plan reads no training option (--lr was dropped without a word)
        refused = sorted(set(given) - set(PLAN_CHECKPOINT_OVERRIDES))
        if refused:
            print(f"{PROG} plan: error: --checkpoint plans the checkpoint's network; "
                  f"{_flags(refused)} cannot change it (only {_flags(PLAN_CHECKPOINT_OVERRIDES)}"
                  " can)", file=sys.stderr)
            return 2
    else:
        config, given = _config_from(args)
    if _refuse_unused("plan", config, given):
        return 2
    from .data.tasks import task_shape

    shape = task_shape(config)
    # planned from the layers' sizes and settings: no weights are allocated
    model = model_shapes(config, shape.num_inputs, shape.num_classes)
    print(f"network {shape.num_inputs}-{'-'.join(map(str, config.hidden))}-{shape.num_classes}"
          f", batch {config.batch_size}, T={shape.num_steps}, target {args.target}")
    report = plan(model, config.batch_size, shape.num_steps, target=args.target,
                  activity=args.activity, input_max_spikes=args.input_max_spikes,
                  pipelined=args.pipelined)
    print(report)
    if args.graph_report:
        print(report.graph_report())
    return 0 if report.fits else 1  # for scripts: 1, the network does not fit


def _run_bench(argv: Sequence[str]) -> int:
    from .bench import main as bench_main

    return bench_main(list(argv))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv: List[str] = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return _run_bench(argv[1:])
    from .backends.ipu import IPUUnavailableError
    from .overflow import SpikeOverflowError

    args = build_parser().parse_args(argv)
    try:
        return {"train": _run_train, "eval": _run_eval, "plot": _run_plot,
                "plan": _run_plan}[args.command](args)
    except SpikeOverflowError as exc:
        print(f"{PROG} {args.command}: error: {exc} (command line: raise --max-spikes, leave "
              "it out to fit the lists per call, or pass --overflow drop)", file=sys.stderr)
        return 2
    except (ValueError, OSError, OverflowError, ImportError, MemoryError,
            IPUUnavailableError) as exc:
        # a user's mistake (data, paths, options, sizes): one line, not a traceback
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
