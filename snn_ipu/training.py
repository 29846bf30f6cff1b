"""The training loop behind ``snn-ipu train``: model from a config, epochs over a
:class:`~snn_ipu.data.tasks.Task`, metrics, checkpoints, resume, several processes.

The network is ``inputs -> hidden layers (LIF or synaptic, optionally recurrent) ->
readout``; the readout is a :class:`~snn_ipu.ReadoutLayer` trained on its membrane
(``readout="membrane"``) or a spiking :class:`~snn_ipu.LIFLayer` trained on its spike
counts (``readout="spikes"``). ``grad_window`` applies to the hidden layers; the
readout keeps exact gradients (a windowed spiking output layer stops learning).

Reproducibility: everything random is seeded by ``seed`` (weights through torch's
global generator; the data order of epoch ``e`` is ``randperm`` of a generator seeded
with ``(seed, e)``), so a run resumed from the checkpoint of epoch ``e`` continues
with the very batches, weights and optimizer state of the uninterrupted run: its final
weights are bitwise equal.

Several processes (``torchrun --nproc_per_node N -m snn_ipu train ...``): every
process builds the same model, takes a contiguous share of each global batch of
``batch_size`` samples, and the gradients are summed over the processes (gloo)
after each process scales its mean loss by its share of the batch: the update is the
one a single process computes on the whole batch (up to float rounding).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from . import losses, regularizers
from ._numbers import MAX_SEED, flag, generator_seed
from .checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state

__all__ = ["TrainConfig", "build_model", "model_shapes", "train", "evaluate", "epoch_order",
           "metrics_path", "Distributed", "MAX_SEED", "check_seed", "load_weights"]

TIME_REDUCTIONS = ("max", "mean", "sum", "last", "per_step")


@dataclass
class TrainConfig:
    """Everything that defines a training run (saved in every checkpoint)."""

    data: str = "digits"
    data_dir: Optional[str] = None
    num_steps: Optional[int] = None  # None: the dataset's default
    dt: Optional[float] = None
    duration: Optional[float] = None
    outside: str = "error"
    tonic_pool: Optional[List[int]] = None
    merge_polarity: bool = False
    randman_classes: int = 10
    randman_inputs: int = 100
    randman_samples_per_class: int = 150
    randman_dim: int = 1
    randman_alpha: float = 2.0
    hidden: List[int] = field(default_factory=lambda: [128, 128])
    neuron: str = "lif"
    recurrent: bool = False
    readout: str = "membrane"
    time_reduction: str = "per_step"
    beta: float = 0.9
    alpha: float = 0.8
    threshold: float = 1.0
    grad_window: Optional[float] = None
    max_spikes: Optional[int] = None
    overflow: str = "error"
    backend: str = "auto"
    weight_scale: float = 3.0
    epochs: int = 60
    batch_size: int = 64
    lr: float = 3e-3
    lr_schedule: str = "cosine"
    seed: int = 0
    reg_l1: float = 0.0
    reg_lower: Optional[List[float]] = None  # [min rate, strength]
    reg_upper: Optional[List[float]] = None  # [max rate, strength]
    augment_jitter: Optional[int] = None  # None: the dataset's default
    augment_drop: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> TrainConfig:
        if not isinstance(values, dict):
            raise ValueError(f"a config must be a dict of settings, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config entries {unknown}")
        return cls(**values)


# -- model ---------------------------------------------------------------------------------

def _layer_specs(config: TrainConfig, num_inputs: int, num_classes: int) -> List[tuple]:
    """``(layer class, in, out, keyword arguments)`` of each layer of the network: one
    description for :func:`build_model` and :func:`model_shapes`."""
    from .layers import LIFLayer, ReadoutLayer, SynapticLayer

    if config.neuron not in ("lif", "synaptic"):
        raise ValueError(f"neuron must be 'lif' or 'synaptic', got {config.neuron!r}")
    common = dict(beta=config.beta, threshold=config.threshold, backend=config.backend,
                  max_spikes=config.max_spikes, overflow=config.overflow)
    specs = []
    sizes = [num_inputs, *config.hidden]
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        kw = dict(common, grad_window=config.grad_window, recurrent=config.recurrent,
                  name=f"hidden{i}")
        if config.neuron == "synaptic":
            specs.append((SynapticLayer, n_in, n_out, dict(kw, alpha=config.alpha)))
        else:
            specs.append((LIFLayer, n_in, n_out, kw))
    if config.readout == "membrane":
        specs.append((ReadoutLayer, sizes[-1], num_classes,
                      dict(beta=config.beta, backend=config.backend, name="readout")))
    elif config.readout == "spikes":
        # exact gradients: output neurons far below threshold would get none in a window
        specs.append((LIFLayer, sizes[-1], num_classes, dict(common, name="output")))
    else:
        raise ValueError(f"readout must be 'membrane' or 'spikes', got {config.readout!r}")
    return specs


def build_model(config: TrainConfig, num_inputs: int, num_classes: int) -> nn.Sequential:
    """inputs -> hidden layers -> readout, as ``config`` says.

    Weights are drawn from N(0, (weight_scale / sqrt(fan_in))^2): torch's default
    (uniform, +-1/sqrt(fan_in)) leaves the hidden layers silent on sparse input (one
    spike per input neuron per sample), which starves the next layer.
    """
    model = nn.Sequential(*(cls(n_in, n_out, **kw)
                            for cls, n_in, n_out, kw in _layer_specs(config, num_inputs,
                                                                     num_classes)))
    with torch.no_grad():
        for layer in model:
            nn.init.normal_(layer.weight, 0.0, config.weight_scale / math.sqrt(layer.in_features))
            if getattr(layer, "rec_weight", None) is not None:
                # recurrent input is dense in time; keep it weak at the start
                nn.init.normal_(layer.rec_weight, 0.0, 0.5 / math.sqrt(layer.out_features))
            if layer.bias is not None:
                layer.bias.zero_()
    return model


def model_shapes(config: TrainConfig, num_inputs: int, num_classes: int) -> list:
    """The layers of :func:`build_model` as the planner sees them (sizes, neuron model,
    recurrence, capacity; float32 weights), without allocating any weights: what
    ``snn-ipu plan`` plans (``snn_ipu.plan`` takes the list)."""
    from .backends.work_split import model_code
    from .planning import _LayerShape, _lists_every_neuron

    shapes = []
    for cls, n_in, n_out, kw in _layer_specs(config, num_inputs, num_classes):
        code = model_code(cls.neuron_model)
        window, max_spikes = kw.get("grad_window"), kw.get("max_spikes")
        shapes.append(_LayerShape(
            kw["name"], n_in, n_out, code, bool(kw.get("recurrent", False)), max_spikes, 4,
            grad_window=window,
            lists_every_neuron=_lists_every_neuron(code, window, max_spikes)))
    return shapes


def _spiking(model: nn.Sequential) -> List[nn.Module]:
    return [m for m in model if hasattr(m, "threshold")]


def _forward(model: nn.Sequential, x) -> List[Any]:
    """Every layer's output (the hidden spikes feed the regularisers and the rasters)."""
    outputs = []
    for layer in model:
        x = layer(x)
        outputs.append(x)
    return outputs


def accuracy_over_time(config: TrainConfig) -> str:
    """How a membrane readout's accuracy reduces it over time: the loss's reduction,
    the mean for the per-step loss."""
    return "mean" if config.time_reduction == "per_step" else config.time_reduction


def _objective(config: TrainConfig, out, labels: torch.Tensor):
    """(mean loss over the batch, correct predictions)."""
    if config.readout == "membrane":
        loss = losses.ce_membrane_loss(out, labels, config.time_reduction)
        acc = losses.accuracy(out, labels, time_reduction=accuracy_over_time(config))
    else:
        loss = losses.ce_count_loss(out, labels)
        acc = losses.accuracy(out, labels)
    return loss, round(acc * len(labels))


def _regularisation(config: TrainConfig, hidden: Sequence[Any]):
    """(terms averaged over the batch, terms summed over it)."""
    mean_terms, sum_terms = 0.0, 0.0
    for spikes in hidden:
        if config.reg_lower:
            rate, strength = config.reg_lower
            mean_terms = mean_terms + strength * regularizers.lower_rate_penalty(spikes, rate)
        if config.reg_upper:
            rate, strength = config.reg_upper
            mean_terms = mean_terms + strength * regularizers.upper_rate_penalty(spikes, rate)
        if config.reg_l1:
            sum_terms = sum_terms + regularizers.l1_rate_sparsity(spikes, config.reg_l1)
    return mean_terms, sum_terms


# -- data order and processes ------------------------------------------------------------

def check_seed(seed) -> int:
    """A seed every generator of a run takes: a whole number in [0, MAX_SEED] (the
    seeds derived from it wrap modulo 2**64, :func:`snn_ipu._numbers.generator_seed`)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
    return seed


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The training samples' order in ``epoch``: the same on every process and on resume."""
    check_seed(seed)
    generator = torch.Generator().manual_seed(generator_seed(seed * 1_000_003 + epoch))
    return torch.randperm(num_samples, generator=generator)


class Distributed:
    """This process's place among ``torchrun``'s processes (one process without it)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.active = self.world > 1
        self._owns_group = False
        if self.active:
            import torch.distributed as dist

            if not dist.is_initialized():
                # torch.optim imports torch._dynamo on first use; imported after the
                # group starts (torch 2.13), it keeps ten references to the group that
                # destroy_process_group cannot drop, and gloo's threads outlive it
                try:
                    import torch._dynamo  # noqa: F401
                except ImportError:
                    pass
                dist.init_process_group("gloo")
                self._owns_group = True
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
            self._share_cores()

    def close(self) -> None:
        """Ends the process group this object started (one the caller started is the
        caller's), joining gloo's threads. Left to the interpreter's exit, a thread still
        releasing the last collective's tensors needed the GIL while the interpreter was
        finalizing, and the process died in std::terminate (SIGABRT) in ~1 run in 20."""
        if self._owns_group:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()
            self._owns_group = False

    def _share_cores(self) -> None:
        """One process per core share: a thread team per process on shared cores waits
        at every join for threads the other processes hold."""
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        threads = max(1, (os.cpu_count() or 1) // local)
        torch.set_num_threads(threads)
        from .backends import emulator

        emulator.set_num_threads(threads)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, indices: torch.Tensor) -> torch.Tensor:
        """This process's contiguous share of a global batch."""
        if not self.active:
            return indices
        bounds = np.linspace(0, len(indices), self.world + 1).round().astype(int)
        return indices[bounds[self.rank]:bounds[self.rank + 1]]

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.active:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def sum_gradients(self, parameters: Sequence[nn.Parameter]) -> None:
        """Sums the gradients over the processes (one flat buffer, one all-reduce)."""
        if not self.active:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        # summed on the host: gloo reduces CPU tensors on every build of torch
        flat = self.sum_(torch.cat([g.reshape(-1).float().cpu() for g in grads]))
        offset = 0
        for p, g in zip(parameters, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(p).to(p.device, p.dtype)
            offset += g.numel()

    def broadcast_(self, module: nn.Module) -> None:
        if self.active:
            import torch.distributed as dist

            for t in module.state_dict().values():
                dist.broadcast(t, 0)


# -- metrics ---------------------------------------------------------------------------------

class _LayerTally:
    """Per-layer activity and list capacity over the batches of an epoch."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        self.layers = list(layers)
        n = len(self.layers)
        # per layer: spikes, eligible, neuron-steps, max needed capacity, capacity, drops
        self.totals = torch.zeros(n, 6, dtype=torch.float64)

    def add(self, x) -> None:
        """After a call on the batch ``x`` (a SparseSpikes [T, B, K])."""
        for i, layer in enumerate(self.layers):
            s = layer.stats
            if not s or "activity" not in s:
                continue
            steps = x.num_steps * x.batch_size * layer.out_features
            row = self.totals[i]
            row[0] += s["spikes"]
            row[1] += s.get("eligible_activity", 0.0) * steps
            row[2] += steps
            row[3] = max(float(row[3]), s.get("needed_capacity", 0))
            row[4] = max(float(row[4]), s.get("capacity", 0))
            row[5] += s.get("spikes_dropped", 0)

    def reduce(self, dist: Distributed) -> Dict[str, Dict[str, float]]:
        totals = self.totals.clone()
        sums = dist.sum_(totals[:, [0, 1, 2, 5]].contiguous())
        peaks = totals[:, [3, 4]].contiguous()
        if dist.active:
            import torch.distributed as tdist

            tdist.all_reduce(peaks, op=tdist.ReduceOp.MAX)
        out = {}
        for i, layer in enumerate(self.layers):
            spikes, eligible, steps, dropped = sums[i].tolist()
            needed, capacity = peaks[i].tolist()
            out[layer.name] = {
                "activity": spikes / steps if steps else 0.0,
                "eligible_activity": eligible / steps if steps else 0.0,
                "needed_capacity": int(needed),
                "capacity": int(capacity),
                "max_spikes": layer.max_spikes,
                "spikes_dropped": int(dropped),
            }
        return out


def _layer_text(layers: Dict[str, Dict[str, float]]) -> str:
    parts = []
    for name, s in layers.items():
        text = f"{name} act {s['activity']:.3f}"
        if s["max_spikes"] is not None:
            text += f" list {s['needed_capacity']}/{s['max_spikes']}"
        else:
            text += f" list<={s['needed_capacity']}"
        if s["spikes_dropped"]:
            text += f" dropped {s['spikes_dropped']}"
        parts.append(text)
    return " | ".join(parts)


# -- one pass --------------------------------------------------------------------------------

def _batches(indices: torch.Tensor, batch_size: int) -> List[torch.Tensor]:
    return [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]


def _collated(task, dataset, index_lists, workers: int):
    """Batches of ``dataset`` at ``index_lists``, collated (in worker processes when
    ``workers`` > 0; the order is kept either way)."""
    if workers > 0:
        loader = torch.utils.data.DataLoader(
            dataset, batch_sampler=[ix.tolist() for ix in index_lists], num_workers=workers,
            collate_fn=task.collate)
        yield from loader
        return
    for ix in index_lists:
        yield task.collate([dataset[int(i)] for i in ix])


def training_device(device: Union[str, torch.device, None], backend: str,
                    dist: Optional[Distributed] = None) -> torch.device:
    """Where a run trains: ``device`` (``cpu``, ``cuda``, ``cuda:N``; None: the CPU) checked
    against the layers' ``backend`` before any work. Under ``torchrun`` a plain ``cuda``
    means each process's own GPU, ``cuda:LOCAL_RANK``."""
    if backend == "ipu" and device is not None:
        raise ValueError("--backend ipu runs on the IPU through PopTorch: leave --device out")
    if device is None:
        device = "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {device!r} (an IPU "
                         "trains with --backend ipu, which places the model itself)")
    if dev.type == "cpu":
        if backend == "triton" and not _triton_interpreted():
            raise ValueError("--backend triton runs on NVIDIA GPUs: add --device cuda (on a "
                             "CPU, --backend emulator is the sparse path)")
        return dev
    if backend == "emulator":
        raise ValueError("--backend emulator runs on the CPU; with --device cuda use --backend "
                         "auto (triton where Triton is installed), triton or reference")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {device}: torch.cuda.is_available() is False (torch "
                         f"{torch.__version__}); it needs an NVIDIA GPU and a CUDA build of "
                         "torch")
    if dev.index is None:
        local = int(os.environ.get("LOCAL_RANK", "0")) if dist is not None and dist.active else 0
        dev = torch.device("cuda", local % torch.cuda.device_count())
    if dev.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} "
                         f"CUDA device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return dev


def _triton_interpreted() -> bool:
    """Triton's interpreter runs the triton backend on CPU tensors (for tests)."""
    from .backends.triton import _interpreter_on

    return _interpreter_on()


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def evaluate(model: nn.Sequential, task, config: TrainConfig, dist: Optional[Distributed] = None,
             workers: int = 0, dataset=None) -> Dict[str, Any]:
    """Accuracy, mean loss and per-layer activity of ``model`` on ``dataset`` (default: the
    task's test set), without gradients, on the model's device; shared among the
    processes."""
    own = dist is None
    dist = dist or Distributed()
    device = _model_device(model)
    dataset = task.test if dataset is None else dataset
    tally = _LayerTally(_spiking(model))
    sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, samples
    shares = [dist.share(ix) for ix in _batches(torch.arange(len(dataset)), config.batch_size)]
    shares = [ix for ix in shares if len(ix)]
    with torch.no_grad():
        for x, y in _collated(task, dataset, shares, workers):
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss, correct = _objective(config, out, y)
            sums += torch.tensor([float(loss) * len(y), correct, len(y)], dtype=torch.float64)
            tally.add(x)
    sums = dist.sum_(sums)
    result = {"loss": float(sums[0] / sums[2]), "accuracy": float(sums[1] / sums[2]),
              "samples": int(sums[2]), "layers": tally.reduce(dist)}
    if own:
        dist.close()
    return result


def metrics_path(checkpoint: os.PathLike) -> Path:
    """The metrics log (JSON lines) next to a checkpoint: ``run/model.pt`` ->
    ``run/model.metrics.jsonl``."""
    path = Path(checkpoint)
    return path.with_name(path.stem + ".metrics.jsonl")


def _lr_lambda(config: TrainConfig, steps_per_epoch: int) -> Callable[[int], float]:
    total = max(1, config.epochs * steps_per_epoch)
    if config.lr_schedule == "constant":
        return lambda step: 1.0
    if config.lr_schedule == "cosine":
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    raise ValueError(f"lr_schedule must be 'cosine' or 'constant', got {config.lr_schedule!r}")


def train(
    config: TrainConfig,
    save: Optional[os.PathLike] = None,
    resume: Optional[os.PathLike] = None,
    log_path: Optional[os.PathLike] = None,
    progress: Optional[bool] = None,
    workers: int = 0,
    log: Callable[[str], None] = print,
    task=None,
    download: bool = False,
    device: Union[str, torch.device, None] = None,
    overwrite: bool = False,
) -> Dict[str, Any]:
    """Trains as ``config`` says; returns the last epoch's metrics (with the model).

    :param save: checkpoint path, written after every epoch (atomically)
    :param resume: a checkpoint to continue from (its config must match ``config``)
    :param log_path: metrics log, JSON lines (default: next to ``save``)
    :param progress: a tqdm bar per epoch (None: when stderr is a terminal)
    :param workers: DataLoader worker processes for reading and binning
    :param task: the loaded :class:`~snn_ipu.data.tasks.Task` (default: from ``config``)
    :param download: let a tonic dataset download its missing files
    :param device: where the model trains (:func:`training_device`; default: the CPU);
        checkpoints hold CPU tensors whatever it is
    :param overwrite: let the run replace files that exist at ``save`` and ``log_path``
        (without it, only a checkpoint resumed in place and its log are replaced)

    Before any work: the seed, the checkpoint to resume (its entries, its config, an
    ``epochs`` beyond the epochs it holds), the paths written (files, not folders; no
    two the same file, but ``resume`` may be ``save``); while training, the checkpoint
    and the log are locked against a second run.
    """
    from ._paths import FileLocks, distinct_files, writable_file

    # everything a user can get wrong is checked before any work
    if progress is not None:
        flag("progress", progress)
    check_seed(config.seed)
    training_device(device, config.backend)  # before any work; again below per process
    state = _resume_state(resume, config) if resume is not None else None
    if save is not None:
        writable_file(save, "--save")
        if log_path is None:
            log_path = metrics_path(save)
    if log_path is not None:
        writable_file(log_path, "--log")
    distinct_files([("--resume", resume), ("--save", save), ("--log", log_path)],
                   allowed=[("--resume", "--save")])  # resuming in place is fine
    if not overwrite:
        check_not_replacing(save, log_path, resume)
    dist = Distributed()
    # one writer per checkpoint and log: a second run is refused, not interleaved
    with FileLocks([save, log_path] if dist.main else []):
        result = _train(config, save, resume, log_path, progress, workers, log, task, state,
                        dist, download, training_device(device, config.backend, dist))
    # not on an error: a failed process does not wait at a barrier for the others
    dist.close()
    return result


def check_not_replacing(save: Optional[os.PathLike], log_path: Optional[os.PathLike],
                        resume: Optional[os.PathLike]) -> None:
    """Refuses a run that would replace a checkpoint or a metrics log of another run: a
    file at ``save`` or ``log_path``, but for the checkpoint a resumed run continues in
    place, and the log of the resumed run (rewritten from the checkpoint's history)."""
    from ._paths import refuse_replacing, same_file

    advice = ("continue that run with --resume, or give another path, or --overwrite "
              "(overwrite=True) to replace it")
    in_place = save is not None and resume is not None and same_file(save, resume)
    own_log = resume is not None and log_path is not None and _log_of(log_path, resume)
    refuse_replacing([("--save", None if in_place else save),
                      ("--log", None if own_log else log_path)], advice)


def _log_of(log_path: os.PathLike, checkpoint: os.PathLike) -> bool:
    """Whether the metrics log at ``log_path`` is the run's of ``checkpoint``: the log
    beside it, or one whose ``start`` record names it (a run's ``--log``)."""
    from ._paths import same_file

    if same_file(log_path, metrics_path(checkpoint)):
        return True
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            start = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    named = start.get("checkpoint") if isinstance(start, dict) else None
    return isinstance(named, str) and same_file(named, checkpoint)


# The settings a resumed run may change: every other one makes another run.
RESUME_OVERRIDES = ("epochs", "data_dir", "backend")


def same_run(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two configs are one run's, but for what a resume may change."""
    return dataclasses.replace(a, **{k: getattr(b, k) for k in RESUME_OVERRIDES}) == b


def _resume_state(resume: os.PathLike, config: TrainConfig) -> Dict[str, Any]:
    """The checkpoint to resume, checked against ``config``: its config, its entries,
    and an ``epochs`` that leaves something to train."""
    from .checkpoint import require_entries

    state = load_checkpoint(resume)
    require_entries(state, resume, ("config",), "resume training")
    saved = TrainConfig.from_dict(state["config"])
    if not same_run(saved, config):
        raise ValueError(f"{resume} was trained with another config; resume it with its "
                         "own (snn-ipu train --resume takes the checkpoint's)")
    saved_optimizer = state.get("optimizer")
    if isinstance(saved_optimizer, dict) and "ipu_state" in saved_optimizer:
        # PopTorch's loop writes the device's Adam state and no scheduler, metrics or
        # random state: torch's Adam cannot take it, nor this loop continue the run
        raise ValueError(
            f"{resume}: its optimizer state is a PopTorch optimizer's (a run trained with "
            "--backend ipu, by PopTorch's loop): resume it on the backend it trained on")
    require_entries(state, resume, ("model", "optimizer", "scheduler", "epoch", "metrics",
                                    "rng"), "resume training")
    done = state["epoch"]
    if config.epochs <= done:
        raise ValueError(f"{resume} has already trained {done} epochs; --epochs "
                         f"{config.epochs} leaves nothing to train (nothing was trained or "
                         f"written): give --epochs above {done} to continue")
    return state


def load_weights(model: nn.Module, state: Dict[str, Any], path: os.PathLike) -> None:
    """Loads a checkpoint's weights into ``model``, with a ValueError naming both sizes
    when they were trained for another network or dataset."""
    from .checkpoint import require_entries

    require_entries(state, path, ("model",), "load its weights")
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:
        lines = [" ".join(line.split()) for line in str(exc).strip().splitlines()]
        raise ValueError(f"{path}: its weights do not fit this network (another network or "
                         f"a dataset of other sizes; --data and --data-dir must give data "
                         f"of the sizes it was trained on): {' '.join(lines[:3])}") from None


def _train(config: TrainConfig, save, resume, log_path, progress, workers, log, task, state,
           dist: Distributed, download: bool, device: torch.device) -> Dict[str, Any]:
    from .data.tasks import load_task

    torch.manual_seed(config.seed)
    np.random.seed(config.seed % 2**32)
    random.seed(config.seed)
    task = load_task(config, download=download) if task is None else task
    model = build_model(config, task.num_inputs, task.num_classes)
    dist.broadcast_(model)
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.lr)
    steps_per_epoch = math.ceil(len(task.train) / config.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(config, steps_per_epoch))
    history: List[Dict[str, Any]] = []
    first_epoch = 1
    if state is not None:
        saved = TrainConfig.from_dict(state["config"])
        load_weights(model, state, resume)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if saved.epochs != config.epochs:  # a longer or shorter run: the schedule follows
            lr_lambda = _lr_lambda(config, steps_per_epoch)
            scheduler.lr_lambdas[0] = lr_lambda
            # the optimizer's state holds the old schedule's rate for the next step (0
            # after a finished cosine run), which the first resumed step would take:
            # from that step on, the rate is the new schedule's
            for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
                group["lr"] = base * lr_lambda(scheduler.last_epoch)
        set_rng_state(state["rng"])
        history = list(state["metrics"])
        first_epoch = state["epoch"] + 1
    logger = _MetricsLog(log_path if dist.main else None, config, save, history, dist.world)

    augment = _augment(config, task)
    spiking = _spiking(model)
    if dist.main:
        log(f"data: {task.description}")
        log(f"network: {task.num_inputs}-{'-'.join(map(str, config.hidden))}-"
            f"{task.num_classes} ({config.neuron}{', recurrent' if config.recurrent else ''}, "
            f"{config.readout} readout, grad_window={config.grad_window}, "
            f"backend={config.backend}{'' if device.type == 'cpu' else f', {device}'})"
            f"{f', {dist.world} processes' if dist.active else ''}")
        if first_epoch > 1:
            log(f"resumed from {resume} after epoch {first_epoch - 1}")
    # a resumed run's clock goes on from the checkpoint's last epoch: the log's seconds
    # keep counting the run's training time, not this process's
    start = time.perf_counter() - (history[-1].get("seconds", 0.0) if history else 0.0)
    metrics: Dict[str, Any] = history[-1] if history else {}
    for epoch in range(first_epoch, config.epochs + 1):
        model.train()
        tally = _LayerTally(spiking)
        sums = torch.zeros(3, dtype=torch.float64)
        global_batches = _batches(epoch_order(len(task.train), config.seed, epoch),
                                  config.batch_size)
        shares = [dist.share(ix) for ix in global_batches]
        bar = _progress(len(global_batches), epoch, config.epochs,
                        progress if dist.main else False)
        data = _collated(task, task.train, [s for s in shares if len(s)], workers)
        # the rate the epoch's first step takes (after its last one, the scheduler has
        # moved on to the next epoch's)
        lr = optimizer.param_groups[0]["lr"]
        for whole, share in zip(global_batches, shares):
            optimizer.zero_grad(set_to_none=False)
            for p in params:  # zero_grad keeps the buffers: every process sums them
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            if len(share):
                x, y = next(data)
                x = augment(x, share.tolist(), config.seed, epoch).to(device)
                y = y.to(device)
                outputs = _forward(model, x)
                loss, correct = _objective(config, outputs[-1], y)
                mean_reg, sum_reg = _regularisation(config, outputs[:-1])
                # this process's share of the batch mean (sums stay sums)
                total = (loss + mean_reg) * (len(share) / len(whole)) + sum_reg
                total.backward()
                sums += torch.tensor([float(loss.detach()) * len(y), correct, len(y)],
                                     dtype=torch.float64)
                tally.add(x)
            dist.sum_gradients(params)
            optimizer.step()
            scheduler.step()
            if bar is not None:
                bar.set_postfix(loss=f"{float(loss.detach()) if len(share) else 0:.4f}",
                                refresh=False)
                bar.update()
        if bar is not None:
            bar.close()
        sums = dist.sum_(sums)
        test = evaluate(model, task, config, dist, workers)
        metrics = {
            "epoch": epoch,
            "loss": float(sums[0] / sums[2]),
            "train_acc": float(sums[1] / sums[2]),
            "test_loss": test["loss"],
            "test_acc": test["accuracy"],
            "lr": lr,
            "layers": tally.reduce(dist),
            "seconds": time.perf_counter() - start,
        }
        history.append(metrics)
        if dist.main:
            log(f"epoch {epoch:3d}/{config.epochs}  loss {metrics['loss']:.4f}  train acc "
                f"{metrics['train_acc']:.3f}  test acc {metrics['test_acc']:.3f}  "
                f"{_layer_text(metrics['layers'])}  ({metrics['seconds']:.1f}s)")
            if save is not None:
                save_checkpoint(save, {
                    "config": config.to_dict(), "model": _on_cpu(model.state_dict()),
                    "optimizer": _on_cpu(optimizer.state_dict()),
                    "scheduler": scheduler.state_dict(),
                    "epoch": epoch, "metrics": history, "rng": rng_state(),
                    "data_order": {"seed": config.seed, "rule": "randperm(seed*1000003+epoch)"},
                    "world_size": dist.world,
                })
            logger.epoch(metrics)
    if dist.main and metrics:
        chance = 1.0 / task.num_classes
        log(f"final test accuracy {metrics['test_acc']:.4f} (chance {chance:.3f})")
        if save is not None:
            log(f"checkpoint: {save}")
        if log_path is not None:
            log(f"metrics log: {log_path}")
    return {**metrics, "model": model, "history": history}


def _on_cpu(state: Any) -> Any:
    """A state dict with its tensors on the CPU: a checkpoint loads on any machine."""
    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        out = copy.copy(state)  # keeps a state_dict's _metadata
        for k, v in state.items():
            out[k] = _on_cpu(v)
        return out
    if isinstance(state, (list, tuple)):
        return type(state)(_on_cpu(v) for v in state)
    return state


def augmentation(config: TrainConfig) -> Tuple[int, float]:
    """(jitter, deletion probability) of the training batches: the config's, or where it
    leaves them None, the dataset's defaults."""
    from .data.tasks import default_augmentation

    jitter, drop = default_augmentation(config.data)
    return (jitter if config.augment_jitter is None else config.augment_jitter,
            drop if config.augment_drop is None else config.augment_drop)


def _augment(config: TrainConfig, task):
    from .data.augment import SpikeAugment

    return SpikeAugment(*augmentation(config))


def _progress(total: int, epoch: int, epochs: int, enabled: Optional[bool]):
    if enabled is False:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    # disable=None: shown only when stderr is a terminal (CI logs stay readable)
    return tqdm(total=total, desc=f"epoch {epoch}/{epochs}", unit="batch", leave=False,
                disable=None if enabled is None else not enabled, file=sys.stderr)


class _MetricsLog:
    """JSON lines: a ``start`` record (the config), one ``epoch`` record per epoch. On
    resume the file is rewritten from the checkpoint's history, so epochs that ran
    after the checkpoint (in a run that was then killed) do not appear twice."""

    def __init__(self, path, config: TrainConfig, checkpoint, history, world: int) -> None:
        self.path = None if path is None else Path(path)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w") as f:
            f.write(json.dumps({"event": "start", "config": config.to_dict(),
                                "checkpoint": None if checkpoint is None
                                else os.path.abspath(checkpoint),
                                "world_size": world}) + "\n")
            for record in history:
                f.write(json.dumps({"event": "epoch", **record}) + "\n")

    def epoch(self, metrics: Dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": "epoch", **metrics}) + "\n")


def read_metrics(path: os.PathLike) -> Dict[str, Any]:
    """A metrics log's ``start`` record and its ``epoch`` records."""
    start, epochs = None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: a record must be a JSON object, got "
                                 f"{type(record).__name__}")
            problem = _record_problem(record)
            if problem:
                raise ValueError(f"{path}:{number}: {problem}; not an snn-ipu metrics log "
                                 "record")
            if record.get("event") == "start":
                start = record
            elif record.get("event") == "epoch":
                epochs.append(record)
    if start is None:
        raise ValueError(f"{path}: no 'start' record; not an snn-ipu metrics log")
    if len({tuple(sorted(e["layers"])) for e in epochs}) > 1:
        raise ValueError(f"{path}: the epochs name different layers (two runs wrote this log)")
    if len({e["epoch"] for e in epochs}) != len(epochs):
        raise ValueError(f"{path}: epochs {[e['epoch'] for e in epochs]} repeat (two runs "
                         "wrote this log)")
    return {"start": start, "epochs": epochs}


_EPOCH_NUMBERS = ("loss", "train_acc", "test_loss", "test_acc")


def _record_problem(record: Dict[str, Any]) -> Optional[str]:
    """What a metrics-log record lacks for ``plot`` (None: nothing)."""
    event = record.get("event")
    if event == "start":
        if not isinstance(record.get("config"), dict):
            return "the 'start' record has no 'config' object"
        if not isinstance(record.get("checkpoint"), (str, type(None))):
            return "the 'start' record's 'checkpoint' is not a path"
        return None
    if event != "epoch":
        return None  # other events are for other readers
    epoch = record.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        return f"an 'epoch' record needs an integer 'epoch', got {epoch!r}"
    for name in _EPOCH_NUMBERS:
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"epoch {epoch}: {name!r} must be a number, got {value!r}"
    layers = record.get("layers")
    if not isinstance(layers, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("activity"), (int, float))
            for v in layers.values()):
        return f"epoch {epoch}: 'layers' must map layer names to their activity"
    return None
