"""What a backend is given and what it gives back.

A layer hands a backend its input spikes, its parameters as tensors
(:class:`LayerParams`), a frozen :class:`LayerConfig` of everything else and the
state to start from; the backend returns the layer's output and a
:class:`CallRecord` of the call (what it listed, what it dropped, the paths it
took, the state it ended in). The backend never touches the layer: the layer
applies its overflow policy and keeps its own ``stats``, ``state`` and
``last_membrane`` from the record. Every backend module (``reference``,
``emulator``, ``ipu``, ``ipu_graph``) implements :class:`Backend` with two
module-level functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple

import torch

from ..overflow import Overflow
from ..spikes import SparseSpikes
from ..surrogate import Surrogate

__all__ = ["Backend", "CallRecord", "LayerConfig", "LayerParams", "LayerState"]


class LayerState(NamedTuple):
    """A layer's state after the last step of a call, detached float32 ``[B, out]``:
    what the next call starts from when ``carry_state`` is set."""

    membrane: torch.Tensor
    synaptic: Optional[torch.Tensor]  # SynapticLayer only
    spikes: Optional[torch.Tensor]  # 0/1; spiking layers only


@dataclass(frozen=True)
class LayerConfig:
    """Everything about one layer call that is not a tensor."""

    name: str
    model: str  # "leaky" | "synaptic" | "readout"
    in_features: int
    out_features: int
    reset: str = "none"
    surrogate: Optional[Surrogate] = None
    # The call's window: the layer's grad_window (None: every neuron eligible), or 0.0
    # in a call autograd does not record (spikes alone are listed).
    grad_window: Optional[float] = None
    # The layer's own grad_window is None (exact gradients), whatever the call's: a
    # static list (the IPU's) without max_spikes then holds every neuron in every call,
    # as the calls that train it do and as snn_ipu.plan counts it.
    exact_gradients: bool = False
    recurrent: bool = False
    capacity: Optional[int] = None  # None: sized to fit (the CPU and GPU backends)
    overflow: str = "error"
    plan_target: str = "host"
    record_membrane: bool = False  # return the dense membrane [T, B, out] (detached)
    return_state: bool = False  # return the final state (carry_state)
    ipu_tiles: Any = None  # snn_ipu.planning.IpuTiles of a place()d layer, or None

    @property
    def window(self) -> float:
        """The window as a number: infinite where every neuron is eligible."""
        return math.inf if self.grad_window is None else self.grad_window

    @property
    def spiking(self) -> bool:
        return self.model != "readout"


class LayerParams(NamedTuple):
    """A layer's parameters as one call uses them: ``weight`` [out, in] (float32 or
    float16), ``bias`` [out] or None, ``rec_weight`` [out, out] or None, and the neuron
    constants [out] in float32 (float64 in a float64 layer): ``beta`` and ``alpha``
    clamped to [0, 1], ``threshold`` (None for a readout), ``alpha`` (None but for a
    synaptic layer)."""

    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    rec_weight: Optional[torch.Tensor]
    beta: torch.Tensor
    threshold: Optional[torch.Tensor]
    alpha: Optional[torch.Tensor]


@dataclass
class CallRecord:
    """What one call did. Counts are None where the backend cannot read them (a model
    traced for the IPU). ``paths`` holds the backend's choices, forward and, once the
    backward pass has run, backward (``input_grad_path``, ``weight_grad_path``)."""

    backend: str
    num_steps: int
    batch_size: int
    out_features: int
    total_spikes: Optional[int] = None
    capacity: Optional[int] = None
    needed_capacity: Optional[int] = None
    eligible_listed: Optional[int] = None
    overflow: Overflow = field(default_factory=lambda: Overflow(0, 0, None))
    paths: Dict[str, Any] = field(default_factory=dict)
    final_state: Optional[LayerState] = None
    membrane: Optional[torch.Tensor] = None
    # What the layer should warn about, once per layer (a setting the backend cannot
    # keep, ...).
    warnings: List[str] = field(default_factory=list)

    def stats(self) -> Dict[str, Any]:
        """The call's part of ``layer.stats``."""
        out: Dict[str, Any] = {"backend": self.backend}
        if self.total_spikes is not None:
            neuron_steps = max(1, self.num_steps * self.batch_size * self.out_features)
            out.update(
                activity=self.total_spikes / neuron_steps,
                eligible_activity=(self.eligible_listed or 0) / neuron_steps,
                spikes=self.total_spikes,
                capacity=self.capacity,
                needed_capacity=self.needed_capacity,
                spikes_dropped=self.overflow.spikes_dropped,
                eligible_dropped=self.overflow.eligible_dropped,
            )
        out.update(self.paths)
        return out


class Backend(Protocol):
    """The two functions of a backend module. ``cache``: a dict the layer keeps for its
    backend from call to call (None: a call on its own), where a backend may keep what
    it built for one call and can reuse in the next, having checked that it still
    applies; the layer never reads it."""

    def spiking_layer(
        self, config: LayerConfig, spikes: SparseSpikes, params: LayerParams,
        initial: Optional[LayerState], cache: Optional[dict] = None,
    ) -> Tuple[SparseSpikes, CallRecord]:
        """A spiking layer's output list over the whole sequence, from ``initial``
        (None: zero state)."""

    def readout_layer(
        self, config: LayerConfig, spikes: SparseSpikes, params: LayerParams,
        initial: Optional[LayerState], cache: Optional[dict] = None,
    ) -> Tuple[torch.Tensor, CallRecord]:
        """A readout's membrane ``[T, B, out]`` (differentiable)."""
