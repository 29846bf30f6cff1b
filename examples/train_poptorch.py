"""Train a 2-layer LIF + readout network on an IPU with PopTorch (Poplar SDK 3.2-3.4).

    source <sdk>/enable.sh; pip install <sdk>/poptorch-*.whl
    cmake -S popops_ext/poplar -B build/ipu && cmake --build build/ipu   # the custom ops
    python examples/train_poptorch.py            # on the IPUModel where there is no IPU
    python examples/train_poptorch.py --ipus 4   # data parallel over 4 IPUs

The data is the built-in Randman task (snn_ipu.data): samples ``(spikes [T, 100],
label)``. Every PopTorch idiom is spelled out here; snn_ipu.poptorch_training.train
runs the same loop (it is what ``snn-ipu train --backend ipu`` uses).
"""

import argparse
import math

import poptorch
import torch

from snn_ipu import LIFLayer, ReadoutLayer, ipu_overflow
from snn_ipu.data import make_randman, split
from snn_ipu.losses import ce_membrane_loss
from snn_ipu.poptorch_training import WithLoss, evaluate

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32, help="micro-batch per replica")
parser.add_argument("--device-iterations", type=int, default=4)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
parser.add_argument("--ipus", type=int, default=1, help="replicas (data parallel)")
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--max-spikes", type=int, default=64, help="list capacity per step")
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--samples-per-class", type=int, default=150)
parser.add_argument("--checkpoint", default="snn_poptorch.pt")
args = parser.parse_args()

torch.manual_seed(0)
spikes, labels = make_randman(num_classes=10, num_inputs=100, num_steps=args.steps,
                              num_samples_per_class=args.samples_per_class, seed=0)
train_set, test_set = split(spikes, labels, test_fraction=0.2)

# Static shapes on the IPU: every spiking layer has a list capacity (max_spikes) and a
# gradient window, so that the backward pass stays sparse. overflow="error" is checked
# on the host after every call (ipu_overflow.record below).
net = torch.nn.Sequential(
    LIFLayer(100, args.hidden, grad_window=0.5, max_spikes=args.max_spikes, overflow="error"),
    LIFLayer(args.hidden, args.hidden, grad_window=0.5, max_spikes=args.max_spikes,
             overflow="error"),
    ReadoutLayer(args.hidden, 10),
)
with torch.no_grad():  # sparse input (2 spikes per step): a stronger start than torch's
    for layer in net:
        torch.nn.init.normal_(layer.weight, 0.0, 3.0 / math.sqrt(layer.in_features))
        layer.bias.zero_()


def loss_fn(membrane, target):
    return ce_membrane_loss(membrane, target, time_reduction="max")


# The network, its loss (returned through poptorch.identity_loss) and its overflow
# counts in one module, as PopTorch compiles it; it transposes the DataLoader's
# [B, T, in] to the layers' [T, B, in].
model = WithLoss(net, loss_fn)


def options(training: bool) -> poptorch.Options:
    opts = poptorch.Options()
    opts.useIpuModel(not poptorch.ipuHardwareIsAvailable(args.ipus))  # no-hardware switch
    opts.randomSeed(0)
    opts.deviceIterations(args.device_iterations)  # steps per host call
    opts.replicationFactor(args.ipus)  # each replica runs the whole program, ops included
    opts.outputMode(poptorch.OutputMode.All)  # every micro-batch's overflow counts
    if training:
        opts.Training.gradientAccumulation(args.accumulate)
    return opts


train_opts, eval_opts = options(True), options(False)
# Batches of batch_size x device iterations x replicas x accumulation per host call.
train_loader = poptorch.DataLoader(train_opts, train_set, batch_size=args.batch_size,
                                   shuffle=True, drop_last=True)
test_loader = poptorch.DataLoader(eval_opts, test_set, batch_size=args.batch_size)

optimizer = poptorch.optim.Adam(model.parameters(), lr=3e-3)
training_model = poptorch.trainingModel(model, options=train_opts, optimizer=optimizer)
inference_model = poptorch.inferenceModel(model, options=eval_opts)

for epoch in range(1, args.epochs + 1):
    for x, y in train_loader:
        predictions, loss, counts = training_model(x, y)
        ipu_overflow.record(net, counts)  # layer.stats; raises for overflow="error"
    training_model.copyWeightsToHost()  # the IPU holds the weights until now
    torch.save({"epoch": epoch, "model": net.state_dict(),
                "optimizer": optimizer.state_dict()}, args.checkpoint)
    training_model.detachFromDevice()  # free the IPU(s) for the inference model
    test_acc = evaluate(inference_model, test_loader, net)
    inference_model.detachFromDevice()
    activity = ", ".join(f"{layer.stats['activity']:.3f}" for layer in net[:2])
    print(f"epoch {epoch}: loss {float(loss.mean()):.3f}, test acc {test_acc:.3f}, "
          f"hidden activity {activity}, lists need up to "
          f"{max(layer.stats['needed_capacity'] for layer in net[:2])} entries")

# Resume later: net.load_state_dict(torch.load(args.checkpoint)["model"]) before wrapping.
