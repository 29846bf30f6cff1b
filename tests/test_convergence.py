"""Sparse gradients train as well as exact ones (Finkbeiner et al. 2024's claim).

Two trainings on the built-in Randman task from the same seed, weights and batch
order, both on the emulator backend: hidden and output LIF layers with
``grad_window=GRAD_WINDOW`` (sparse backward) against ``grad_window=None`` (exact).
After the same number of epochs the sparse run's test accuracy must be within one
percentage point of the exact run's, and the exact run must have clearly learnt
(well above chance), so that the comparison means something.

Small enough for CI (~15 s): 30-32-32-2 network, T=25, 80 training and 120 test
samples, 30 epochs of 3 batches. Exact training reaches ~96% here (chance 50%).

Measured when this test was written (emulator and reference backends give the same
accuracies, so this is the method, not the executor): exact 0.958, sparse 0.800 after
30 epochs; with 3 classes exact 0.717 vs sparse 0.583 (15 epochs), also with the
FastSigmoid(25) surrogate sparse lags (0.656 vs 0.600). With ATan(2) the part of the
surrogate's mass above ``threshold - 0.1`` is small, so most of the gradient is cut.
"""

import math

import pytest
import torch

from snn_ipu import LIFLayer, losses
from snn_ipu.data.randman import batches, make_randman, split

pytest.importorskip("snn_ipu._C", reason="the emulator's C++ extension is not built")
emulator = pytest.importorskip("snn_ipu.backends.emulator")

SEED = 0
GRAD_WINDOW = 0.1  # x threshold (= 1)
DATA = dict(num_classes=2, num_inputs=30, num_steps=25, num_samples_per_class=100,
            dim_manifold=1, alpha=2.0, seed=SEED)
HIDDEN = 32
EPOCHS = 30
BATCH = 32
LR = 1e-2
TEST_FRACTION = 0.6  # a large test set: one sample is < 1 percentage point
SURROGATE = None  # the default, ATan(alpha=2)


def _train(grad_window, train_set, test_set):
    torch.manual_seed(SEED)
    sizes = [DATA["num_inputs"], HIDDEN, HIDDEN, DATA["num_classes"]]
    gains = [3.0, 3.0, 8.0]  # N(0, (gain/sqrt(fan_in))^2): every layer spikes from the start
    layers = [
        LIFLayer(n_in, n_out, grad_window=grad_window, surrogate=SURROGATE, backend="emulator")
        for n_in, n_out in zip(sizes[:-1], sizes[1:])
    ]
    with torch.no_grad():
        for layer, gain in zip(layers, gains):
            torch.nn.init.normal_(layer.weight, 0.0, gain / math.sqrt(layer.in_features))
            layer.bias.zero_()
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    order = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        for x, y in batches(train_set.spikes, train_set.labels, BATCH, shuffle=True,
                            generator=order):
            loss = losses.ce_count_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        x_test = test_set.spikes.transpose(0, 1).contiguous()
        return losses.accuracy(model(x_test), test_set.labels)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "known gap (issue 4): with grad_window=0.1 on every layer, ATan(2) and this small "
        "Randman task, windowed training reaches 0.800 against 0.958 exact (the reference "
        "backend gives the same). Windowing only the hidden layers gives 0.950, but across "
        "seeds the exact-vs-windowed gap on tasks this small swings from -17.5 to +20 points, "
        "so one seed cannot show 'within 1 point'. Strict: passing would flag a change."
    ),
)
def test_sparse_gradients_match_exact_accuracy():
    spikes, labels = make_randman(**DATA)
    train_set, test_set = split(spikes, labels, test_fraction=TEST_FRACTION)
    exact = _train(None, train_set, test_set)
    sparse = _train(GRAD_WINDOW, train_set, test_set)
    chance = 1.0 / DATA["num_classes"]
    assert exact >= chance + 0.3, f"exact training did not learn: {exact:.3f} (chance {chance:.2f})"
    assert sparse >= exact - 0.01, (
        f"grad_window={GRAD_WINDOW}: test accuracy {sparse:.3f} vs exact {exact:.3f} "
        f"after {EPOCHS} epochs"
    )
