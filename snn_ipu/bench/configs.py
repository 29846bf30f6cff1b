"""What the training benchmark runs: the networks, the backends and the neuron constants.

Every backend trains the same network ``in -> h -> h -> out`` of LIF neurons
(subtract reset, ATan surrogate) with the same weights and inputs, so that their step
times compare like for like.
"""

from __future__ import annotations

from typing import Dict, Tuple

#: Network sizes (inputs, hidden, hidden, outputs), timesteps T and batch B. S and L run
#: on calibrated random weights at each of ``--activities``; a config with ``train`` is a
#: network in training (:mod:`.trained`): trained by ``snn-ipu train``'s trainer with
#: these settings (beta, threshold and the output layer as the benchmark's), then timed
#: at its own weights, on a batch of its own test samples, at the activity it has.
CONFIGS: Dict[str, dict] = {
    "S": dict(sizes=(700, 256, 256, 20), T=100, B=64),
    "L": dict(sizes=(2312, 1466, 1466, 10), T=100, B=48),
    # S on an SHD-shaped task: randman with SHD's 700 channels and 20 classes, one spike
    # per input neuron per sample (1% of the inputs per step at T=100)
    "S-trained": dict(sizes=(700, 256, 256, 20), T=100, B=64,
                      train=dict(data="randman", randman_inputs=700, randman_classes=20,
                                 randman_samples_per_class=100, epochs=3)),
    # L on an N-MNIST-shaped task: randman with N-MNIST's 2 x 34 x 34 channels and 10
    # classes, one spike per input neuron per sample. The trainer's default initial scale
    # (3 / sqrt(fan_in)) drives L's second hidden layer to 25% and its output to 80%, and
    # it stays at chance; at 1.5 and Adam at 1e-3 it learns (84% test accuracy in 3 epochs)
    "L-trained": dict(sizes=(2312, 1466, 1466, 10), T=100, B=48,
                      train=dict(data="randman", randman_inputs=2312, randman_classes=10,
                                 randman_samples_per_class=100, epochs=3, weight_scale=1.5,
                                 lr=1e-3)),
    # `make train`'s network (digits, 2 x 128 hidden), with a spiking output layer
    "digits-trained": dict(sizes=(128, 128, 128, 10), T=10, B=64,
                           train=dict(data="digits", epochs=3)),
}

#: Our two emulator settings, our dense reference, and the dense peers.
BACKENDS: Tuple[str, ...] = (
    "emulator_sparse",  # emulator, grad_window = SPARSE_WINDOW
    "emulator_exact",   # emulator, grad_window = None (exact gradients)
    "reference",        # our dense PyTorch backend
    "spikingjelly",     # SpikingJelly 2.0 multi-step LIFNode (torch CPU path)
    "torch_loop",       # nn.Linear on all steps + a plain Python loop over T
    "torch_compile_step",  # the torch loop with its one-step neuron cell compiled
    "torch_compile",    # the torch loop's layers, T unrolled, under torch.compile
    "snntorch",         # nn.Linear + snntorch.Leaky, Python loop over T
)
#: The emulator's two settings, whose speed-up over the dense backends is reported.
OURS: Tuple[str, ...] = ("emulator_sparse", "emulator_exact")
#: Dense backends: their cost does not depend on activity (see ``--baseline-timing``).
DENSE_BASELINES: Tuple[str, ...] = ("reference", "spikingjelly", "torch_loop",
                                     "torch_compile_step", "torch_compile", "snntorch")
#: The package (or extension) each backend needs; one import check per family.
FAMILY: Dict[str, str] = {
    "emulator_sparse": "emulator", "emulator_exact": "emulator", "reference": "reference",
    "spikingjelly": "spikingjelly", "torch_loop": "torch_loop", "snntorch": "snntorch",
    "torch_compile": "torch_compile", "torch_compile_step": "torch_compile",
}
#: Run only when ``--backends`` names them: compiling a layer's T unrolled steps takes
#: minutes per layer shape (965 s for S's three at T=100 on one core).
OPT_IN: Tuple[str, ...] = ("torch_compile",)
#: Also left out of ``--quick`` unless named: the per-step cell compiles in tens of
#: seconds, as long as the rest of a quick run.
SLOW_TO_BUILD: Tuple[str, ...] = ("torch_compile", "torch_compile_step")

DEFAULT_ACTIVITIES: Tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.3)
QUICK_ACTIVITIES: Tuple[float, ...] = (0.02, 0.1)

BETA, THRESHOLD = 0.9, 1.0
SPARSE_WINDOW = 0.1 * THRESHOLD
#: Initial weights W0 ~ N(WEIGHT_MEAN, 1) / sqrt(fan_in), times a calibrated gain per
#: layer: a positive mean lets sparse input drive the layers at all.
WEIGHT_MEAN = 0.25
