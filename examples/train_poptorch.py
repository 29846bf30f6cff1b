"""Train a 2-layer LIF + readout network on an IPU with PopTorch (Poplar SDK 3.2-3.4).

    source <sdk>/enable.sh; pip install <sdk>/poptorch-*.whl
    cmake -S popops_ext/poplar -B build/ipu && cmake --build build/ipu   # the custom ops
    python examples/train_poptorch.py            # on the IPUModel where there is no IPU
    python examples/train_poptorch.py --ipus 4   # data parallel over 4 IPUs

The data is the built-in Randman task (snn_ipu.data), fed to the IPU as spike lists
(snn_ipu.data.SpikeLists: ``ids [T, K]``, ``counts [T, 2]`` per sample, K the busiest
step of the data), so that the first layer's list holds K entries, not 100. Every
PopTorch idiom is spelled out here; snn_ipu.poptorch_training.train runs the same loop
(it is what ``snn-ipu train --backend ipu`` uses).

    python examples/train_poptorch.py --resume snn_poptorch.pt --epochs 20  # carry on
"""

import argparse
import math
import time

import poptorch
import torch

from snn_ipu import LIFLayer, ReadoutLayer, ipu_overflow
from snn_ipu.data import SpikeLists, collate_dense, make_randman, split
from snn_ipu.losses import ce_membrane_loss
from snn_ipu.poptorch_training import Padded, WithLoss, evaluate

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
parser.add_argument("--resume", help="a checkpoint to continue from (weights, optimizer, epoch)")
parser.add_argument("--cache", default="poptorch_cache",
                    help="PopTorch's executable cache: a second run skips compilation")
args = parser.parse_args()

torch.manual_seed(0)
spikes, labels = make_randman(num_classes=10, num_inputs=100, num_steps=args.steps,
                              num_samples_per_class=args.samples_per_class, seed=0)
dense_train, dense_test = split(spikes, labels, test_fraction=0.2)
# Spike lists, listed one sample at a time; K: the busiest step of either set.
train_set = SpikeLists(dense_train, collate_dense, datasets=(dense_test,))
test_set = SpikeLists(dense_test, collate_dense, capacity=train_set.capacity)
print(f"input lists hold {train_set.capacity} of 100 inputs per step")

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
# counts in one module, as PopTorch compiles it; it makes the DataLoader's batch-first
# ids [B, T, K] and counts [B, T, 2] the first layer's time-major list of 100 inputs.
model = WithLoss(net, loss_fn, num_inputs=100)


def options(training: bool) -> poptorch.Options:
    opts = poptorch.Options()
    opts.useIpuModel(not poptorch.ipuHardwareIsAvailable(args.ipus))  # no-hardware switch
    opts.randomSeed(0)
    opts.deviceIterations(args.device_iterations)  # steps per host call
    opts.replicationFactor(args.ipus)  # each replica runs the whole program, ops included
    opts.outputMode(poptorch.OutputMode.All)  # every micro-batch's overflow counts
    opts.enableExecutableCaching(args.cache)  # compiled once, loaded from here after
    if training:
        opts.Training.gradientAccumulation(args.accumulate)
    return opts


train_opts, eval_opts = options(True), options(False)
# Batches of batch_size x device iterations x replicas x accumulation per host call,
# prepared by a worker while the IPU runs (Async). A compiled model takes whole
# batches: training drops the remainder (reshuffled each epoch); the test set is padded
# with samples labelled -1, which evaluate() does not count, so every sample is scored.
train_loader = poptorch.DataLoader(train_opts, train_set, batch_size=args.batch_size,
                                   shuffle=True, drop_last=True,
                                   mode=poptorch.DataLoaderMode.Async)
eval_batch = args.batch_size * args.device_iterations * args.ipus
test_loader = poptorch.DataLoader(eval_opts, Padded(test_set, eval_batch),
                                  batch_size=args.batch_size, drop_last=True,
                                  mode=poptorch.DataLoaderMode.Async)

optimizer = poptorch.optim.Adam(model.parameters(), lr=3e-3)
first_epoch = 1
if args.resume:  # before wrapping: PopTorch uploads weights and optimizer state on compile
    saved = torch.load(args.resume)
    net.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    first_epoch = saved["epoch"] + 1
training_model = poptorch.trainingModel(model, options=train_opts, optimizer=optimizer)
inference_model = poptorch.inferenceModel(model, options=eval_opts)

# Compile both ahead of time (or load them from the cache), on one batch's shapes.
start = time.perf_counter()
ids, counts, y = torch.utils.data.default_collate(
    [train_set[i] for i in range(train_loader.combinedBatchSize)])
training_model.compile(ids, counts, y)
training_model.detachFromDevice()
inference_model.compile(ids[:test_loader.combinedBatchSize], counts[:test_loader.combinedBatchSize])
inference_model.detachFromDevice()
print(f"compiled in {time.perf_counter() - start:.1f}s")

for epoch in range(first_epoch, args.epochs + 1):
    losses, rows = [], []
    for ids, counts, y in train_loader:
        predictions, loss, overflow = training_model(ids, counts, y)
        ipu_overflow.record(net, overflow)  # layer.stats; raises for overflow="error"
        losses.append(float(loss.mean()))
        rows.append(overflow)  # every micro-batch's (OutputMode.All)
    training_model.copyWeightsToHost()  # the IPU holds the weights until now
    torch.save({"epoch": epoch, "model": net.state_dict(),
                "optimizer": optimizer.state_dict()}, args.checkpoint)
    training_model.detachFromDevice()  # free the IPU(s) for the inference model
    test_acc = evaluate(inference_model, test_loader, net)
    inference_model.detachFromDevice()
    # the epoch's training lists, from all its rows (layer.stats: the last call's only,
    # here a test batch)
    lists = ipu_overflow.totals(net, torch.cat(rows))
    activity = ", ".join(f"{lists[layer.name]['activity']:.3f}" for layer in net[:2])
    print(f"epoch {epoch}: loss {sum(losses) / len(losses):.3f}, test acc {test_acc:.3f} "
          f"({len(test_set)} samples), hidden activity {activity}, lists need up to "
          f"{max(lists[layer.name]['needed_capacity'] for layer in net[:2])} entries")
