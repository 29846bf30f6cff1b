"""Train a sparse spiking network on the built-in Randman task with the public API.

The task (Zenke & Vogels 2021): each of 10 classes is a random smooth 1-d manifold in
100-d space; a sample is a point on it, and input neuron i fires once, at a time given
by coordinate i. The class is in spike *timing* only (every sample has 100 spikes).

Network: 100 inputs -> 128 LIF -> 128 LIF -> 10 leaky readout neurons; loss: cross-
entropy of the readout's peak membrane (snnTorch's ``ce_max_membrane_loss``).

    make build   # or: pip install -e . && python setup.py build_ext --inplace
    python examples/train_randman.py   # ~95% test accuracy after 10 epochs

A snnTorch user would write ``nn.Linear`` + ``snn.Leaky`` and loop over time; here each
layer takes the whole sequence (dense ``[T, B, in]`` or SparseSpikes) and returns
SparseSpikes, so the time loop runs in the backend.
"""

import math

import torch
from torch import nn

from snn_ipu import LIFLayer, ReadoutLayer
from snn_ipu.data import batches, make_randman, split
from snn_ipu.losses import accuracy, ce_membrane_loss

torch.manual_seed(0)
spikes, labels = make_randman(num_classes=10, num_inputs=100, num_steps=50, seed=0)
train_set, test_set = split(spikes, labels, test_fraction=0.2)

model = nn.Sequential(
    LIFLayer(100, 128, beta=0.9),  # grad_window=0.5 would make the backward pass sparse
    LIFLayer(128, 128, beta=0.9),
    ReadoutLayer(128, 10, beta=0.9),
)
# Stronger-than-default init: inputs are sparse (2 spikes per step on average), and
# torch's uniform(+-1/sqrt(fan_in)) would leave the hidden layers silent.
with torch.no_grad():
    for layer in model:
        nn.init.normal_(layer.weight, 0.0, 3.0 / math.sqrt(layer.in_features))
        layer.bias.zero_()

optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
shuffle = torch.Generator().manual_seed(0)

for epoch in range(10):
    for x, y in batches(train_set.spikes, train_set.labels, 64, shuffle=True, generator=shuffle):
        membrane = model(x)  # x: [T, B, 100] -> membrane [T, B, 10]
        loss = ce_membrane_loss(membrane, y, time_reduction="max")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        x_test = test_set.spikes.transpose(0, 1)  # time-major [T, N, 100]
        test_acc = accuracy(model(x_test), test_set.labels, time_reduction="max")
    activity = ", ".join(f"{m.stats['activity']:.3f}" for m in model[:2])
    print(f"epoch {epoch}: loss {loss.item():.3f}, test acc {test_acc:.3f}, "
          f"hidden activity {activity}")
