"""A stand-in for PopTorch 3.4 (no Poplar SDK here), shared by the tests.

It follows the signatures of PopTorch 3.4's python/ sources (graphcore/poptorch at
sdk/poptorch/3.4.0): ``custom_op(inputs, name, domain, domain_version,
example_outputs, attributes=None)``, ``identity_loss(x, reduction)``,
``Options`` (``deviceIterations``, ``replicationFactor``, ``useIpuModel``,
``outputMode``, ``randomSeed``, ``Training.gradientAccumulation``), ``DataLoader``
(the combined batch of ``batch_size x deviceIterations x replicationFactor x
gradientAccumulation``), ``trainingModel``/``inferenceModel`` returning an
executor (``copyWeightsToHost``, ``copyWeightsToDevice``, ``setOptimizer``,
``compile``, ``isCompiled``, ``detachFromDevice``, ``destroy``),
``Options.enableExecutableCaching``, ``DataLoaderMode`` and ``optim.Adam`` (its
``state_dict``/``load_state_dict`` with the device's state, as PopTorch's); a call
with an argument name PopTorch 3.4 does not have fails
as it would there, and what PopTorch refuses (a training model without a loss,
an inference model with gradient accumulation, a batch that is not a multiple
of the combined batch, a second wrapping of one model...) is refused.

How it runs a model, as PopTorch does:

* The first call compiles: the model is traced once, on the user's modules,
  with its parameters and inputs as ``meta`` tensors (values that cannot be
  read, as PopTorch's ``ipu`` tensors) and ``isRunningOnIpu()`` true. Python
  side effects of that trace stay on the user's modules, as in PopTorch.
* Every call then runs the "device": a copy of the model holding the device's
  weights, executed micro-batch by micro-batch (deviceIterations x
  gradientAccumulation x replicas); its Python side effects are thrown away,
  since on an IPU no Python runs after compilation. Custom ops run through
  ``devices`` (op name -> a CPU implementation); the SnnSpikingLayer and
  SnnReadoutLayer implementations here compute the op's outputs with the emulator
  backend (the codelets on the CPU), gradients through torch's autograd.
* Weights move between host and device only by ``copyWeightsToDevice`` (on the
  first call) and ``copyWeightsToHost``; an inference model picks up the host
  weights when their version changed, as PopTorch's does.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import math
import types
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from torch.func import functional_call

ROOT = Path(__file__).resolve().parent.parent


class OutputMode(enum.IntEnum):
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class Error(RuntimeError):
    """poptorch.Error"""


class _TrainingOptions:
    def __init__(self) -> None:
        self.gradient_accumulation = 1

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:  # noqa: N802
        if not isinstance(gradient_accumulation, int) or gradient_accumulation < 1:
            raise ValueError("gradientAccumulation must be a positive int")
        self.gradient_accumulation = gradient_accumulation
        return self


class _DistributedOptions:
    numProcesses = 1  # noqa: N815
    processId = 0  # noqa: N815


class Options:
    def __init__(self) -> None:
        self.device_iterations = 1
        self.replication_factor = 1
        self.input_group_size = 1
        self.use_ipu_model = False
        self.output_mode = OutputMode.Default
        self.random_seed: Optional[int] = None
        self.executable_cache: Optional[str] = None
        self._training = _TrainingOptions()
        self._distributed = _DistributedOptions()

    @property
    def Training(self) -> _TrainingOptions:  # noqa: N802
        return self._training

    @property
    def Distributed(self) -> _DistributedOptions:  # noqa: N802
        return self._distributed

    def deviceIterations(self, device_iterations: int) -> Options:  # noqa: N802
        self.device_iterations = _positive("deviceIterations", device_iterations)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:  # noqa: N802
        self.replication_factor = _positive("replicationFactor", replication_factor)
        return self

    def useIpuModel(self, use_model: bool) -> Options:  # noqa: N802
        self.use_ipu_model = bool(use_model)
        return self

    def outputMode(self, output_mode: OutputMode,  # noqa: N802
                   output_return_period: Optional[int] = None) -> Options:
        if not isinstance(output_mode, OutputMode):
            raise TypeError("outputMode takes a poptorch.OutputMode")
        if output_mode == OutputMode.EveryN:
            raise NotImplementedError("the stand-in does not emulate OutputMode.EveryN")
        self.output_mode = output_mode
        return self

    def enableExecutableCaching(self, path: str) -> Options:  # noqa: N802
        # PopTorch 3.4 (options.py): sets PopART's cachePath and enableEngineCaching.
        self.executable_cache = path
        return self

    def randomSeed(self, random_seed: int) -> Options:  # noqa: N802
        if not isinstance(random_seed, int):
            raise ValueError("randomSeed takes an int")
        self.random_seed = random_seed
        return self


def _positive(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    return value


class DataLoader(torch.utils.data.DataLoader):
    def __init__(self, options: Options, dataset, batch_size: int = 1, shuffle: bool = None,
                 num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: Optional[bool] = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync,
                 async_options: Optional[Dict[str, Any]] = None,
                 rebatched_worker_size: Optional[int] = None, batch_sampler=None, **kwargs):
        if not isinstance(options, Options):
            raise TypeError("DataLoader's first argument is a poptorch.Options")
        combine = (options.device_iterations
                   * (options.replication_factor // options.input_group_size)
                   * options.Training.gradient_accumulation)
        self._combined_batch_size = batch_size * combine
        self._options = options
        if not isinstance(mode, DataLoaderMode):
            raise TypeError("DataLoader's mode is a poptorch.DataLoaderMode")
        self._mode = mode  # the stand-in loads synchronously whatever the mode
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=bool(shuffle),
                         num_workers=num_workers, drop_last=drop_last, **kwargs)

    @property
    def combinedBatchSize(self) -> int:  # noqa: N802
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options


# --------------------------------------------------------------------------- optim
class _PoptorchOptimizer:
    """PopTorch's own Optimizer base (python/optim.py at 3.4): ``state_dict()`` holds the
    device's state as ``ipu_state``/``ipu_param`` (read back from the device, here by the
    Executor after every run) beside torch's; ``load_state_dict`` takes only such a
    state, which the device gets when the model compiles."""

    def _ipu_state(self) -> dict:
        return self.__dict__.setdefault("_state_dict", {"ipu_state": None, "ipu_param": None})

    def state_dict(self):
        return {**self._ipu_state(), **torch.optim.Optimizer.state_dict(self)}

    def load_state_dict(self, state):
        torch.optim.Optimizer.load_state_dict(self, state)
        if not state:
            raise RuntimeError("Cannot load optimizer state dictionary because it is empty.")
        if not ("ipu_state" in state and "ipu_param" in state):
            raise RuntimeError("Only IPU optimizer states can be loaded onto the IPU.")
        self._state_dict = dict(state)
        self.ipu_state_is_dirty = True


class Adam(_PoptorchOptimizer, torch.optim.Adam):
    def __init__(self, params, lr: Optional[float] = None, betas=None, eps=None,
                 weight_decay=None, amsgrad=None, foreach=None, maximize=None, capturable=None,
                 differentiable=None, fused=None, loss_scaling: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        parent = {k: v for k, v in dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                        amsgrad=amsgrad, foreach=foreach, maximize=maximize,
                                        capturable=capturable,
                                        differentiable=differentiable).items()
                  if v is not None}
        if amsgrad:
            raise ValueError("poptorch.optim.Adam: AMSGrad is not supported")
        torch.optim.Adam.__init__(self, params, **parent)
        for t in (accum_type, first_order_momentum_accum_type,
                  second_order_momentum_accum_type):
            assert t in (None, torch.float16, torch.float32), \
                "Accumulation types must be either torch.float32 or torch.float16"
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        self.max_grad_norm = float("inf") if max_grad_norm is None else max_grad_norm


optim = types.SimpleNamespace(Adam=Adam)
_SUPPORTED_TORCH_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW,
                               torch.optim.RMSprop)


# --------------------------------------------------------------------------- devices
DEVICE_BACKEND = "emulator"

def _layer_for_op(name: str, attributes: dict, inputs: List[torch.Tensor]):
    from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer
    from snn_ipu import surrogate as sg

    weight = inputs[3]
    n_out, n_in = weight.shape
    kinds = {0: sg.ATan, 1: sg.FastSigmoid, 2: sg.Sigmoid, 3: sg.Triangle, 4: sg.StraightThrough}
    if name == "SnnReadoutLayer":
        return ReadoutLayer(n_in, n_out, bias=bool(attributes["has_bias"]), backend=DEVICE_BACKEND,
                            dtype=weight.dtype)
    kind = kinds[attributes["surrogate_kind"]]
    p0, p1 = attributes["surrogate_p0"], attributes["surrogate_p1"]
    surrogate = (kind() if kind is sg.StraightThrough else kind(p0, p1) if kind is sg.Triangle
                 else kind(p0))
    window = attributes["grad_window"]
    common = dict(
        bias=bool(attributes["has_bias"]), reset=("subtract", "zero", "none")[attributes["reset"]],
        surrogate=surrogate, grad_window=None if window < 0 else window,
        recurrent=bool(attributes["recurrent"]), max_spikes=attributes["capacity"],
        overflow="drop", backend=DEVICE_BACKEND, dtype=weight.dtype)
    cls = SynapticLayer if attributes["model"] == 1 else LIFLayer
    return cls(n_in, n_out, **common)


def _run_layer_op(name: str, inputs: List[torch.Tensor], attributes: dict) -> List[torch.Tensor]:
    """SnnSpikingLayer / SnnReadoutLayer on the CPU: the op's outputs
    (popops_ext/poplar/OpSignatures.hpp), differentiable where the op's are."""
    import warnings

    from snn_ipu import SparseSpikes

    layer = _layer_for_op(name, attributes, inputs)
    n_in = layer.in_features
    spikes = SparseSpikes(inputs[0], inputs[1], n_in, inputs[2], validate=False)
    if name == "SnnReadoutLayer":
        params = {"weight": inputs[3], "beta": inputs[5]}
        if layer.bias is not None:
            params["bias"] = inputs[4]
        return [functional_call(layer, params, (spikes,))]
    params = {"weight": inputs[3], "beta": inputs[6], "threshold": inputs[7]}
    if layer.bias is not None:
        params["bias"] = inputs[4]
    if layer.recurrent:
        params["rec_weight"] = inputs[5]
    if attributes["model"] == 1:
        params["alpha"] = inputs[8]
    layer.record_membrane = True
    with warnings.catch_warnings():  # the op drops silently; the host is told by counts
        warnings.simplefilter("ignore")
        out = functional_call(layer, params, (spikes,))
    U = layer.last_membrane
    T, B, N = U.shape
    K = out.capacity
    listed = torch.arange(K).expand(T, B, K) < out.counts[..., 1:2].long()
    membrane = torch.where(listed, U.gather(-1, out.ids.long()), torch.zeros(()))
    threshold = inputs[7].detach().float()
    window = attributes["grad_window"]
    n_spikes = (U > threshold).sum(-1)
    line = threshold - (math.inf if window < 0 else window)
    n_entries = (U > line).sum(-1) if window >= 0 else torch.full_like(n_spikes, N)
    needed = torch.stack([n_spikes, n_entries], -1).float()
    dense = (T, B, N) if attributes["keep_dense_state"] else (1,)
    dense_syn = dense if attributes["model"] == 1 else (1,)
    dense_u = U.clone() if attributes["keep_dense_state"] else torch.zeros(1)
    # The grad op's input only: the reference's autograd needs no history here.
    dense_s = torch.zeros(dense_syn)
    return [out.values, out.ids, out.counts, membrane, needed, dense_u, dense_s,
            _spike_bits(U > threshold, attributes["neurons_per_tile"])]


def _spike_bits(spiked: torch.Tensor, neurons_per_tile: int) -> torch.Tensor:
    """The op's spike_bits: per tile of neurons_per_tile neurons, 16 to a float word
    (LayerGraph.hpp)."""
    T, B, N = spiked.shape
    per_tile = min(neurons_per_tile, N)
    words = -(-per_tile // 16)
    tiles = -(-N // per_tile)
    padded = torch.zeros(T, B, tiles * words * 16, dtype=torch.int64)
    for j in range(tiles):
        width = min(per_tile, N - j * per_tile)
        padded[..., j * words * 16:j * words * 16 + width] = \
            spiked[..., j * per_tile:j * per_tile + width].long()
    weights = 2 ** torch.arange(16)
    return (padded.reshape(T, B, tiles * words, 16) * weights).sum(-1).float()


# --------------------------------------------------------------------------- the module
class StandinPoptorch(types.ModuleType):
    OutputMode = OutputMode
    DataLoaderMode = DataLoaderMode
    Options = Options
    DataLoader = DataLoader
    Error = Error
    optim = optim

    def __init__(self) -> None:
        super().__init__("poptorch")
        self.__version__ = "3.4.0"
        self.custom_op_calls: List[dict] = []
        self.device_logs: List[str] = []  # what PopTorch would log while tracing
        # op name -> f(inputs, attributes) -> outputs
        self.devices: Dict[str, Callable] = {
            name: functools.partial(_run_layer_op, name)
            for name in ("SnnSpikingLayer", "SnnReadoutLayer")}
        self._phase: Optional[str] = None  # None | "trace" | "run"
        self._losses: List[torch.Tensor] = []
        # The models wrapped for training, as PopTorch marks the model object itself:
        # a set of ids would take a new model at a freed one's address for it.
        self._wrapped: weakref.WeakSet = weakref.WeakSet()

    # ---- ops
    def isRunningOnIpu(self) -> bool:  # noqa: N802
        return self._phase is not None

    def custom_op(self, inputs, name: str, domain: str, domain_version: int, example_outputs,
                  attributes: Optional[dict] = None) -> List[torch.Tensor]:
        if not all(isinstance(t, torch.Tensor) for t in inputs):
            raise TypeError("custom_op: inputs must be tensors")
        if not all(isinstance(t, torch.Tensor) for t in example_outputs):
            raise TypeError("custom_op: example_outputs must be tensors")
        for k, v in (attributes or {}).items():
            if not isinstance(k, str):
                raise ValueError("All attribute keys must be strings.")
            if not isinstance(v, (float, int, str, list, tuple)):
                raise ValueError("Attribute values must be floats, ints, strings or a "
                                 "list/tuple of float, ints of strings.")
        self.custom_op_calls.append(dict(inputs=list(inputs), name=name, domain=domain,
                                         domain_version=domain_version,
                                         example_outputs=list(example_outputs),
                                         attributes=dict(attributes or {}), phase=self._phase))
        if self._phase == "trace":
            for t in example_outputs:
                if t.device.type != "meta":
                    self.device_logs.append("No device set in torch.zeros(): forcing to IPU")
            return [torch.zeros_like(t, device="meta") for t in example_outputs]
        if self._phase == "run":
            self._phase = None  # the op's implementation is the device's, not the model's
            try:
                outputs = self.devices[name](list(inputs), dict(attributes or {}))
            finally:
                self._phase = "run"
            for got, want in zip(outputs, example_outputs):
                if got.shape != want.shape or got.dtype != want.dtype:
                    raise Error(f"{name}: the op made {got.dtype} {tuple(got.shape)}, its "
                                f"example output is {want.dtype} {tuple(want.shape)}")
            if len(outputs) != len(example_outputs):
                raise Error(f"{name}: {len(outputs)} outputs, {len(example_outputs)} examples")
            return outputs
        # outside a PopTorch model: a list of example-like tensors (the ops cannot run)
        return [torch.zeros_like(t) for t in example_outputs]

    def identity_loss(self, x: torch.Tensor, reduction: str) -> torch.Tensor:
        if reduction == "sum":
            out = x.sum()
        elif reduction == "mean":
            out = x.mean()
        else:
            assert reduction == "none", "Unsupported reduction type!"
            out = x
        self._losses.append(out)
        return out

    def ipuHardwareIsAvailable(self, num_ipus: int = 1) -> bool:  # noqa: N802
        return False

    # ---- models
    def trainingModel(self, model, options: Optional[Options] = None,  # noqa: N802
                      optimizer: Optional[torch.optim.Optimizer] = None) -> Executor:
        if optimizer is not None and not isinstance(
                optimizer, (_PoptorchOptimizer, *_SUPPORTED_TORCH_OPTIMIZERS)):
            raise Error(f"Unsupported optimizer type {type(optimizer).__name__}")
        return Executor(self, model, options or Options(), True, optimizer)

    def inferenceModel(self, model, options: Optional[Options] = None) -> Executor:  # noqa: N802
        options = options or Options()
        if options.Training.gradient_accumulation != 1:
            raise Error("You must set gradientAccumulation to 1 for an inference model")
        return Executor(self, model, options, False, None)

    @contextlib.contextmanager
    def tracing(self):
        """Runs the enclosed code as PopTorch traces a model (tests of the ops' calls)."""
        self._phase = "trace"
        try:
            yield
        finally:
            self._phase = None


def _meta(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("meta").requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(v) for v in x)
    return x


def _combine(outputs: List[Any], mode: OutputMode):
    first = outputs[0]
    if isinstance(first, (list, tuple)):
        return type(first)(_combine([o[i] for o in outputs], mode) for i in range(len(first)))
    if not isinstance(first, torch.Tensor):
        return first
    if mode == OutputMode.Final:
        return outputs[-1].detach()
    if mode == OutputMode.Sum:
        return torch.stack([o.detach() for o in outputs]).sum(0)
    if first.dim() == 0:
        return torch.stack([o.detach() for o in outputs])
    return torch.cat([o.detach() for o in outputs])


class Executor:
    """poptorch.PoplarExecutor, as far as a training loop uses it."""

    def __init__(self, poptorch: StandinPoptorch, model: torch.nn.Module, options: Options,
                 training: bool, optimizer) -> None:
        if not isinstance(options, Options):
            raise TypeError("options must be a poptorch.Options")
        if training and model in poptorch._wrapped:
            raise Error("Model has already been wrapped in 'poptorch.trainingModel'. Call "
                        "model.destroy() on the model to unwrap before wrapping again.")
        self._poptorch = poptorch
        self._user_model = model
        self._options = options
        self._training = training
        self._optimizer = optimizer
        if optimizer is None and training:
            self._optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        self._device_model: Optional[torch.nn.Module] = None
        self._device_optimizer = None
        self._micro_shapes = None
        self._host_version_seen = -1
        self._attached = False  # compiling attaches (PopTorch 3.4's _poplar_executor.py)
        if training:
            poptorch._wrapped.add(model)

    @property
    def model(self) -> torch.nn.Module:
        return self._user_model

    @property
    def options(self) -> Options:
        return self._options

    def isCompiled(self) -> bool:  # noqa: N802
        return self._device_model is not None

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        return self._attached

    def _micro_batches(self) -> int:
        o = self._options
        acc = o.Training.gradient_accumulation if self._training else 1
        return o.device_iterations * o.replication_factor * acc

    def _split(self, args):
        n = self._micro_batches()
        chunks = []
        for a in args:
            if not isinstance(a, torch.Tensor):
                raise Error("the stand-in takes tensor inputs")
            if a.shape[0] % n:
                raise Error(
                    f"Invalid batch dimension: In the input {tuple(a.shape)}, the batch "
                    f"dimension ({a.shape[0]}) must be a multiple of "
                    f"deviceIterations * replicationFactor * gradientAccumulation = {n}")
            chunks.append(a.chunk(n))
        return [tuple(c[i] for c in chunks) for i in range(n)]

    def compile(self, *args) -> None:
        if self.isCompiled():
            self._poptorch.device_logs.append(
                "Call to compile() ignored: the executable is already compiled")
            return
        micro = self._split(args)
        self._micro_shapes = [tuple(t.shape) for t in micro[0]]
        model = self._user_model
        state = {name: _meta(t) for name, t in
                 {**dict(model.named_parameters()), **dict(model.named_buffers())}.items()}
        pt = self._poptorch
        pt._phase, pt._losses = "trace", []
        try:
            out = functional_call(model, state, _meta(micro[0]))
        finally:
            pt._phase = None
        if self._training and not pt._losses:
            raise Error("trainingModel: the model must return a loss marked with "
                        "poptorch.identity_loss (or a torch loss)")
        del out
        self._device_model = copy.deepcopy(model)
        self._attached = True
        self.copyWeightsToDevice()
        if self._training:
            self._device_optimizer = self._make_device_optimizer()

    def _make_device_optimizer(self):
        opt = self._optimizer
        params = list(self._device_model.parameters())
        cls = torch.optim.Adam if isinstance(opt, Adam) else type(opt)
        device_opt = cls(params, **{k: v for k, v in opt.defaults.items()
                                    if k in cls.__init__.__code__.co_varnames})
        if isinstance(opt, _PoptorchOptimizer) and opt._ipu_state()["ipu_state"] is not None:
            # a loaded state goes to the device with the weights
            device_opt.load_state_dict({"state": opt._ipu_state()["ipu_state"],
                                        "param_groups": opt._ipu_state()["ipu_param"]})
        return device_opt

    def _read_back_optimizer(self) -> None:
        if isinstance(self._optimizer, _PoptorchOptimizer):
            state = copy.deepcopy(self._device_optimizer.state_dict())
            self._optimizer._state_dict = {"ipu_state": state["state"],
                                           "ipu_param": state["param_groups"]}

    def setOptimizer(self, optimizer) -> None:  # noqa: N802
        self._optimizer = optimizer
        if self._device_optimizer is not None:
            for group in self._device_optimizer.param_groups:
                group["lr"] = optimizer.param_groups[0]["lr"]

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        with torch.no_grad():
            for d, h in zip(self._device_model.state_dict().values(),
                            self._user_model.state_dict().values()):
                d.copy_(h)
        self._host_version_seen = getattr(self._user_model, "_standin_host_version", 0)

    def copyWeightsToHost(self) -> None:  # noqa: N802
        if not self.isCompiled():
            raise Error("Model has not been compiled or has been destroyed.")
        with torch.no_grad():
            for h, d in zip(self._user_model.state_dict().values(),
                            self._device_model.state_dict().values()):
                h.copy_(d)
        version = getattr(self._user_model, "_standin_host_version", 0) + 1
        self._user_model._standin_host_version = version
        self._host_version_seen = version

    def detachFromDevice(self) -> None:  # noqa: N802
        if not self.isCompiled():
            raise Error("Model has not been compiled or has been destroyed.")
        if not self._attached:
            raise Error("Device is not attached")
        self._attached = False

    def destroy(self) -> None:
        self._device_model = None
        self._poptorch._wrapped.discard(self._user_model)

    def __call__(self, *args):
        if not self.isCompiled():
            self.compile(*args)
        if getattr(self._user_model, "_standin_host_version", 0) != self._host_version_seen:
            self.copyWeightsToDevice()  # the host weights changed since the last copy
        micro = self._split(args)
        if [tuple(t.shape) for t in micro[0]] != self._micro_shapes:
            raise Error("the model was compiled for inputs of shapes "
                        f"{self._micro_shapes}; this call's are "
                        f"{[tuple(t.shape) for t in micro[0]]}")
        self._attached = True
        pt = self._poptorch
        # The device's run: no Python of the user's runs on an IPU, so the run's
        # side effects land on a throwaway copy sharing the device weights.
        shared = {id(p): p for p in self._device_model.parameters()}
        shared.update({id(b): b for b in self._device_model.buffers()})
        outputs = []
        per_step = (self._options.replication_factor
                    * (self._options.Training.gradient_accumulation if self._training else 1))
        pt._phase = "run"
        try:
            for i, batch in enumerate(micro):
                runner = copy.deepcopy(self._device_model, memo=dict(shared))
                pt._losses = []
                if self._training:
                    out = runner(*batch)
                    loss = pt._losses[-1]
                    (loss.sum() / per_step).backward()
                    if (i + 1) % per_step == 0:
                        self._device_optimizer.step()
                        self._device_optimizer.zero_grad(set_to_none=True)
                else:
                    with torch.no_grad():
                        out = runner(*batch)
                outputs.append(out)
        finally:
            pt._phase = None
        if self._training:
            self._read_back_optimizer()
        mode = self._options.output_mode
        if mode == OutputMode.Default:
            mode = OutputMode.Final if self._training else OutputMode.All
        return _combine(outputs, mode)


def standin_poptorch() -> StandinPoptorch:
    return StandinPoptorch()


def install(monkeypatch) -> StandinPoptorch:
    """The stand-in as ``poptorch`` for the test, with the custom-op library "loaded"
    (its ops are the stand-in's ``devices``)."""
    from snn_ipu.backends import ipu

    fake = standin_poptorch()
    monkeypatch.setitem(__import__("sys").modules, "poptorch", fake)
    monkeypatch.setattr(ipu, "load_library", lambda path=None: None)
    return fake
