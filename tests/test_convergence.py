"""Sparse gradients train as well as exact ones (Finkbeiner et al. 2024's claim).

Two trainings of the ``python -m snn_ipu train`` model on the built-in Randman task
from the same seed, weights and batch order, both on the emulator backend: both LIF
hidden layers with ``grad_window=GRAD_WINDOW`` (sparse backward) against
``grad_window=None`` (exact). The output is the CLI's non-spiking ``ReadoutLayer``
(max-over-time membrane cross-entropy), which has no window because it never spikes,
so every spiking layer is windowed. After the same number of epochs the sparse run's
test accuracy must be within one percentage point of the exact run's, and the exact
run must have clearly learnt (chance is 10%), so that the comparison means something.

Configuration: the CLI's model (``snn_ipu.training.build_model``, 100-128-128-10, T=50,
Adam lr 3e-3, batch 64, 12 epochs, 1200 training samples) except the data split: 200
samples per class with 40% held out, so the test set has 800 samples and one point is
8 samples (the CLI's 150 / 20% gives 300). About 12 s for both trainings on one core
(single-threaded); with the emulator's two threads while the other core was busy with
another process it took 75-120 s.

Measured when this test was written (one thread; the same numbers for SEED=0 with two),
exact -> windowed test accuracy, gap in points:

    seed 0  0.9875 -> 0.9887  +0.12      seed 5  0.9887 -> 0.9837  -0.50
    seed 1  0.9862 -> 0.9912  +0.50      seed 6  0.9900 -> 0.9950  +0.50
    seed 2  0.9925 -> 0.9925  +0.00      seed 7  0.9862 -> 0.9912  +0.50
    seed 3  0.9800 -> 0.9937  +1.37      seed 8  0.9925 -> 0.9837  -0.88
    seed 4  0.9825 -> 0.9800  -0.25      seed 9  0.9775 -> 0.9862  +0.87

All ten seeds within one point (mean +0.22, worst -0.88); the CLI's own split (300
test samples) gave gaps from 0.00 to +1.33 over seeds 0-7. This holds once training has
(nearly) converged. Stopped early, windowed training lags: 6 epochs gave -4.0 to 0.0
points (seeds 0-4), and with only 300 training samples (64 hidden, 8 epochs, ~55%) it
lagged by 8-14 points on every seed; at 40 epochs there the gap was -3.3 to +4.0.
Windowing a spiking output layer (``--output spikes``) instead kills learning
(0.93-0.97 exact vs 0.35-0.44 windowed): output neurons far below threshold never get
a gradient. Windowing only the hidden layers of that model gave +0.7 to +3.3 points.
"""

import pytest
import torch

from snn_ipu import losses
from snn_ipu.data.randman import batches, make_randman, split
from snn_ipu.training import TrainConfig, build_model

pytest.importorskip("snn_ipu._native", reason="the emulator's C++ extension is not built")
pytest.importorskip("snn_ipu.backends.emulator")

SEED = 0
GRAD_WINDOW = 0.1  # x threshold (= 1)
DATA = dict(num_classes=10, num_inputs=100, num_steps=50, num_samples_per_class=200,
            dim_manifold=1, alpha=2.0, seed=SEED)
TEST_FRACTION = 0.4  # 800 test samples: one percentage point is 8 samples
HIDDEN = 128
EPOCHS = 12
BATCH = 64
LR = 3e-3
MIN_EXACT = 0.95  # exact reaches 0.978-0.993 over seeds 0-9; chance is 0.1


def _train(grad_window, train_set, test_set):
    torch.manual_seed(SEED)
    config = TrainConfig(hidden=[HIDDEN, HIDDEN], readout="membrane", grad_window=grad_window,
                         backend="emulator")
    model = build_model(config, DATA["num_inputs"], DATA["num_classes"])
    spiking = [m for m in model if hasattr(m, "threshold")]
    assert len(spiking) == 2 and all(m.grad_window == grad_window for m in spiking)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    order = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        for x, y in batches(train_set.spikes, train_set.labels, BATCH, shuffle=True,
                            generator=order):
            loss = losses.ce_membrane_loss(model(x), y, time_reduction="max")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        x_test = test_set.spikes.transpose(0, 1).contiguous()
        return losses.accuracy(model(x_test), test_set.labels, time_reduction="max")


def test_sparse_gradients_match_exact_accuracy():
    spikes, labels = make_randman(**DATA)
    train_set, test_set = split(spikes, labels, test_fraction=TEST_FRACTION)
    assert len(test_set) >= 500, "one percentage point must be several test samples"
    exact = _train(None, train_set, test_set)
    sparse = _train(GRAD_WINDOW, train_set, test_set)
    chance = 1.0 / DATA["num_classes"]
    assert exact >= MIN_EXACT, f"exact training did not learn: {exact:.3f} (chance {chance:.2f})"
    assert sparse >= exact - 0.01, (
        f"grad_window={GRAD_WINDOW}: test accuracy {sparse:.4f} vs exact {exact:.4f} "
        f"after {EPOCHS} epochs ({len(test_set)} test samples)"
    )
