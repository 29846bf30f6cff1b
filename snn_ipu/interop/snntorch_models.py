"""snnTorch networks to snn_ipu layers and back, with their weights and settings.

:func:`from_snntorch` takes an ``nn.Sequential``, or any module whose children are
registered in the order its forward uses them (``fc1, lif1, fc2, lif2``, as snnTorch's
tutorials write them), built of ``nn.Linear`` followed by a neuron::

    nn.Linear + snntorch.Leaky       -> LIFLayer
    nn.Linear + snntorch.Synaptic    -> SynapticLayer
    nn.Linear + snntorch.RLeaky      -> LIFLayer(recurrent=True, rec_bias=True)
    nn.Linear + snntorch.RSynaptic   -> SynapticLayer(recurrent=True, rec_bias=True)

Weights, biases, ``beta``/``alpha``/``threshold`` (scalars or per neuron, learned or
not), the reset mechanism and the surrogate (``atan``, ``fast_sigmoid``, ``sigmoid``,
``straight_through_estimator``) are carried over; the recurrent ``nn.Linear``'s weight
becomes ``rec_weight`` and its bias ``rec_bias``, a parameter of its own, so that an
optimizer moves the two biases as snnTorch's does and training follows snnTorch's step
for step. What snn_ipu cannot express raises a ValueError naming the option:
``all_to_all=False`` and convolutional recurrence, ``inhibition``, ``reset_delay=False``,
``state_quant``, graded spikes, ``surrogate_disable``, surrogates other than the four
above, ``RLeaky`` with ``reset_mechanism="zero"`` (snnTorch's RLeaky zeroes that
step's input too, the recurrent LIFLayer does not), a module registered twice (each
layer has its own weights and state), and ``nn.Dropout`` (use
:class:`snn_ipu.SpikeDropout` between the converted layers). ``requires_grad`` is
carried both ways; a layer without ``rec_bias`` becomes a neuron whose
``recurrent.bias`` is None.

``from_snntorch(net, readout=True)`` turns the last neuron, a ``Leaky`` with
``reset_mechanism="none"``, into a :class:`~snn_ipu.ReadoutLayer` whose output is the
membrane snnTorch's loss would read.

:func:`to_snntorch` builds the snnTorch network of an snn_ipu model: an
``nn.Sequential`` of ``nn.Linear`` and neurons with ``init_hidden=True`` (the last one
with ``output=True``), run one step at a time after ``snntorch.utils.reset(net)``.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Iterable, List, Optional

import torch
from torch import nn

from .. import surrogate as surrogate_mod
from .._numbers import flag
from ..layers import LIFLayer, ReadoutLayer, SynapticLayer
from ..overflow import warn_if_export_loses_drops
from ..pipelining import require_no_input_delay

__all__ = ["from_snntorch", "to_snntorch"]


def _snntorch():
    try:
        import snntorch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("snnTorch interop needs snntorch: pip install snntorch") from exc
    return snntorch


def _leaves(module: nn.Module, prefix: str = "", seen: Optional[dict] = None) -> List[tuple]:
    """(name, module) of the network's layers in registration order: containers
    (Sequential, ModuleList, plain modules) are opened, snnTorch neurons and torch
    layers are leaves. A module registered twice is refused by name: torch's
    ``named_children`` lists it once, which dropped a layer of ``Sequential(fc, lif,
    fc, lif)``, and one neuron's state, or one Linear's weights, cannot be two layers'."""
    snn = _snntorch()
    seen = {} if seen is None else seen
    own = [k for k, v in module._parameters.items() if v is not None]
    buffers = [k for k, v in module._buffers.items() if v is not None]
    if own or buffers:
        # a container's own tensors are used by its forward, which the conversion does
        # not run: dropped, the network computed (and trained) otherwise
        where = prefix.rstrip(".") or type(module).__name__
        what = (f"parameters of its own ({', '.join(own)})" if own
                else f"buffers of its own ({', '.join(buffers)})")
        raise ValueError(
            f"from_snntorch: {where} holds {what}, outside any nn.Linear or neuron; the "
            "conversion reads the layers, not forward, and would drop them: fold them into "
            "the nn.Linear weights or remove them")
    leaves = []
    for name, child in module._modules.items():  # duplicates too, unlike named_children
        if child is None:
            continue
        path = f"{prefix}{name}"
        if id(child) in seen:
            raise ValueError(
                f"from_snntorch: {path} is the module {seen[id(child)]} again "
                f"({type(child).__name__}); snn_ipu gives every layer its own weights and "
                "state: use a separate module at each position (copy.deepcopy for the same "
                "initial weights)")
        seen[id(child)] = path
        if isinstance(child, (nn.Linear, snn.SpikingNeuron)) or not list(child.children()):
            leaves.append((path, child))
        else:
            leaves.extend(_leaves(child, path + ".", seen))
    return leaves


def _surrogate_of(neuron, where: str) -> surrogate_mod.Surrogate:
    if getattr(neuron, "surrogate_disable", False):
        raise ValueError(f"{where}: surrogate_disable=True is not supported")
    fn = neuron.spike_grad
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", "")
    if module == "snntorch.surrogate" and qualname.endswith(".<locals>.inner"):
        kind = qualname.split(".")[0]
        closure = inspect.getclosurevars(fn).nonlocals
        if kind == "atan":
            return surrogate_mod.ATan(float(closure["alpha"]))
        if kind == "fast_sigmoid":
            return surrogate_mod.FastSigmoid(float(closure["slope"]))
        if kind == "sigmoid":
            return surrogate_mod.Sigmoid(float(closure["slope"]))
        if kind == "straight_through_estimator":
            return surrogate_mod.StraightThrough()
        raise ValueError(f"{where}: the surrogate snntorch.surrogate.{kind} has no snn_ipu "
                         "equivalent (atan, fast_sigmoid, sigmoid and "
                         "straight_through_estimator have)")
    raise ValueError(
        f"{where}: spike_grad={fn!r} is a callback snn_ipu cannot express (its surrogates "
        "run in C++ and on the IPU); use snntorch.surrogate.atan, fast_sigmoid, sigmoid or "
        "straight_through_estimator"
    )


def _check_neuron_options(neuron, where: str) -> None:
    refused = []
    if getattr(neuron, "inhibition", False):
        refused.append("inhibition=True")
    if getattr(neuron, "state_quant", False):
        refused.append("state_quant")
    if getattr(neuron, "reset_delay", True) is False:
        refused.append("reset_delay=False")
    graded = getattr(neuron, "graded_spikes_factor", None)
    if _learned(neuron, "graded_spikes_factor") or (graded is not None and bool(
            (torch.as_tensor(graded) != 1).any())):
        refused.append("graded spikes (graded_spikes_factor != 1 or learned)")
    if hasattr(neuron, "all_to_all"):
        if not neuron.all_to_all:
            refused.append("all_to_all=False (one-to-one recurrence V)")
        elif getattr(neuron, "conv2d_channels", None) is not None:
            refused.append("convolutional recurrence (conv2d_channels)")
    if refused:
        raise ValueError(f"{where}: not supported by snn_ipu: {', '.join(refused)}")


# The step functions snnTorch's neurons bind in their constructor, by reset.
_STEP_RESETS = {"_base_sub": "subtract", "_base_zero": "zero", "_base_int": "none"}


def _reset_of(neuron, where: str) -> str:
    """The reset the neuron steps. snnTorch binds its step function (``state_function``)
    in the constructor; assigning ``reset_mechanism`` later changes the attribute, not
    the step: ``lif.reset_mechanism = "zero"`` still subtracts. Read from the attribute,
    the layer reset otherwise than the network it came from; refused naming both."""
    stepped = _STEP_RESETS.get(getattr(getattr(neuron, "state_function", None),
                                       "__name__", ""))
    said = neuron.reset_mechanism
    if stepped is not None and stepped != said:
        raise ValueError(
            f"from_snntorch: {where}: reset_mechanism is {said!r} but the neuron steps "
            f"{stepped!r} (snnTorch picks its step function in the constructor; setting "
            "reset_mechanism afterwards does not change it): build the neuron with the "
            "reset it should have")
    return said


def _value(t, clamp: bool = False):
    """A decay or threshold as the layer constructor takes it (scalar or per neuron);
    ``clamp``: a learned decay clamped to [0, 1], as snnTorch steps it (a fixed one out
    of range is refused by the constructor, naming the neuron)."""
    t = torch.as_tensor(t).detach().float().clone()
    if clamp:
        t = t.clamp(0, 1)
    return float(t) if t.dim() == 0 else t.reshape(-1)


def _learned(neuron, pname: str) -> bool:
    """Whether snnTorch trains the neuron's ``pname``: registered as one of its
    parameters, which ``net.parameters()`` (an optimizer's list) holds. An
    ``nn.Parameter`` passed with ``learn_beta=False`` is registered as a buffer, which
    that optimizer never moves: taken for learned by its type, it was trained here."""
    return neuron._parameters.get(pname) is not None


def _copy_learned_decays(layer: nn.Module, neuron) -> None:
    """The raw values of the learned decays. A decay an optimizer took outside [0, 1]
    is clamped where snnTorch and the layers use it, and the layer constructors, which
    take the values of fixed decays too, refuse it (a trained snnTorch network did not
    convert): the layer is built with the clamped value and the parameter then holds
    snnTorch's, so that its gradient (0 past the clamp) and every later step match."""
    for pname in ("beta", "alpha"):
        ours = layer._parameters.get(pname)
        if ours is not None:
            with torch.no_grad():
                ours.copy_(getattr(neuron, pname).detach().reshape(ours.shape))


def from_snntorch(
    module: nn.Module,
    readout: bool = False,
    *,
    backend: str = "auto",
    grad_window: Optional[float] = None,
    max_spikes: Optional[int] = None,
    overflow: str = "error",
) -> nn.Sequential:
    """An snn_ipu ``nn.Sequential`` with the weights and settings of an snnTorch network
    (module docstring). ``backend``, ``grad_window``, ``max_spikes`` and ``overflow``
    go to every spiking layer (``grad_window=None``: exact gradients, as snnTorch's)."""
    readout = flag("readout", readout)
    snn = _snntorch()
    leaves = [(n, m) for n, m in _leaves(module)
              if not isinstance(m, (nn.Identity, nn.Flatten))]
    if not leaves:
        raise ValueError("from_snntorch: the module holds no layers")
    for name, leaf in leaves:
        if isinstance(leaf, nn.modules.dropout._DropoutNd):
            raise ValueError(
                f"from_snntorch: {name} ({type(leaf).__name__}): dropout is not a layer of "
                "snn_ipu's; convert the network without it and put "
                f"snn_ipu.SpikeDropout(p={leaf.p}) between the converted layers (it drops "
                "spikes from the lists, in training only)")
    layers: List[nn.Module] = []
    i = 0
    while i < len(leaves):
        name, linear = leaves[i]
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"from_snntorch: {name} ({type(linear).__name__}) where an "
                             "nn.Linear belongs: the network must be nn.Linear followed by "
                             "Leaky, Synaptic, RLeaky or RSynaptic, pair after pair")
        if i + 1 == len(leaves):
            raise ValueError(f"from_snntorch: {name} (nn.Linear) is last; every nn.Linear "
                             "needs a neuron after it")
        neuron_name, neuron = leaves[i + 1]
        if isinstance(neuron, nn.Linear):
            raise ValueError(
                f"from_snntorch: {neuron_name} (nn.Linear) follows {name} (nn.Linear) where "
                "a neuron belongs: the modules are read in the order they were registered "
                "(assigned in __init__), which must be the order forward uses them: "
                "register each neuron right after its nn.Linear (fc1, lif1, fc2, lif2), or "
                "pass an nn.Sequential in that order")
        last = i + 2 == len(leaves)
        try:
            layers.append(_convert_pair(snn, linear, neuron, neuron_name, last and readout,
                                        dict(backend=backend, grad_window=grad_window,
                                             max_spikes=max_spikes, overflow=overflow)))
        except ValueError as exc:
            if str(exc).startswith("from_snntorch"):
                raise
            # a setting the layers refuse (beta=1.2, threshold=0): say which neuron has it
            raise ValueError(f"from_snntorch: {neuron_name} ({type(neuron).__name__}): "
                             f"{exc}") from None
        i += 2
    return nn.Sequential(*layers)


def _convert_pair(snn, linear: nn.Linear, neuron, name: str, as_readout: bool, options):
    where = f"{name} ({type(neuron).__name__})"
    kinds = (snn.RLeaky, snn.RSynaptic, snn.Leaky, snn.Synaptic)
    # the classes themselves: a subclass (snnTorch's DeltaLeaky, a user's neuron) keeps
    # the parameters and changes the model
    if type(neuron) not in kinds:
        subclass = isinstance(neuron, kinds)
        raise ValueError(
            f"from_snntorch: {where} after an nn.Linear; supported neurons are Leaky, "
            "Synaptic, RLeaky and RSynaptic" + (
                f" themselves ({type(neuron).__name__} is a subclass, whose model may differ)"
                if subclass else ""))
    _check_neuron_options(neuron, where)
    n_in, n_out = linear.in_features, linear.out_features
    has_bias = linear.bias is not None
    beta = neuron.beta
    learn_beta = _learned(neuron, "beta")
    reset = _reset_of(neuron, where)
    if as_readout:
        if not isinstance(neuron, snn.Leaky) or reset != "none":
            raise ValueError(f"from_snntorch: readout=True needs the last neuron to be a Leaky "
                             f"with reset_mechanism='none' (a leaky integrator), got {where} "
                             f"with reset_mechanism={reset!r}")
        layer = ReadoutLayer(n_in, n_out, beta=_value(beta, clamp=learn_beta), bias=has_bias,
                             learn_beta=learn_beta, backend=options["backend"], name=name)
    else:
        recurrent = isinstance(neuron, (snn.RLeaky, snn.RSynaptic))
        synaptic = isinstance(neuron, (snn.Synaptic, snn.RSynaptic))
        if isinstance(neuron, snn.RLeaky) and reset == "zero":
            raise ValueError(
                f"from_snntorch: {where}: RLeaky's reset_mechanism='zero' also zeroes the "
                "step's input, (1 - S[t-1]) (beta U[t-1] + I[t]); the recurrent LIFLayer "
                "keeps Leaky's form beta (1 - S[t-1]) U[t-1] + I[t] (use 'subtract' or "
                "'none', or RSynaptic, whose zero reset matches)")
        threshold = neuron.threshold
        kw = dict(beta=_value(beta, clamp=learn_beta), threshold=_value(threshold), bias=has_bias,
                  reset=reset, surrogate=_surrogate_of(neuron, where),
                  recurrent=recurrent, learn_beta=learn_beta,
                  learn_threshold=_learned(neuron, "threshold"), name=name,
                  rec_bias=recurrent and neuron.recurrent.bias is not None, **options)
        if synaptic:
            learn_alpha = _learned(neuron, "alpha")
            layer = SynapticLayer(n_in, n_out, alpha=_value(neuron.alpha, clamp=learn_alpha),
                                  learn_alpha=learn_alpha, **kw)
        else:
            layer = LIFLayer(n_in, n_out, **kw)
    _copy_learned_decays(layer, neuron)
    with torch.no_grad():
        layer.weight.copy_(linear.weight)
        if has_bias:
            layer.bias.copy_(linear.bias)
        if getattr(layer, "recurrent", False):
            rec = neuron.recurrent
            if tuple(rec.weight.shape) != (n_out, n_out):
                raise ValueError(f"from_snntorch: {where}: recurrent weight "
                                 f"{tuple(rec.weight.shape)}, the layer has {n_out} neurons")
            layer.rec_weight.copy_(rec.weight)
            if rec.bias is not None:
                layer.rec_bias.copy_(rec.bias)
            if not getattr(neuron, "learn_recurrent", True):
                layer.rec_weight.requires_grad_(False)
                if layer.rec_bias is not None:
                    layer.rec_bias.requires_grad_(False)
    for ours, theirs in _paired_parameters(layer, linear, neuron):
        if not theirs.requires_grad:  # frozen there (requires_grad=False): frozen here
            ours.requires_grad_(False)
    return layer


def _snntorch_surrogate(snn, surrogate: surrogate_mod.Surrogate, where: str):
    s = snn.surrogate
    if isinstance(surrogate, surrogate_mod.ATan):
        return s.atan(surrogate.alpha)
    if isinstance(surrogate, surrogate_mod.FastSigmoid):
        return s.fast_sigmoid(surrogate.slope)
    if isinstance(surrogate, surrogate_mod.Sigmoid):
        return s.sigmoid(surrogate.slope)
    if isinstance(surrogate, surrogate_mod.StraightThrough):
        return s.straight_through_estimator()
    raise ValueError(f"to_snntorch: {where}: snnTorch has no surrogate like {surrogate} "
                     "(its triangular surrogate is another function)")


def _param_or_value(t: torch.Tensor):
    value = t.detach().clone()
    return value if value.dim() else value.reshape(())


def to_snntorch(model: Iterable[nn.Module]) -> nn.Sequential:
    """The snnTorch network of an snn_ipu model (module docstring)."""
    snn = _snntorch()
    layers = list(model)
    if not layers:
        raise ValueError("to_snntorch: the model holds no layers")
    out: List[nn.Module] = []
    for index, layer in enumerate(layers):
        where = getattr(layer, "name", type(layer).__name__)
        if not isinstance(layer, (LIFLayer, SynapticLayer, ReadoutLayer)):
            raise ValueError(f"to_snntorch: {where} is a {type(layer).__name__}, not an "
                             "snn_ipu layer")
        require_no_input_delay(layer, "to_snntorch")
        if layer.weight.dtype != torch.float32:
            raise ValueError(f"to_snntorch: {where} has {layer.weight.dtype} weights; "
                             "convert the model to float32 first")
        last = index == len(layers) - 1
        if isinstance(layer, ReadoutLayer) and not last:
            # its output is the membrane, which no layer takes as input; the Leaky it
            # becomes would pass spikes on, a network the model never computed
            raise ValueError(f"to_snntorch: {where} is a ReadoutLayer before another layer; "
                             "a readout (its output is the membrane) must be the last layer")
        fc = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
        with torch.no_grad():
            fc.weight.copy_(layer.weight)
            if layer.bias is not None:
                fc.bias.copy_(layer.bias)
        learn_beta = isinstance(layer.beta, nn.Parameter)
        common = dict(beta=_param_or_value(layer.beta), learn_beta=learn_beta,
                      init_hidden=True, output=last)
        if isinstance(layer, ReadoutLayer):
            neuron = snn.Leaky(reset_mechanism="none", **common)
        else:
            if getattr(layer, "grad_window", None) is not None:
                warnings.warn(f"to_snntorch: {where} has grad_window={layer.grad_window}; "
                              "snnTorch computes the exact surrogate gradient", stacklevel=2)
            warn_if_export_loses_drops(layer, "to_snntorch", "snnTorch")
            common.update(threshold=_param_or_value(layer.threshold),
                          learn_threshold=isinstance(layer.threshold, nn.Parameter),
                          reset_mechanism=layer.reset,
                          spike_grad=_snntorch_surrogate(snn, layer.surrogate, where))
            synaptic = isinstance(layer, SynapticLayer)
            if synaptic:
                common.update(alpha=_param_or_value(layer.alpha),
                              learn_alpha=isinstance(layer.alpha, nn.Parameter))
            if layer.recurrent:
                if not synaptic and layer.reset == "zero":
                    raise ValueError(f"to_snntorch: {where}: a recurrent LIFLayer's zero reset "
                                     "is not RLeaky's (which also zeroes the step's input)")
                cls = snn.RSynaptic if synaptic else snn.RLeaky
                neuron = cls(linear_features=layer.out_features, all_to_all=True, **common)
                with torch.no_grad():
                    neuron.recurrent.weight.copy_(layer.rec_weight)
                    if layer.rec_bias is not None:
                        neuron.recurrent.bias.copy_(layer.rec_bias)
                if layer.rec_bias is None:
                    # no recurrent bias, as in the layer: a zero one would be trained
                    neuron.recurrent.register_parameter("bias", None)
            else:
                neuron = (snn.Synaptic if synaptic else snn.Leaky)(**common)
        for ours, theirs in _paired_parameters(layer, fc, neuron):
            theirs.requires_grad_(ours.requires_grad)  # frozen stays frozen
        out += [fc, neuron]
    return nn.Sequential(*out)


def _paired_parameters(layer: nn.Module, fc: nn.Linear, neuron: nn.Module) -> List[tuple]:
    """(ours, snnTorch's) for each parameter of a layer that its nn.Linear and neuron
    hold as parameters too: their ``requires_grad`` is carried both ways."""
    theirs = {"weight": fc.weight, "bias": fc.bias}
    recurrent = getattr(neuron, "recurrent", None)
    if isinstance(recurrent, nn.Linear):
        theirs.update(rec_weight=recurrent.weight, rec_bias=recurrent.bias)
    for pname in ("beta", "threshold", "alpha"):
        theirs[pname] = getattr(neuron, pname, None)
    return [(ours, theirs[pname]) for pname, ours in layer.named_parameters(recurse=False)
            if isinstance(theirs.get(pname), nn.Parameter)]
