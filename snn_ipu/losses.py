"""Classification losses and accuracy for spiking outputs, in the manner of
``snntorch.functional``.

Every function takes the network output either as a :class:`~snn_ipu.SparseSpikes`
or as a dense time-major tensor ``[T, B, N]``. Unlike snnTorch, the losses are plain
functions rather than objects to instantiate::

    snnTorch                                   snn_ipu
    SF.ce_count_loss()(spk, y)                 ce_count_loss(spk, y)
    SF.ce_rate_loss()(spk, y)                  ce_rate_loss(spk, y)
    SF.ce_max_membrane_loss()(mem, y)          ce_membrane_loss(mem, y)  (time_reduction="max")
    sum_t nn.CrossEntropyLoss()(mem[t], y)     T * ce_membrane_loss(mem, y, "per_step")
    SF.mse_membrane_loss()(mem, y)             mse_membrane_loss(mem, y)
    SF.mse_count_loss(0.8, 0.2)(spk, y)        mse_count_loss(spk, y, 0.8, 0.2)
    SF.accuracy_rate(spk, y)                   accuracy(spk, y)
    population_code=True, num_classes=C        population=N // C
    reduction="mean" | "sum" | "none"          reduction= (the same, over the batch)
    weight=w (per class)                       weight=w

Population codes use snnTorch's layout: with ``population = P`` there are ``N = C * P``
output neurons and neuron ``j`` votes for class ``j // P`` (contiguous blocks of P).

``reduction`` is over the batch, as in snnTorch and torch: ``"mean"`` (default),
``"sum"``, or ``"none"`` (the cross-entropies give one loss per sample ``[B]``, the
squared errors one per sample and class ``[B, C]``, as ``nn.MSELoss`` does). How the
sequence is reduced over time is ``time_reduction`` (:func:`ce_membrane_loss`,
:func:`accuracy`). ``weight`` (``[C]``, >= 0) scales each sample's loss by the weight of
its target class; the mean is then over the batch, as snnTorch takes it (the weighted
losses divided by B, not by the sum of the weights as ``F.cross_entropy`` does).

Dense inputs are time-major ``[T, B, N]``; pass ``time_first=False`` for batch-first
``[B, T, N]`` tensors. A :class:`~snn_ipu.SparseSpikes` is always time-major.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from ._devices import values_readable
from ._numbers import flag, real_number, whole_number

__all__ = [
    "spike_count",
    "ce_count_loss",
    "ce_rate_loss",
    "ce_membrane_loss",
    "mse_membrane_loss",
    "mse_count_loss",
    "accuracy",
]

# A SparseSpikes or anything else with to_dense()/spike_counts(); typed loosely so that
# this module does not import the core (and works with duck-typed test doubles).
SpikesLike = Union[torch.Tensor, Any]

_MEMBRANE_REDUCTIONS = ("max", "mean", "last", "sum")
_BATCH_REDUCTIONS = ("mean", "sum", "none")


def _is_sparse(spikes: SpikesLike) -> bool:
    return hasattr(spikes, "to_dense") and hasattr(spikes, "spike_counts")


def _checked(spikes: SpikesLike, name: str) -> SpikesLike:
    """A list checked as a layer checks its input, where nothing has checked it (built
    with ``validate=False``): a graded or eligible-only value would be counted as (part
    of) a spike."""
    from .layer_input import check_list_once
    from .spikes import SparseSpikes

    if isinstance(spikes, SparseSpikes):
        check_list_once(spikes, name)
    return spikes


def _require_time_and_batch(num_steps: int, batch_size: int, name: str) -> None:
    if num_steps == 0 or batch_size == 0:
        raise ValueError(
            f"{name} have T={num_steps} steps and B={batch_size} samples; a loss or an "
            "accuracy needs at least one of each"
        )


def _dense(spikes: SpikesLike, name: str = "spikes", binary: bool = False,
           time_first: bool = True) -> torch.Tensor:
    """Time-major dense view [T, B, N] of either input form, floating point. ``binary``:
    dense spikes must be 0/1 (a membrane passed where spikes belong is an error)."""
    time_first = flag("time_first", time_first)
    if _is_sparse(spikes):
        _sparse_is_time_major(time_first, name)
        dense = _checked(spikes, name).to_dense()
        _require_time_and_batch(dense.shape[0], dense.shape[1], name)
        return dense
    if not isinstance(spikes, torch.Tensor):
        raise TypeError(f"{name} must be a SparseSpikes or a torch.Tensor, got {type(spikes)}")
    if spikes.dim() != 3:
        order = "[T, B, N] (time first)" if time_first else "[B, T, N] (time_first=False)"
        raise ValueError(f"{name} must have shape {order}, got {tuple(spikes.shape)}")
    if not time_first:
        spikes = spikes.transpose(0, 1)
    _require_time_and_batch(spikes.shape[0], spikes.shape[1], name)
    if spikes.is_complex():
        raise TypeError(f"{name} must be real, got dtype {spikes.dtype}")
    if not spikes.dtype.is_floating_point:  # bool or integer 0/1 spikes, e.g. mem > thr
        spikes = spikes.float()
    if binary and values_readable(spikes):
        with torch.no_grad():
            non_binary = (spikes != 0) & (spikes != 1)
            if bool(non_binary.any()):
                raise ValueError(
                    f"{name} must be 0/1 spikes, found {spikes[non_binary][0].item()!r}; for a "
                    "membrane potential use ce_membrane_loss or mse_membrane_loss"
                )
    return spikes


# The attribute a spiking layer's recorded membrane (``last_membrane``) carries: the
# layer's name. It is detached, so a loss on it would train nothing.
RECORDED_MEMBRANE = "_snn_ipu_recorded_membrane_of"

_READOUT_HINT = (
    "a loss on the membrane needs a ReadoutLayer as the network's last layer: its output "
    "is the membrane, differentiable (from_snntorch(net, readout=True) makes one of a "
    "last Leaky(reset_mechanism='none')); or use a spike loss such as ce_count_loss")


def _membrane(membrane, time_first: bool) -> torch.Tensor:
    """A membrane loss's input, dense and time-major: spikes, or a spiking layer's
    recorded membrane in a call that trains, are refused, pointing to ReadoutLayer."""
    if _is_sparse(membrane):
        raise TypeError(f"membrane: got a spiking layer's output spikes (SparseSpikes); "
                        f"{_READOUT_HINT}")
    layer = getattr(membrane, RECORDED_MEMBRANE, None)
    if layer is not None and torch.is_grad_enabled():
        raise ValueError(
            f"membrane: this is {layer}'s last_membrane (record_membrane), recorded detached: "
            f"no gradient flows through it, so the loss would train nothing; {_READOUT_HINT} "
            "(to compute it for monitoring, run under torch.no_grad())")
    return _dense(membrane, "membrane", time_first=time_first)


def _sparse_is_time_major(time_first: bool, name: str) -> None:
    if not flag("time_first", time_first):
        raise ValueError(f"{name}: a SparseSpikes is always time-major; time_first=False is "
                         "for batch-first dense tensors")


def _check_reduction(reduction: str) -> str:
    if reduction not in _BATCH_REDUCTIONS:
        hint = ""
        if reduction in _MEMBRANE_REDUCTIONS + ("per_step",):
            hint = (" (reduction is over the batch, as in snnTorch; the reduction over time "
                    f"is time_reduction={reduction!r})")
        raise ValueError(f"reduction must be one of {_BATCH_REDUCTIONS}, got {reduction!r}{hint}")
    return reduction


def _class_weight(weight: Optional[torch.Tensor], num_classes: int,
                  like: torch.Tensor) -> Optional[torch.Tensor]:
    """The per-class weights ``[C]`` in ``like``'s dtype, checked."""
    if weight is None:
        return None
    if not isinstance(weight, torch.Tensor):
        weight = torch.as_tensor(weight, dtype=like.dtype)
    if weight.dim() != 1 or weight.shape[0] != num_classes:
        raise ValueError(f"weight must have shape [C] = [{num_classes}] (one per class), got "
                         f"{tuple(weight.shape)}")
    if not weight.is_floating_point():
        weight = weight.to(like.dtype)
    if values_readable(weight) and not bool((torch.isfinite(weight) & (weight >= 0)).all()):
        raise ValueError("weight must be finite and >= 0")
    return weight.to(device=like.device, dtype=like.dtype)


def _reduce_batch(losses: torch.Tensor, targets: torch.Tensor, weight: Optional[torch.Tensor],
                  reduction: str) -> torch.Tensor:
    """Per-sample (``[B]``) or per-sample-and-class (``[B, C]``) losses, weighted by the
    target's class weight and reduced over the batch."""
    if weight is not None:
        w = weight[targets]
        losses = losses * (w if losses.dim() == 1 else w[:, None])
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    return losses


def _population(population: int) -> int:
    value = whole_number(population, 1)
    if value is None:
        raise ValueError(
            "population must be a positive int (output neurons per class; snnTorch's "
            f"population_code=True is population=N // num_classes here), got {population!r}"
        )
    return value


def _pool_population(x: torch.Tensor, population: int) -> torch.Tensor:
    """Sum the last dim in contiguous blocks of ``population``: [..., C*P] -> [..., C]."""
    population = _population(population)
    num_outputs = x.shape[-1]
    if num_outputs % population:
        raise ValueError(
            f"number of output neurons ({num_outputs}) is not divisible by "
            f"population ({population})"
        )
    if population == 1:
        return x
    return x.reshape(*x.shape[:-1], num_outputs // population, population).sum(-1)


def _check_targets(targets: torch.Tensor, batch_size: int, num_classes: int) -> torch.Tensor:
    """The targets as int64 class indices (torch's losses take no other integer dtype
    alike), after checking them."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a torch.Tensor of class indices, got {type(targets)}")
    if targets.dtype.is_floating_point or targets.dtype == torch.bool or targets.is_complex():
        raise ValueError(f"targets must hold integer class indices, got dtype {targets.dtype}")
    if targets.dim() != 1 or targets.shape[0] != batch_size:
        raise ValueError(
            f"targets must have shape [B] = [{batch_size}], got {tuple(targets.shape)}"
        )
    if targets.numel() and values_readable(targets) and (
            int(targets.min()) < 0 or int(targets.max()) >= num_classes):
        raise ValueError(
            f"targets must lie in [0, {num_classes}), got range "
            f"[{int(targets.min())}, {int(targets.max())}]"
        )
    return targets.long()


def spike_count(spikes: SpikesLike, population: int = 1, time_first: bool = True) -> torch.Tensor:
    r"""Spikes per output (or per class, for a population code), summed over time.

    .. math::
        n_{b,c} = \sum_t \sum_{j \in \mathrm{pop}(c)} S_{t,b,j}

    Differentiable (through ``SparseSpikes.values`` for the sparse form).

    :param spikes: SparseSpikes or dense ``[T, B, N]`` (``[B, T, N]`` with
        ``time_first=False``)
    :param population: output neurons per class; ``N`` must be divisible by it
    :return: float ``[B, N // population]``
    """
    if _is_sparse(spikes):
        _sparse_is_time_major(time_first, "spikes")
        counts = _checked(spikes, "spikes").spike_counts()
        _require_time_and_batch(spikes.num_steps, counts.shape[0], "spikes")
    else:
        counts = _dense(spikes, binary=True, time_first=time_first).sum(0)
    return _pool_population(counts, population)


def ce_count_loss(
    spikes: SpikesLike, targets: torch.Tensor, population: int = 1, *,
    weight: Optional[torch.Tensor] = None, reduction: str = "mean", time_first: bool = True,
) -> torch.Tensor:
    r"""Cross-entropy of the spike counts (``snntorch.functional.ce_count_loss``).

    .. math::
        \mathcal{L} = -\frac{1}{B} \sum_b \log \mathrm{softmax}(n_{b})_{y_b},
        \qquad n_{b,c} = \sum_t S_{t,b,c}

    :param spikes: SparseSpikes or dense ``[T, B, C * population]``
    :param targets: integer class indices ``[B]``
    :param population: output neurons per class
    :param weight: per-class weights ``[C]`` (see the module docstring)
    :param reduction: ``"mean" | "sum" | "none"`` over the batch
    :param time_first: False for batch-first dense spikes ``[B, T, N]``
    :return: scalar loss (``[B]`` for ``reduction="none"``)
    """
    _check_reduction(reduction)
    counts = spike_count(spikes, population, time_first=time_first)
    targets = _check_targets(targets, counts.shape[0], counts.shape[1])
    weight = _class_weight(weight, counts.shape[1], counts)
    per_sample = F.cross_entropy(counts, targets, reduction="none")
    return _reduce_batch(per_sample, targets, weight, reduction)


def ce_rate_loss(
    spikes: SpikesLike, targets: torch.Tensor, population: int = 1, *,
    weight: Optional[torch.Tensor] = None, reduction: str = "mean", time_first: bool = True,
) -> torch.Tensor:
    r"""Cross-entropy applied at every step, averaged over time
    (``snntorch.functional.ce_rate_loss``).

    .. math::
        \mathcal{L} = \frac{1}{T} \sum_t \frac{1}{B} \sum_b
            -\log \mathrm{softmax}(S_{t,b})_{y_b}

    With ``population > 1`` the spikes of each class's neurons are summed per step
    before the softmax. (snnTorch 1.0's ``ce_rate_loss(population_code=True)`` needs
    class weights and does not pool; this is the pooled reading of it.)

    :param spikes: SparseSpikes or dense ``[T, B, C * population]``
    :param targets: integer class indices ``[B]``
    :param population: output neurons per class
    :param weight: per-class weights ``[C]`` (see the module docstring)
    :param reduction: ``"mean" | "sum" | "none"`` over the batch (each sample's loss is
        its mean over the steps)
    :param time_first: False for batch-first dense spikes ``[B, T, N]``
    :return: scalar loss (``[B]`` for ``reduction="none"``)
    """
    _check_reduction(reduction)
    dense = _pool_population(_dense(spikes, binary=True, time_first=time_first), population)
    num_steps, batch_size, num_classes = dense.shape
    targets = _check_targets(targets, batch_size, num_classes)
    weight = _class_weight(weight, num_classes, dense)
    per_step = F.cross_entropy(dense.reshape(num_steps * batch_size, num_classes),
                               targets.repeat(num_steps), reduction="none")
    return _reduce_batch(per_step.reshape(num_steps, batch_size).mean(0), targets, weight,
                         reduction)


def _reduce_time(membrane: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "max":
        return membrane.max(0).values
    if reduction == "mean":
        return membrane.mean(0)
    if reduction == "last":
        return membrane[-1]
    if reduction == "sum":
        return membrane.sum(0)
    raise ValueError(f"time_reduction must be one of {_MEMBRANE_REDUCTIONS}, got {reduction!r}")


def ce_membrane_loss(
    membrane: torch.Tensor, targets: torch.Tensor, time_reduction: str = "max", *,
    weight: Optional[torch.Tensor] = None, reduction: str = "mean", time_first: bool = True,
) -> torch.Tensor:
    r"""Cross-entropy of the output membrane potential reduced over time.

    .. math::
        \mathcal{L} = -\frac{1}{B} \sum_b \log \mathrm{softmax}(m_b)_{y_b},
        \qquad m_{b,c} = \mathop{\mathrm{red}}_t U_{t,b,c}

    ``time_reduction="max"`` is ``snntorch.functional.ce_max_membrane_loss`` (from
    Zenke's SpyTorch); ``"mean"``, ``"sum"`` and ``"last"`` reduce over time
    accordingly. ``"per_step"`` is the cross-entropy of every step's membrane averaged
    over the steps, :math:`\frac{1}{T} \sum_t \mathrm{CE}(U_t, y)` (snnTorch's
    tutorial 5 sums the steps: T times this).

    :param membrane: ``[T, B, C]``, e.g. the output of :class:`~snn_ipu.ReadoutLayer`
    :param targets: integer class indices ``[B]``
    :param time_reduction: ``"max" | "mean" | "last" | "sum"`` over time, or ``"per_step"``
    :param weight: per-class weights ``[C]`` (see the module docstring)
    :param reduction: ``"mean" | "sum" | "none"`` over the batch
    :param time_first: False for a batch-first membrane ``[B, T, C]``
    :return: scalar loss (``[B]`` for ``reduction="none"``)
    """
    _check_reduction(reduction)
    if time_reduction not in _MEMBRANE_REDUCTIONS + ("per_step",):
        raise ValueError(f"time_reduction must be one of {_MEMBRANE_REDUCTIONS + ('per_step',)}, "
                         f"got {time_reduction!r}")
    membrane = _membrane(membrane, time_first)
    num_steps, batch_size, num_classes = membrane.shape
    if time_reduction == "per_step":
        targets = _check_targets(targets, batch_size, num_classes)
        per_step = F.cross_entropy(membrane.reshape(num_steps * batch_size, num_classes),
                                   targets.repeat(num_steps), reduction="none")
        per_sample = per_step.reshape(num_steps, batch_size).mean(0)
    else:
        logits = _reduce_time(membrane, time_reduction)
        targets = _check_targets(targets, batch_size, num_classes)
        per_sample = F.cross_entropy(logits, targets, reduction="none")
    return _reduce_batch(per_sample, targets, _class_weight(weight, num_classes, membrane),
                         reduction)


def mse_membrane_loss(
    membrane: torch.Tensor,
    targets: torch.Tensor,
    on_target: float = 1.0,
    off_target: float = 0.0,
    *,
    weight: Optional[torch.Tensor] = None,
    reduction: str = "mean",
    time_first: bool = True,
) -> torch.Tensor:
    r"""Mean squared error of the membrane against a target potential at every step
    (``snntorch.functional.mse_membrane_loss`` with targets fixed over time). The two
    agree for ``off_target >= 0``; for a negative ``off_target`` below ``on_target``,
    snnTorch 1.0's ``targets_convert`` puts the other classes at 0 instead, while
    this loss keeps ``off_target`` as given.

    .. math::
        \mathcal{L} = \frac{1}{T} \sum_t \frac{1}{B C} \sum_{b,c} (U_{t,b,c} - \hat U_{b,c})^2,
        \qquad \hat U_{b,c} = \begin{cases} u_{\mathrm{on}} & c = y_b \\
            u_{\mathrm{off}} & \text{otherwise} \end{cases}

    :param membrane: ``[T, B, C]``, e.g. the output of :class:`~snn_ipu.ReadoutLayer`
    :param targets: integer class indices ``[B]``
    :param on_target: target potential of the correct class
    :param off_target: target potential of every other class
    :param weight: per-class weights ``[C]`` (see the module docstring)
    :param reduction: ``"mean" | "sum" | "none"``; ``"none"`` gives ``[B, C]`` (each
        averaged over time, as snnTorch)
    :param time_first: False for a batch-first membrane ``[B, T, C]``
    :return: scalar loss
    """
    _check_reduction(reduction)
    for name, value in (("on_target", on_target), ("off_target", off_target)):
        if not math.isfinite(real_number(name, value)):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    membrane = _membrane(membrane, time_first)
    targets = _check_targets(targets, membrane.shape[1], membrane.shape[2])
    target = torch.full_like(membrane[0], float(off_target))
    target.scatter_(1, targets.unsqueeze(1), float(on_target))
    squared = F.mse_loss(membrane, target.expand_as(membrane), reduction="none").mean(0)
    return _reduce_batch(squared, targets, _class_weight(weight, membrane.shape[2], membrane),
                         reduction)


def mse_count_loss(
    spikes: SpikesLike,
    targets: torch.Tensor,
    correct_rate: float = 1.0,
    incorrect_rate: float = 0.0,
    population: int = 1,
    *,
    weight: Optional[torch.Tensor] = None,
    reduction: str = "mean",
    time_first: bool = True,
) -> torch.Tensor:
    r"""Mean squared error between spike counts and target counts
    (``snntorch.functional.mse_count_loss``, from SLAYER).

    .. math::
        \mathcal{L} = \frac{1}{T} \cdot \frac{1}{B C} \sum_{b,c} (n_{b,c} - \hat n_{b,c})^2,
        \qquad \hat n_{b,c} = \begin{cases}
            \lfloor T P r_{\mathrm{correct}} \rfloor & c = y_b \\
            \lfloor T P r_{\mathrm{incorrect}} \rfloor & \text{otherwise}
        \end{cases}

    The target counts are truncated to integers, as snnTorch does.

    :param spikes: SparseSpikes or dense ``[T, B, C * population]``
    :param targets: integer class indices ``[B]``
    :param correct_rate: target firing rate (spikes per step) of the correct class
    :param incorrect_rate: target firing rate of every other class
    :param population: output neurons per class
    :param weight: per-class weights ``[C]`` (see the module docstring)
    :param reduction: ``"mean" | "sum" | "none"``; ``"none"`` gives ``[B, C]``
    :param time_first: False for batch-first dense spikes ``[B, T, N]``
    :return: scalar loss
    """
    _check_reduction(reduction)
    for name, rate in (("correct_rate", correct_rate), ("incorrect_rate", incorrect_rate)):
        if not 0.0 <= real_number(name, rate) <= 1.0:  # a bool or a string: named
            raise ValueError(f"{name} must be in [0, 1], got {rate}")
    counts = spike_count(spikes, population, time_first=time_first)
    num_steps = spikes.num_steps if _is_sparse(spikes) else spikes.shape[0 if time_first else 1]
    batch_size, num_classes = counts.shape
    targets = _check_targets(targets, batch_size, num_classes)
    on_target = int(num_steps * correct_rate * population)
    off_target = int(num_steps * incorrect_rate * population)
    target_counts = torch.full_like(counts, float(off_target))
    target_counts.scatter_(1, targets.unsqueeze(1), float(on_target))
    squared = F.mse_loss(counts, target_counts, reduction="none") / num_steps
    return _reduce_batch(squared, targets, _class_weight(weight, num_classes, counts),
                         reduction)


def accuracy(
    outputs: SpikesLike, targets: torch.Tensor, population: int = 1,
    time_reduction: str = "sum", *, time_first: bool = True,
) -> float:
    r"""Fraction of samples whose winning class is the target.

    .. math::
        \mathrm{acc} = \frac{1}{B} \sum_b
            [\arg\max_c \mathop{\mathrm{red}}_t X_{t,b,c} = y_b]

    For spikes keep ``time_reduction="sum"`` (spike count;
    ``snntorch.functional.accuracy_rate``). For a membrane from a readout layer pass the
    ``time_reduction`` used in :func:`ce_membrane_loss` (``"max"`` by default there;
    ``"mean"`` for ``"per_step"``). Ties go to the lowest class.

    :param outputs: SparseSpikes, dense spikes or membrane ``[T, B, C * population]``
    :param targets: integer class indices ``[B]``
    :param population: output neurons per class
    :param time_reduction: reduction over time, ``"sum" | "max" | "mean" | "last"``
    :param time_first: False for batch-first dense outputs ``[B, T, N]``
    :return: accuracy in [0, 1]
    """
    with torch.no_grad():
        if _is_sparse(outputs) and time_reduction == "sum":
            scores = spike_count(outputs, population, time_first=time_first)
        else:
            scores = _pool_population(
                _reduce_time(_dense(outputs, time_first=time_first), time_reduction), population)
        targets = _check_targets(targets, scores.shape[0], scores.shape[1])
        if not bool(torch.isfinite(scores).all()):
            # argmax would rank NaN first and score a diverged output as correct
            raise ValueError("outputs contain NaN or inf: the accuracy is undefined")
        predicted = scores.argmax(1)
        # counted in integers: a float32 mean would return 1/3 as 0.3333333432674408
        return int((predicted == targets.to(predicted.device)).sum()) / predicted.numel()
