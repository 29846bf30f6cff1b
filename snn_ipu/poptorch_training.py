"""Training a spiking network with PopTorch: the recipe of docs/ipu.md as functions.

:class:`WithLoss` puts a network, its loss and its spike-list overflow counts in
the one module PopTorch compiles; :func:`train` runs PopTorch's loop around it::

    poptorch.Options()                      # useIpuModel(True): no hardware needed
        .deviceIterations(n)                # n steps per host call
        .replicationFactor(r)               # data parallel over r IPUs
        .Training.gradientAccumulation(a)   # a micro-batches per weight update
        .enableExecutableCaching(path)      # compile once
    poptorch.DataLoader(options, SpikeLists(...), batch_size,     # combined batches of
                        mode=poptorch.DataLoaderMode.Async)       # n*r*a input lists
    poptorch.trainingModel(WithLoss(net, ..., num_inputs), options, poptorch.optim.Adam(...))
    poptorch.inferenceModel(WithLoss(net, ...), eval_options)     # on Padded(test set)
    training_model.compile(...)                                   # ahead of time
    training_model.copyWeightsToHost(); torch.save(...)           # checkpoints
    optimizer.load_state_dict(...)                                # resume

Replication copies the whole program, custom ops included, to every replica: each
replica runs its own micro-batches through its own copy of every layer's op and
the replicas' gradients are summed before the update (PopTorch's all-reduce), so
the custom ops need nothing for it. Overflow counts come back per micro-batch and
replica (``OutputMode.All``) and :func:`snn_ipu.ipu_overflow.record` applies each
layer's policy on the host after every call.

Everything here imports without the Poplar SDK; :func:`train` needs PopTorch.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import torch
from torch import nn

from . import ipu_overflow
from ._numbers import flag
from .checkpoint import load_checkpoint, require_entries, save_checkpoint
from .spikes import SparseSpikes

__all__ = ["PopTorchConfig", "WithLoss", "evaluate", "predict_class", "size_lists", "train"]


def _poptorch():
    from .backends.ipu import _poptorch as load

    return load()


@dataclass(frozen=True)
class PopTorchConfig:
    """PopTorch's options for :func:`train`. ``ipu_model``: run on the IPUModel (a
    simulation on the host); ``None``: on hardware where there is some, else the model."""

    ipu_model: Optional[bool] = None
    device_iterations: int = 4
    replication_factor: int = 1
    gradient_accumulation: int = 1
    seed: int = 0
    # PopTorch's executable cache: a second run of the same program loads it from
    # here instead of compiling (Options.enableExecutableCaching); None: no cache.
    executable_cache: Optional[str] = None
    # Batches prepared by a worker thread while the IPU runs (DataLoaderMode.Async).
    async_loader: bool = True

    def __post_init__(self) -> None:
        for name in ("device_iterations", "replication_factor", "gradient_accumulation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PopTorchConfig.{name} must be a positive int, got {value!r}")
        if self.ipu_model is not None:
            flag("PopTorchConfig.ipu_model", self.ipu_model)

    def options(self, poptorch, training: bool):
        """A ``poptorch.Options`` for the training model or (``training=False``) the
        inference model (no gradient accumulation there)."""
        use_model = self.ipu_model
        if use_model is None:
            use_model = not poptorch.ipuHardwareIsAvailable(self.replication_factor)
        opts = poptorch.Options()
        opts.useIpuModel(use_model)
        opts.randomSeed(self.seed)
        opts.deviceIterations(self.device_iterations)
        opts.replicationFactor(self.replication_factor)
        # Every micro-batch's (and replica's) outputs: the overflow counts of each.
        opts.outputMode(poptorch.OutputMode.All)
        if self.executable_cache is not None:
            opts.enableExecutableCaching(self.executable_cache)
        if training:
            opts.Training.gradientAccumulation(self.gradient_accumulation)
        return opts

    @property
    def micro_batches(self) -> int:
        return self.device_iterations * self.replication_factor * self.gradient_accumulation

    def loader(self, poptorch, options, dataset, batch_size: int, shuffle: bool):
        """A ``poptorch.DataLoader`` of whole combined batches, asynchronous unless
        ``async_loader`` is off."""
        mode = poptorch.DataLoaderMode.Async if self.async_loader else \
            poptorch.DataLoaderMode.Sync
        return poptorch.DataLoader(options, dataset, batch_size=batch_size, shuffle=shuffle,
                                   drop_last=True, mode=mode)


def predict_class(out: Union[torch.Tensor, SparseSpikes]) -> torch.Tensor:
    """[B] class ids: the readout neuron with the highest membrane over time, or the
    output neuron with the most spikes."""
    if isinstance(out, SparseSpikes):
        return out.spike_counts().argmax(-1)
    return out.amax(0).argmax(-1)


class WithLoss(nn.Module):
    """``net`` with its loss and overflow counts, as PopTorch compiles it.

    Takes sample-major inputs (what a DataLoader stacks): dense spikes ``[B, T, in]``,
    or with ``num_inputs`` (the first layer's ``in_features``) the spike lists of
    :class:`snn_ipu.data.SpikeLists`, ``ids [B, T, K]`` and ``counts [B, T, 2]``, so
    that the first layer's list holds K entries, not ``num_inputs``. Returns
    ``(predictions [B], loss, overflow counts)``, or without labels (the inference
    model) ``(predictions, overflow counts)``. ``loss_fn`` returns one number, the loss
    reduced over the micro-batch (a ``[B]`` loss is refused: PopTorch would
    differentiate its sum).
    """

    def __init__(self, net: nn.Module,
                 loss_fn: Callable[[Union[torch.Tensor, SparseSpikes], torch.Tensor],
                                   torch.Tensor],
                 predict: Callable[[Union[torch.Tensor, SparseSpikes]], torch.Tensor]
                 = predict_class, num_inputs: Optional[int] = None) -> None:
        super().__init__()
        self.net = net
        self.loss_fn = loss_fn
        self.predict = predict
        self.num_inputs = num_inputs

    def forward(self, *inputs: torch.Tensor):
        self._check_inputs(inputs)
        if self.num_inputs is None:
            x, labels = inputs[0].transpose(0, 1), inputs[1:]  # the layers are time-major
        else:
            ids, counts, labels = inputs[0], inputs[1], inputs[2:]
            x = SparseSpikes(ids.transpose(0, 1), counts.transpose(0, 1), self.num_inputs)
        # the inference model (no labels) is traced without autograd, so that its
        # layers list spikes alone, as the CPU loop's evaluation does
        with torch.set_grad_enabled(bool(labels) and torch.is_grad_enabled()), \
                ipu_overflow.OverflowCounts(self.net) as overflow:
            out = self.net(x)
        predictions = self.predict(out).to(torch.int32)
        if not labels:
            return predictions, overflow.counts
        loss = self.loss_fn(out, labels[0])
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            # poptorch.identity_loss(reduction="none") of a [B] loss differentiates its
            # sum: a learning rate B times the mean's, where the CPU's backward() refuses
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(
                f"WithLoss: loss_fn must return one number (the loss reduced over the batch, "
                f"as the CPU loop's backward() needs), got {shape}: reduce it, e.g. with "
                "reduction='mean'")
        return predictions, _poptorch().identity_loss(loss, reduction="none"), overflow.counts

    def _check_inputs(self, inputs) -> None:
        """The inputs' number, types and ranks (all a traced model can check): a list
        read as dense spikes, or labels in the place of counts, would fail far from
        here or train on the wrong tensors."""
        def form(t) -> str:
            if not isinstance(t, torch.Tensor):
                return type(t).__name__
            return f"{str(t.dtype).replace('torch.', '')} {list(t.shape)}"

        got = ", ".join(form(t) for t in inputs)
        if self.num_inputs is None:
            if not 1 <= len(inputs) <= 2 or not isinstance(inputs[0], torch.Tensor) or \
                    inputs[0].dim() != 3:
                raise ValueError(
                    "WithLoss takes dense spikes [B, T, in] (then the labels [B] when "
                    f"training), got {len(inputs)} inputs ({got}); spike lists (ids [B, T, "
                    "K], counts [B, T, 2], labels) need WithLoss(..., num_inputs=in)")
            return
        ids, counts = (inputs + (None, None))[:2]
        lists = all(isinstance(t, torch.Tensor) and t.dim() == 3 and not t.is_floating_point()
                    and t.dtype != torch.bool for t in (ids, counts))
        if not 2 <= len(inputs) <= 3 or not lists or counts.shape[-1] != 2 \
                or ids.shape[:2] != counts.shape[:2]:
            raise ValueError(
                f"WithLoss(num_inputs={self.num_inputs}) takes spike lists: integer ids "
                "[B, T, K] and counts [B, T, 2] (snn_ipu.data.SpikeLists), then the labels "
                f"[B] when training; got {len(inputs)} inputs ({got}). Dense spikes "
                "[B, T, in] go in without num_inputs")


class Padded(torch.utils.data.Dataset):
    """``dataset`` (items ``(tensor, ..., label)``) with items of zeros labelled -1
    appended up to a multiple of ``multiple`` samples: a compiled model takes whole
    combined batches, and dropping the remainder would score fewer samples than the
    set has. :func:`evaluate` skips the padding."""

    def __init__(self, dataset, multiple: int) -> None:
        self.dataset = dataset
        self.padding = -len(dataset) % multiple

    def __len__(self) -> int:
        return len(self.dataset) + self.padding

    def __getitem__(self, i: int):
        if not -len(self) <= i < len(self):
            # the end of the padding: iterating a dataset by index stops at IndexError
            raise IndexError(f"index {i} out of range for {len(self)} samples")
        if i < 0:
            i += len(self)
        if i < len(self.dataset):
            *tensors, label = item = self.dataset[i]
            label = torch.as_tensor(label)
            # an unsigned label (uint8, bool) cannot hold the padding's -1 (uint8 made it
            # 255, a label evaluate() counted): every label is an int64 then
            return (*tensors, label.long()) if _unsigned(label) else item
        *tensors, label = self.dataset[0]
        label = torch.as_tensor(label)
        return (*(torch.zeros_like(t) for t in tensors),
                torch.full_like(label.long() if _unsigned(label) else label, -1))


def _unsigned(label: torch.Tensor) -> bool:
    return not label.dtype.is_floating_point and not label.dtype.is_signed


def evaluate(inference_model, loader, net: nn.Module) -> float:
    """Accuracy of an inference model of :class:`WithLoss` over a PopTorch DataLoader;
    samples labelled -1 (the padding of :class:`Padded`) are not counted."""
    correct = total = 0
    for *inputs, y in loader:
        predictions, counts = inference_model(*inputs)
        if predictions.numel() != y.numel():
            # OutputMode.Final/EveryN/Sum: fewer (or summed) predictions, which a
            # batch of 1 compared with every label by broadcasting
            raise ValueError(
                f"evaluate(): the inference model returned {predictions.numel()} predictions "
                f"for a combined batch of {y.numel()} samples: compile it with "
                "poptorch.Options().outputMode(poptorch.OutputMode.All)")
        real = y.reshape(-1) >= 0
        if counts.numel():  # none: a CPU run, where the layers kept their own stats
            # the overflow rows of micro-batches of padding alone say nothing of the data
            counts = _rows_of_real_micro_batches(counts, real)
        ipu_overflow.record(net, counts)
        correct += int((predictions.reshape(-1).long() == y.reshape(-1))[real].sum())
        total += int(real.sum())
    return correct / max(total, 1)


_OVERFLOW_ROWS = ("check that the inference model is compiled with poptorch.Options()"
                  ".outputMode(poptorch.OutputMode.All) and returns the counts of the model "
                  "as compiled (WithLoss's)")


def _rows_of_real_micro_batches(counts: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The overflow rows of the micro-batches of a combined batch (``real``: which of its
    samples are not padding) that hold a real sample. A micro-batch's rows are found by
    their batch size, not by the number of spiking layers: a layer may be called twice
    in a forward (shared weights), or not at all."""
    width = len(ipu_overflow.ROW)
    if counts.numel() % width:
        return counts  # not rows at all: record() says so
    rows = counts.reshape(-1, width)
    sizes = rows[:, ipu_overflow.ROW.index("batch_size")].unique().tolist()
    if len(sizes) != 1 or sizes[0] < 1 or real.numel() % sizes[0]:
        raise ValueError(
            f"evaluate(): overflow rows of batch_size {', '.join(map(str, sizes))} for a "
            f"combined batch of {real.numel()} samples, where every layer call sees one "
            f"micro-batch, of one size that divides it: {_OVERFLOW_ROWS}")
    micro_batches = real.numel() // sizes[0]
    if len(rows) % micro_batches:
        raise ValueError(
            f"evaluate(): {len(rows)} overflow rows for {micro_batches} micro-batches of "
            f"{sizes[0]} samples, not the same number of layer calls in each: "
            f"{_OVERFLOW_ROWS}")
    # PopTorch returns the rows micro-batch after micro-batch, in the order of the labels
    keep = real.reshape(micro_batches, -1).any(1)
    return rows.reshape(micro_batches, -1, width)[keep].reshape(-1, width)


def _first_batch(dataset, size: int):
    return torch.utils.data.default_collate([dataset[i] for i in range(size)])


def train(
    net: nn.Module,
    train_set: torch.utils.data.Dataset,
    test_set: torch.utils.data.Dataset,
    loss_fn: Callable,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    config: PopTorchConfig = PopTorchConfig(),
    predict: Callable = predict_class,
    checkpoint: Optional[Union[str, Path]] = None,
    resume: Optional[Union[str, Path]] = None,
    num_inputs: Optional[int] = None,
    log: Callable[[str], None] = print,
    checkpoint_extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, float]:
    """Trains ``net`` (its layers with ``backend="auto"`` or ``"ipu"``) with PopTorch:
    ``epochs`` passes over ``train_set``, Adam at ``lr``, evaluated on all of
    ``test_set`` (padded to whole batches, the padding not counted) by an inference
    model after every epoch, the host weights and the optimizer's state saved to
    ``checkpoint`` after every epoch; ``resume``: a checkpoint to start from (weights,
    optimizer state and epoch; an ``epochs`` it has already reached, or an ``lr``
    other than the one it trained at, is an error);
    ``checkpoint_extra``: more entries for every checkpoint. Samples are
    ``(spikes [T, in], label)``, or with ``num_inputs`` spike lists
    ``(ids [T, K], counts [T, 2], label)`` (:class:`snn_ipu.data.SpikeLists`).
    ``batch_size`` is the micro-batch of one replica and step. Both models are compiled
    before the first epoch. Returns the last epoch's metrics."""
    poptorch = _poptorch()
    model = WithLoss(net, loss_fn, predict, num_inputs)
    train_opts = config.options(poptorch, training=True)
    eval_opts = config.options(poptorch, training=False)
    # A compiled model takes whole combined batches: the training set drops its
    # remainder (reshuffled every epoch), the test set is padded.
    train_loader = config.loader(poptorch, train_opts, train_set, batch_size, shuffle=True)
    eval_batch = batch_size * config.device_iterations * config.replication_factor
    test_loader = config.loader(poptorch, eval_opts, Padded(test_set, eval_batch), batch_size,
                                shuffle=False)
    if len(train_loader) == 0:
        raise ValueError(
            f"{len(train_set)} training samples make no combined batch of batch_size x "
            f"deviceIterations x replicationFactor x gradientAccumulation = "
            f"{batch_size * config.micro_batches}")
    optimizer = poptorch.optim.Adam(model.parameters(), lr=lr)
    first_epoch = 1
    if resume is not None:
        # Before the models are made: PopTorch uploads the host weights and a loaded
        # optimizer state when it compiles.
        from .training import load_weights

        state = load_checkpoint(resume)
        require_entries(state, resume, ("model", "optimizer", "epoch"), "resume training")
        saved = state["optimizer"]
        if not (isinstance(saved, dict) and "ipu_state" in saved and "ipu_param" in saved):
            # PopTorch's optimizers load only their own state (the device's, read back
            # as ipu_state/ipu_param); torch's Adam moments cannot be mapped onto it
            raise ValueError(
                f"{resume}: its optimizer state is not a PopTorch optimizer's (a run "
                "trained on a CPU or GPU backend holds torch's Adam state, which PopTorch "
                "cannot load onto the IPU): resume it on the backend it trained on")
        if epochs <= state["epoch"]:
            raise ValueError(f"{resume} has already trained {state['epoch']} epochs; epochs="
                             f"{epochs} leaves nothing to train: give more to continue")
        # The loaded state sets the rate (its param_groups, and on the device its
        # ipu_param): another lr would be ignored without a word
        rates = sorted({float(g["lr"]) for g in saved.get("param_groups", ()) if "lr" in g})
        if rates and not all(math.isclose(r, lr, rel_tol=1e-6) for r in rates):
            raise ValueError(
                f"{resume} trained at lr={', '.join(f'{r:g}' for r in rates)}; lr={lr:g} "
                "would be ignored (the optimizer state it resumes holds its rate): give "
                "its lr to continue it")
        load_weights(net, state, resume)
        optimizer.load_state_dict(state["optimizer"])
        first_epoch = state["epoch"] + 1
    # A model's mode (dropout on or off) is fixed when it compiles, and PopTorch's
    # inferenceModel does not switch it: each model is compiled in its own.
    training_model = poptorch.trainingModel(model, options=train_opts, optimizer=optimizer)
    inference_model = poptorch.inferenceModel(model, options=eval_opts)
    # Ahead of time, on one batch's shapes: compilation errors (and the time it takes)
    # come before the first epoch, not after it.
    # (The example batch comes from the dataset: an asynchronous loader's worker is
    # not to be started for one batch.)
    start = time.perf_counter()
    *example, y = _first_batch(train_set, train_loader.combinedBatchSize)
    net.train()
    training_model.compile(*example, y)
    training_model.detachFromDevice()
    *example, _ = _first_batch(train_set, test_loader.combinedBatchSize)
    net.eval()
    inference_model.compile(*example)
    inference_model.detachFromDevice()
    log(f"compiled the training and inference models ({time.perf_counter() - start:.1f}s)")
    metrics: Dict[str, float] = {}
    start = time.perf_counter()
    for epoch in range(first_epoch, epochs + 1):
        losses, correct, seen = [], 0, 0
        net.train()
        for *inputs, y in train_loader:
            predictions, loss, counts = training_model(*inputs, y)
            ipu_overflow.record(net, counts)  # raises for overflow="error" layers
            losses.append(float(loss.float().mean()))
            correct += int((predictions.reshape(-1).long() == y.reshape(-1)).sum())
            seen += y.numel()
        # The IPU holds the weights; the host copy is what checkpoints and the
        # inference model (which reloads changed host weights) read.
        training_model.copyWeightsToHost()
        if checkpoint is not None:  # atomic, locked, CRC-checked on load (checkpoint.py)
            save_checkpoint(checkpoint, {**(checkpoint_extra or {}), "epoch": epoch,
                                         "model": net.state_dict(),
                                         "optimizer": optimizer.state_dict()})
        training_model.detachFromDevice()  # free the IPU(s) for the inference model
        test_acc = math.nan
        if len(test_set):
            net.eval()
            test_acc = evaluate(inference_model, test_loader, net)
            inference_model.detachFromDevice()  # (PopTorch refuses to detach twice)
        metrics = {"loss": sum(losses) / len(losses), "train_acc": correct / max(seen, 1),
                   "test_acc": test_acc}
        log(f"epoch {epoch:3d}  loss {metrics['loss']:.4f}  train acc {metrics['train_acc']:.3f}"
            f"  test acc {test_acc:.3f}  ({time.perf_counter() - start:.1f}s)")
    return metrics


def size_lists(net: nn.Module, x: torch.Tensor, headroom: float = 2.0) -> Dict[str, int]:
    """Gives every spiking layer of ``net`` without a ``max_spikes`` one: ``headroom``
    times what its lists needed on the time-major input ``x`` ([T, B, in]) in a
    training-mode pass on the CPU (the emulator), at most the layer's width. A
    compiled model's capacities are fixed, and the planner's default guesses from a 5 %
    activity. Returns the capacities set, by layer name."""
    from .layers import _Layer, _SpikingLayer

    layers = [m for m in net.modules() if isinstance(m, _SpikingLayer) and m.max_spikes is None]
    backends = {m: m.backend for m in net.modules() if isinstance(m, _Layer)}
    policies = {m: m.overflow for m in layers}
    for m in backends:
        m.backend = "emulator"
    for m in layers:
        m.overflow = "grow"
    try:
        net(x)  # with autograd on: the lists hold the gradient-eligible neurons too
    finally:
        for m, backend in backends.items():
            m.backend = backend
        for m, policy in policies.items():
            m.overflow = policy
    sizes = {}
    for m in layers:
        m.max_spikes = max(1, min(m.out_features,
                                  math.ceil(headroom * m.stats["needed_capacity"])))
        sizes[m.name] = m.max_spikes
    return sizes


def check_ipu_config(config) -> None:
    """PopTorch's loop (:func:`train`) trains at a constant learning rate, without
    regularizers and without augmenting the training batches: a config that asks for
    any of them (a checkpoint of the CPU loop resumed on the IPU too) is refused rather
    than trained otherwise than it says."""
    from .training import augmentation

    jitter, drop = augmentation(config)
    asked = [what for what, on in (
        (f"lr_schedule={config.lr_schedule!r} (--lr-schedule constant)",
         config.lr_schedule != "constant"),
        ("reg_l1 (--reg-l1)", bool(config.reg_l1)),
        ("reg_lower (--reg-lower)", bool(config.reg_lower)),
        ("reg_upper (--reg-upper)", bool(config.reg_upper)),
        (f"augmentation (jitter {jitter}, drop {drop}: --augment-jitter 0 --augment-drop 0)",
         bool(jitter) or bool(drop))) if on]
    if asked:
        raise ValueError(
            "--backend ipu: PopTorch's loop trains at a constant learning rate, without "
            f"regularizers or augmentation; this config asks for {'; '.join(asked)}. Train "
            "it on a CPU or GPU backend, or leave those out")


def train_config(config, task, checkpoint: Optional[Union[str, Path]] = None,
                 log: Callable[[str], None] = print,
                 resume: Optional[Union[str, Path]] = None) -> Dict[str, float]:
    """``snn-ipu train --backend ipu``: the command line's network
    (:func:`snn_ipu.training.build_model`) on its task's data, through :func:`train`
    (the IPUModel where there is no IPU). The input goes in as spike lists
    (:class:`snn_ipu.data.SpikeLists`, listed one sample at a time by the task's own
    collate, never a dense dataset), of the capacity the data's busiest step needs.
    The layers' capacities come from an emulator pass (twice what it needed, then
    ``overflow="drop"``) where ``--max-spikes`` does not set them. Checkpoints hold the
    config, so that ``snn-ipu train --resume`` continues them (``resume``)."""
    from . import losses
    from .data.collate import SpikeLists
    from .training import accuracy_over_time, build_model

    _poptorch()  # without PopTorch, say so before anything else
    check_ipu_config(config)
    torch.manual_seed(config.seed)  # the weights, as the CPU loop draws them
    net = build_model(config, task.num_inputs, task.num_classes)
    predict = predict_class
    if config.readout == "membrane":
        def loss_fn(out, labels):
            return losses.ce_membrane_loss(out, labels, config.time_reduction)

        # the class the CPU loop's accuracy takes (training._objective)
        over_time = accuracy_over_time(config)

        def predict(out):
            return losses._reduce_time(out, over_time).argmax(-1)
    else:
        loss_fn = losses.ce_count_loss
    train_set = SpikeLists(task.train, task.collate, datasets=(task.test,))
    test_set = SpikeLists(task.test, task.collate, capacity=train_set.capacity)
    log(f"input lists: capacity {train_set.capacity} of {task.num_inputs} inputs (the "
        "busiest step of the data)")
    first = [train_set[i] for i in range(min(config.batch_size, len(train_set)))]
    x = SparseSpikes(torch.stack([f[0] for f in first], 1), torch.stack([f[1] for f in first], 1),
                     task.num_inputs)
    sizes = size_lists(net, x)
    for layer in ipu_overflow.spiking_layers(net):
        if layer.name in sizes:
            layer.overflow = "drop"
    if sizes:
        log("list capacities (2x what an emulator pass needed; overflow='drop'): "
            + ", ".join(f"{name}={k}" for name, k in sizes.items()))
    # As many device iterations (up to 4) as leave a few host calls per epoch.
    calls = len(train_set) // config.batch_size
    pconfig = PopTorchConfig(device_iterations=max(1, min(4, calls // 4)), seed=config.seed)
    log(f"PopTorch: {pconfig.device_iterations} device iterations of batch "
        f"{config.batch_size} (on the IPUModel where there is no IPU)")
    return train(net, train_set, test_set, loss_fn, epochs=config.epochs,
                 batch_size=config.batch_size, lr=config.lr, config=pconfig,
                 predict=predict, checkpoint=checkpoint, num_inputs=task.num_inputs, log=log,
                 resume=resume, checkpoint_extra={"config": config.to_dict()})
