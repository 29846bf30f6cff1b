"""Every documented training setup under the ``ipu`` backend, checked against PopART
3.4's autodiff rules (tests/popart_autodiff.py has the rules and their sources): each
parameter must get a gradient, or PopART leaves it untrained without a word.

The model is traced as PopTorch traces it (the stand-in PopTorch of
tests/poptorch_standin.py, at the dispatcher's level), the custom ops with the
gradients their grad ops give (popops_ext/poplar/OpSignatures.hpp)."""

import pytest
import torch
import torch.nn.functional as F
from popart_autodiff import Graph, grown_gradients, signature_map, trace, untrained_parameters
from poptorch_standin import install

from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer, losses, regularizers
from snn_ipu.poptorch_training import WithLoss, predict_class

_graph = pytest.importorskip("snn_ipu._graph", reason="needs the native extension")
SIGNATURES = signature_map(_graph.op_signatures(), _graph.op_grad_outputs)
pytestmark = pytest.mark.filterwarnings("ignore:.*the host learns of it only through")

T, B, IN, HIDDEN, CLASSES = 6, 4, 12, 16, 3


def hidden(kind="lif", **kw):
    common = dict(grad_window=0.5, max_spikes=8, overflow="drop", backend="ipu")
    common.update(kw)
    if kind == "synaptic":
        return SynapticLayer(IN, HIDDEN, learn_alpha=True, learn_beta=True, **common)
    return LIFLayer(IN, HIDDEN, **common)


def spiking_output():
    return LIFLayer(HIDDEN, CLASSES, max_spikes=CLASSES, overflow="drop", backend="ipu",
                    name="output")


class WithHidden(torch.nn.Module):
    """hidden -> output, returning both (for the regularisers on the hidden list)."""

    def __init__(self, first, last):
        super().__init__()
        self.first, self.last = first, last

    def forward(self, x):
        h = self.first(x)
        return h, self.last(h)


def membrane(loss):
    return lambda out, y: loss(out, y)


SETUPS = {
    # readout="membrane": every membrane loss
    "membrane/ce_membrane_loss": (lambda: [hidden(), ReadoutLayer(HIDDEN, CLASSES, backend="ipu")],
                                  lambda out, y: losses.ce_membrane_loss(out, y, "max")),
    "membrane/mse_membrane_loss": (lambda: [hidden(), ReadoutLayer(HIDDEN, CLASSES,
                                                                   backend="ipu")],
                                   lambda out, y: losses.mse_membrane_loss(out, y)),
    # readout="spikes" (snn-ipu train --readout spikes): every spike loss
    "spikes/ce_count_loss": (lambda: [hidden(), spiking_output()], losses.ce_count_loss),
    "spikes/ce_rate_loss": (lambda: [hidden(), spiking_output()], losses.ce_rate_loss),
    "spikes/mse_count_loss": (lambda: [hidden(), spiking_output()], losses.mse_count_loss),
    # spike_counts() / to_dense() on an output list, by hand
    "spikes/spike_counts": (lambda: [hidden(), spiking_output()],
                            lambda out, y: F.cross_entropy(out.spike_counts(), y)),
    "spikes/to_dense": (lambda: [hidden(), spiking_output()],
                        lambda out, y: F.cross_entropy(out.to_dense().amax(0), y)),
    # recurrent and synaptic hidden layers
    "recurrent/ce_membrane_loss": (
        lambda: [hidden(recurrent=True), ReadoutLayer(HIDDEN, CLASSES, backend="ipu")],
        lambda out, y: losses.ce_membrane_loss(out, y, "max")),
    "synaptic/ce_count_loss": (lambda: [hidden("synaptic"), spiking_output()],
                               losses.ce_count_loss),
    "recurrent/ce_count_loss": (lambda: [hidden(recurrent=True, learn_threshold=True),
                                         spiking_output()], losses.ce_count_loss),
}

REGULARISERS = {
    "l1_rate_sparsity": lambda h: regularizers.l1_rate_sparsity(h, 1e-3),
    "lower_rate_penalty": lambda h: regularizers.lower_rate_penalty(h, 0.05),
    "upper_rate_penalty": lambda h: regularizers.upper_rate_penalty(h, 0.1),
}


def traced(monkeypatch, net, loss_fn, predict=predict_class) -> Graph:
    poptorch = install(monkeypatch)
    torch.manual_seed(0)
    model = WithLoss(net, loss_fn, predict)
    x = (torch.rand(B, T, IN) < 0.3).float()
    y = torch.randint(0, CLASSES, (B,))
    return trace(poptorch, model, x, y, signatures=SIGNATURES)


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_every_parameter_gets_a_gradient(monkeypatch, setup):
    layers, loss_fn = SETUPS[setup]
    graph = traced(monkeypatch, torch.nn.Sequential(*layers()), loss_fn)
    untrained = untrained_parameters(graph)
    assert untrained == [], f"{setup}: PopART would not train {untrained}"
    assert len(graph.params) >= 4


@pytest.mark.parametrize("readout", ["membrane", "spikes"])
@pytest.mark.parametrize("regulariser", sorted(REGULARISERS))
def test_regularisers_on_a_hidden_list(monkeypatch, readout, regulariser):
    last = (ReadoutLayer(HIDDEN, CLASSES, backend="ipu") if readout == "membrane"
            else spiking_output())
    main = (lambda out, y: losses.ce_membrane_loss(out, y, "max")) if readout == "membrane" \
        else losses.ce_count_loss
    penalty = REGULARISERS[regulariser]

    def loss_fn(out, y):
        h, o = out
        return main(o, y) + penalty(h)

    graph = traced(monkeypatch, WithHidden(hidden(), last), loss_fn,
                   predict=lambda out: predict_class(out[1]))
    assert untrained_parameters(graph) == []


@pytest.mark.parametrize("readout", ["membrane", "spikes"])
def test_the_recipes_list_input(monkeypatch, readout):
    """The recipe's input: the DataLoader's ids/counts, made a list in the model
    (WithLoss(num_inputs=...)); they are data, and need no gradient."""
    from snn_ipu import SparseSpikes

    poptorch = install(monkeypatch)
    last = (ReadoutLayer(HIDDEN, CLASSES, backend="ipu") if readout == "membrane"
            else spiking_output())
    loss_fn = (lambda out, y: losses.ce_membrane_loss(out, y, "max")) if readout == "membrane" \
        else losses.ce_count_loss
    model = WithLoss(torch.nn.Sequential(hidden(), last), loss_fn, num_inputs=IN)
    listed = SparseSpikes.from_dense((torch.rand(T, B, IN) < 0.3).float())
    graph = trace(poptorch, model, listed.ids.transpose(0, 1), listed.counts.transpose(0, 1),
                  torch.randint(0, CLASSES, (B,)), signatures=SIGNATURES)
    assert untrained_parameters(graph) == []
    first = [n for n in graph.nodes if n.name == "SnnSpikingLayer"][0]
    assert graph.dtypes[first.inputs[0]] == torch.int32


def test_the_rules_see_an_index_path(monkeypatch):
    """The check can fail: a loss that reaches the last spiking op only through its
    integer ids (a scatter of the list's values, as to_dense() did before the ipu
    backend listed them on the device) fails that op's gradient and, through
    in_ids/in_counts, every layer before it (R2-R4)."""
    def by_hand(out, y):
        dense = out.values.new_zeros(out.dense_shape).scatter_add(-1, out.ids.long(), out.values)
        return F.cross_entropy(dense.sum(0), y)

    graph = traced(monkeypatch, torch.nn.Sequential(hidden(), spiking_output()), by_hand)
    assert sorted(untrained_parameters(graph)) == ["net.0.bias", "net.0.weight", "net.1.bias",
                                                 "net.1.weight"]


def test_the_rules_on_small_graphs():
    """R2/R3 by hand: a tensor with one consumer that gives a gradient and one that
    does not is complete; with none, its producer fails and so do that op's inputs."""
    from popart_autodiff import Node

    # w -> A -> a ; a -> B(float) -> loss ; a -> C(index) -> loss
    g = Graph(nodes=[Node("A", [0], [1], {0}), Node("B", [1], [2], {0}),
                     Node("C", [1, 2], [3], {1}), Node("loss", [3], [4], {0})],
              producer={1: 0, 2: 1, 3: 2, 4: 3}, params={"w": 0}, loss=4)
    assert 0 in grown_gradients(g)
    # a reaches the loss only as an index: A fails, w gets nothing
    g2 = Graph(nodes=[Node("A", [0], [1], {0}), Node("C", [1, 5], [3], {1}),
                      Node("loss", [3], [4], {0})],
               producer={1: 0, 3: 1, 4: 2}, params={"w": 0, "v": 5}, loss=4)
    assert untrained_parameters(g2) == ["w"]


def test_the_data_fed_layer_gives_its_input_no_gradient(monkeypatch):
    """The first layer's input is the network's data: its op is traced with
    input_needs_grad=0, so its grad op gives in_values no gradient (R5), the next
    layer's op gives its input list one, and still every parameter trains (R2-R6)."""
    layers, loss_fn = SETUPS["spikes/ce_count_loss"]
    graph = traced(monkeypatch, torch.nn.Sequential(*layers()), loss_fn)
    values = SIGNATURES["SnnSpikingLayer"]["inputs"].index("in_values")
    spiking = [n for n in graph.nodes if n.name == "SnnSpikingLayer"]
    assert len(spiking) == 2
    assert values not in spiking[0].grad_inputs and values in spiking[1].grad_inputs
    assert untrained_parameters(graph) == []



@pytest.mark.parametrize("readout", ["membrane", "spikes"])
@pytest.mark.parametrize("frozen_middle", [False, True])
def test_a_pipelined_network_trains_every_layer(monkeypatch, readout, frozen_middle):
    """snn_ipu.pipeline: each layer after the first reads its input list one step late
    (a slice and a concatenation of the op's list, snn_ipu.pipelining.delayed). The
    delayed list is still an op's: the next op builds its input gradient and (frozen or
    not) lists its window, so PopART trains every layer before it. It lost that mark:
    the ops after the first were built with input_needs_grad=0 and only the last layer
    trained (net.0 and net.1 untrained)."""
    from snn_ipu import pipeline

    torch.manual_seed(0)
    middle = LIFLayer(HIDDEN, HIDDEN, grad_window=0.3, max_spikes=8, overflow="drop",
                      backend="ipu")
    if frozen_middle:
        for p in middle.parameters():
            p.requires_grad_(False)
    last = (ReadoutLayer(HIDDEN, CLASSES, backend="ipu") if readout == "membrane"
            else spiking_output())
    loss_fn = (lambda out, y: losses.ce_membrane_loss(out, y, "max")) if readout == "membrane" \
        else losses.ce_count_loss
    net = torch.nn.Sequential(hidden(), middle, last)
    assert len(pipeline(net)) == 2
    poptorch = install(monkeypatch)
    model = WithLoss(net, loss_fn)
    graph = trace(poptorch, model, (torch.rand(B, T, IN) < 0.3).float(),
                  torch.randint(0, CLASSES, (B,)), signatures=SIGNATURES)
    ops = [c for c in poptorch.custom_op_calls if c["phase"] == "trace"][:3]
    assert [c["attributes"]["input_needs_grad"] for c in ops] == [0, 1, 1]
    assert ops[1]["attributes"]["grad_window"] == pytest.approx(0.3)
    untrained = untrained_parameters(graph)
    trainable = [n for n, p in net.named_parameters() if p.requires_grad]
    assert [n for n in untrained if n[len("net."):] in trainable] == []
    assert untrained == [] or frozen_middle
