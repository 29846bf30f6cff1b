"""Plots of spikes and training runs (matplotlib).

* :func:`raster`: a spike raster of one sample of a :class:`~snn_ipu.SparseSpikes` or
  of dense spikes ``[T, B, N]``, for notebooks.
* :func:`plot_run`: what ``snn-ipu plot`` writes: loss/accuracy curves and per-layer
  activity over the epochs of a run (from its metrics log or checkpoint), and a raster
  of one test sample through every layer (from the checkpoint).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ._paths import output_folder

__all__ = ["raster", "plot_run"]


def _pyplot():
    try:
        import matplotlib

        if os.environ.get("MPLBACKEND") is None and not os.environ.get("DISPLAY"):
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install matplotlib") from exc
    return plt


def raster(spikes, sample: int = 0, ax=None, title: Optional[str] = None, time_first=True,
           **scatter):
    """Draws the spikes of ``sample`` (time on x, neuron on y); returns the axes.

    :param spikes: SparseSpikes, or dense 0/1 ``[T, B, N]`` (``[B, T, N]`` with
        ``time_first=False``)
    :param sample: which sample of the batch
    :param ax: matplotlib axes to draw into (default: a new figure)
    """
    from ._numbers import flag

    time_first = flag("time_first", time_first)
    if hasattr(spikes, "ids") and hasattr(spikes, "counts"):
        if not time_first:
            raise ValueError("a SparseSpikes is always time-major; time_first=False is for "
                             "batch-first dense tensors")
        if not 0 <= sample < spikes.batch_size:
            raise ValueError(f"sample {sample} not in the batch of {spikes.batch_size}")
        counts = spikes.counts[:, sample, 0].long()
        ids = spikes.ids[:, sample]
        steps = torch.arange(spikes.num_steps).repeat_interleave(counts)
        listed = torch.arange(ids.shape[-1])[None, :] < counts[:, None]
        neurons = ids[listed]
        num_steps, num_neurons = spikes.num_steps, spikes.num_neurons
    elif isinstance(spikes, torch.Tensor) and spikes.dim() == 3:
        dense = spikes if time_first else spikes.transpose(0, 1)
        if not 0 <= sample < dense.shape[1]:
            raise ValueError(f"sample {sample} not in the batch of {dense.shape[1]}")
        steps, neurons = dense[:, sample].detach().nonzero(as_tuple=True)
        num_steps, num_neurons = dense.shape[0], dense.shape[2]
    else:
        raise TypeError("raster takes a SparseSpikes or dense spikes [T, B, N], got "
                        f"{type(spikes).__name__} {tuple(getattr(spikes, 'shape', ()))}")
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(6, 3))
    style = {"s": 4, "marker": "|", "color": "k", **scatter}
    ax.scatter(steps.numpy(), neurons.numpy(), **style)
    ax.set_xlim(-0.5, num_steps - 0.5)
    ax.set_ylim(-0.5, num_neurons - 0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("neuron")
    if title:
        ax.set_title(title)
    return ax


def _is_metrics_log(source: Path) -> bool:
    """Whether ``source`` is a metrics log: by its suffix (``NAME.metrics.jsonl``) or,
    for one that ``train --log`` wrote under another name (``run.log``), by its first
    byte: a log's lines are JSON objects, a checkpoint is a zip (``PK``). By the suffix
    alone such a log was read as a checkpoint and refused as "not a readable
    checkpoint"."""
    if source.suffix == ".jsonl":
        return True
    try:
        with open(source, "rb") as f:
            return f.read(256).lstrip().startswith(b"{")
    except OSError:  # missing or unreadable: load_checkpoint names the problem
        return False


def _load_run(source: Path) -> Dict[str, Any]:
    """{"epochs": [...], "checkpoint": path or None, "config": dict}."""
    from .checkpoint import load_checkpoint, require_entries
    from .training import read_metrics

    if _is_metrics_log(source):
        log = read_metrics(source)
        checkpoint = log["start"].get("checkpoint")
        if checkpoint and not Path(checkpoint).is_absolute():
            # a log written before paths were stored absolute: relative to a folder no
            # longer known, so taken where the default log sits, beside its checkpoint
            checkpoint = source.parent / Path(checkpoint).name
        elif checkpoint and not Path(checkpoint).exists() and \
                (source.parent / Path(checkpoint).name).is_file():
            # a run folder moved or copied elsewhere: its absolute path names the old
            # folder, the checkpoint sits beside its log (the raster was dropped, "not
            # there"); _raster_of_sample still refuses another run's
            checkpoint = source.parent / Path(checkpoint).name
        return {"epochs": log["epochs"], "config": log["start"]["config"],
                "checkpoint": Path(checkpoint) if checkpoint else None}
    state = load_checkpoint(source)
    require_entries(state, source, ("metrics", "config"), "plot its run")
    return {"epochs": state["metrics"], "config": state["config"], "checkpoint": source}


def plot_run(source: os.PathLike, out: Optional[os.PathLike] = None, sample: int = 0,
             data_dir: Optional[str] = None) -> List[Path]:
    """Writes the PNGs of a run (module docstring) into ``out`` (default: the source's
    folder); returns their paths."""
    source = Path(source)
    run = _load_run(source)
    epochs = run["epochs"]
    if not epochs:
        raise ValueError(f"{source}: no finished epoch to plot")
    out = source.parent if out is None else output_folder(out, "--out")
    stem = _run_name(source)
    plt = _pyplot()
    written = []

    x = [e["epoch"] for e in epochs]
    # a marker on every epoch: a line alone draws nothing for a one-epoch run (or an
    # epoch between NaNs), which left empty axes under a legend
    point = dict(marker="o", markersize=3)
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 3.5))
    loss_ax.plot(x, [e["loss"] for e in epochs], label="train", **point)
    loss_ax.plot(x, [e["test_loss"] for e in epochs], label="test", **point)
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    acc_ax.plot(x, [e["train_acc"] for e in epochs], label="train", **point)
    acc_ax.plot(x, [e["test_acc"] for e in epochs], label="test", **point)
    acc_ax.set_xlabel("epoch")
    acc_ax.set_ylabel("accuracy")
    acc_ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out / f"{stem}_curves.png", plt))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in epochs[0]["layers"]:
        ax.plot(x, [e["layers"][name]["activity"] for e in epochs], label=name, **point)
    ax.set_xlabel("epoch")
    ax.set_ylabel("spikes per neuron and step")
    ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out / f"{stem}_activity.png", plt))

    checkpoint = run["checkpoint"]
    if checkpoint is None:
        return written
    if not Path(checkpoint).is_file():
        warnings.warn(f"plot: no spike raster: the run's checkpoint {checkpoint} is not there",
                      stacklevel=2)
        return written
    raster = _raster_of_sample(Path(checkpoint), out / f"{stem}_raster.png", sample, data_dir,
                               plt, run["config"])
    return written if raster is None else written + [raster]


def _run_name(source: Path) -> str:
    """NAME of the PNGs: the checkpoint's name without its suffix, from the checkpoint
    (``lr0.01.pt``) or its log (``lr0.01.metrics.jsonl``). Not the name up to its first
    dot: runs named ``lr0.003`` and ``lr0.01`` would both write ``lr0_*.png``, the
    second run's plots replacing the first's."""
    log_suffix = ".metrics.jsonl"
    if source.name.endswith(log_suffix) and len(source.name) > len(log_suffix):
        return source.name[:-len(log_suffix)]
    return source.stem or source.name


def _save(fig, path: Path, plt) -> Path:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _raster_of_sample(checkpoint: Path, path: Path, sample: int, data_dir, plt,
                      run_config: Dict[str, Any]) -> Optional[Path]:
    import dataclasses

    from .checkpoint import load_checkpoint, require_entries
    from .data.tasks import load_task
    from .training import TrainConfig, build_model, load_weights, same_run

    state = load_checkpoint(checkpoint)
    require_entries(state, checkpoint, ("config",), "draw its spike raster")
    config = TrainConfig.from_dict(state["config"])
    # another run's checkpoint at that path (a later run saved there) would draw another
    # network; a longer run resumed from this one differs in its epochs alone
    if not same_run(config, TrainConfig.from_dict(run_config)):
        warnings.warn(f"plot: no spike raster: {checkpoint} holds another run than the log "
                      "(its config differs); plot that checkpoint or its own log for its "
                      "raster", stacklevel=3)
        return None
    if data_dir is not None:
        config = dataclasses.replace(config, data_dir=data_dir)
    task = load_task(config)
    if not 0 <= sample < len(task.test):
        raise ValueError(f"--sample {sample}: the test set has {len(task.test)} samples")
    model = build_model(config, task.num_inputs, task.num_classes)
    load_weights(model, state, checkpoint)
    x, y = task.collate([task.test[sample]])
    panels = [("input", x)]
    with torch.no_grad():
        h = x
        for layer in model:
            h = layer(h)
            panels.append((layer.name, h))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), sharex=True)
    for ax, (name, spikes) in zip(axes, panels):
        if isinstance(spikes, torch.Tensor):  # the readout's membrane [T, 1, C]
            ax.plot(spikes[:, 0].numpy())
            ax.set_ylabel("membrane")
            ax.set_title(f"{name} (label {int(y[0])})")
        else:
            raster(spikes, 0, ax=ax, title=name)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    return _save(fig, path, plt)
