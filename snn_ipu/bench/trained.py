"""Workloads from networks in training: a config with a ``train`` entry
(:data:`~snn_ipu.bench.configs.CONFIGS`) is trained for a few epochs by the project's
own trainer (:func:`snn_ipu.training.train`), then every backend times its training step
at the trained weights and biases, on the first B samples of the task's test set, at the
activity the network has there (no calibration).

The trained network is the benchmark's: ``in -> h -> h -> out`` LIF layers with the
benchmark's beta and threshold, a spiking output layer trained on the cross-entropy of
its spike counts (``readout="spikes"``, the benchmark's loss), the hidden layers with the
benchmark's sparse window. Training is deterministic for a seed; its result (weights,
the timed batch, the metrics) is kept in the run's output folder under a name that
hashes every training setting, so a second run with the same settings reuses it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from ..checkpoint import save_atomically
from .configs import BETA, SPARSE_WINDOW, THRESHOLD


def train_config(cfg: dict, seed: int, backend: str):
    """The :class:`~snn_ipu.training.TrainConfig` of a trained config at its T."""
    from ..training import TrainConfig

    sizes = cfg["sizes"]
    return TrainConfig(**cfg["train"], num_steps=cfg["T"], hidden=list(sizes[1:-1]),
                       readout="spikes", beta=BETA, threshold=THRESHOLD,
                       grad_window=SPARSE_WINDOW, backend=backend, seed=seed)


def cache_path(name: str, config, folder: Path) -> Path:
    """Where the trained network of ``config`` is kept: the name hashes every setting."""
    key = json.dumps(config.to_dict(), sort_keys=True)
    return folder / f"trained_{name}_{hashlib.sha256(key.encode()).hexdigest()[:12]}.pt"


def _require_batch(task, batch: int) -> None:
    if batch > len(task.test):
        raise ValueError(f"--batch {batch}: the task's test set has {len(task.test)} samples")


def _test_batch(task, batch: int):
    """The first ``batch`` test samples as a dense [T, B, in] 0/1 tensor and labels."""
    x, y = task.collate([task.test[i] for i in range(batch)])
    return x.to_dense().detach() if hasattr(x, "to_dense") else x, y


def train_network(name: str, cfg: dict, seed: int, backend: str, folder: Path,
                  log: Callable[[str], None] = print) -> dict:
    """Trains config ``name`` (or loads the run folder's copy): its weights, biases, the
    timed batch and what training measured."""
    from ..data.tasks import load_task
    from ..training import train

    config = train_config(cfg, seed, backend)
    path = cache_path(name, config, folder)
    saved = _read_copy(path, log, name) if path.is_file() else None
    if saved is not None:
        saved["training"]["cached"] = str(path)
        log(f"  [{name}] trained network from {path}")
        # the key is the training's settings: the timed batch B may differ from the one
        # saved with it
        if saved["x"].shape[1] > cfg["B"]:
            saved["x"], saved["y"] = saved["x"][:, :cfg["B"]], saved["y"][:cfg["B"]]
        elif saved["x"].shape[1] < cfg["B"]:
            task = load_task(config)
            _require_batch(task, cfg["B"])
            x, saved["y"] = _test_batch(task, cfg["B"])
            saved["x"] = x.bool()
        return saved
    task = load_task(config)
    if (task.num_inputs, task.num_classes) != (cfg["sizes"][0], cfg["sizes"][-1]):
        raise ValueError(f"{name}: the task has {task.num_inputs} inputs and "
                         f"{task.num_classes} classes, the config {cfg['sizes']}")
    _require_batch(task, cfg["B"])  # before training, not after
    t0 = time.perf_counter()
    metrics = train(config, progress=False, task=task, log=lambda m: log(f"  [{name}] {m}"))
    model = metrics["model"]
    x, y = _test_batch(task, cfg["B"])
    saved = {
        "weights": [layer.weight.detach().clone() for layer in model],
        "biases": [layer.bias.detach().clone() for layer in model],
        "x": x.bool(), "y": y,
        "training": {"config": config.to_dict(), "task": task.description,
                     "seconds": time.perf_counter() - t0,
                     **{k: metrics[k] for k in ("epoch", "loss", "train_acc", "test_acc")},
                     "layers": metrics["layers"], "cached": None},
    }
    # through a temporary file and a rename: a bench killed mid-write (a plain torch.save
    # to the path) left a truncated copy that every later run of the config failed to
    # read ("OSError: [Errno 22] Invalid argument") until it was found and deleted
    save_atomically(path, saved)
    return saved


def _read_copy(path: Path, log: Callable[[str], None], name: str) -> Optional[dict]:
    """The run folder's copy at ``path``, or None (trained again) where it cannot be read:
    a copy cut short by a kill mid-write (before writes were atomic) or damaged."""
    try:
        saved = torch.load(path, weights_only=True)
        if isinstance(saved, dict) and isinstance(saved.get("training"), dict) and all(
                key in saved for key in ("weights", "biases", "x", "y")):
            return saved
        problem = "not a trained network's copy"
    except Exception as exc:  # noqa: BLE001 - a cut zip or pickle raises anything
        problem = f"{type(exc).__name__}: {exc}"
    log(f"  [{name}] {path} is unreadable ({problem}); training it again")
    return None


def trained_problem(name: str, cfg: dict, seed: int, backend: str, folder: Path,
                    log: Callable[[str], None] = print) -> dict:
    """The benchmark's problem (as :func:`~snn_ipu.bench.workload.make_problem` builds
    one) of a trained config: its trained weights (gains 1) and biases, and its batch."""
    net = train_network(name, cfg, seed, backend, folder, log)
    return {"sizes": list(cfg["sizes"]), "T": cfg["T"], "B": cfg["B"],
            "x": net["x"].float(), "y": net["y"], "w0": net["weights"],
            "gains": [1.0] * len(net["weights"]), "biases": net["biases"], "target": None,
            "seed": seed, "training": net["training"]}


def is_trained(cfg: Optional[dict]) -> bool:
    return bool(cfg and cfg.get("train"))
