"""What the training benchmark runs: the networks, the backends and the neuron constants.

Every backend trains the same network ``in -> h -> h -> out`` of LIF neurons
(subtract reset, ATan surrogate) with the same weights and inputs, so that their step
times compare like for like.
"""

from __future__ import annotations

from typing import Dict, Tuple

#: Network sizes (inputs, hidden, hidden, outputs), timesteps T and batch B.
CONFIGS: Dict[str, dict] = {
    "S": dict(sizes=(700, 256, 256, 20), T=100, B=64),
    "L": dict(sizes=(2312, 1466, 1466, 10), T=100, B=48),
}

#: Our two emulator settings, our dense reference, and the dense peers.
BACKENDS: Tuple[str, ...] = (
    "emulator_sparse",  # emulator, grad_window = SPARSE_WINDOW
    "emulator_exact",   # emulator, grad_window = None (exact gradients)
    "reference",        # our dense PyTorch backend
    "spikingjelly",     # SpikingJelly 2.0 multi-step LIFNode (torch CPU path)
    "torch_loop",       # nn.Linear on all steps + a plain Python loop over T
    "torch_compile",    # the torch loop's layers under torch.compile (inductor)
    "snntorch",         # nn.Linear + snntorch.Leaky, Python loop over T
)
#: The emulator's two settings, whose speed-up over the dense backends is reported.
OURS: Tuple[str, ...] = ("emulator_sparse", "emulator_exact")
#: Dense backends: their cost does not depend on activity (see ``--baseline-timing``).
DENSE_BASELINES: Tuple[str, ...] = ("reference", "spikingjelly", "torch_loop", "torch_compile",
                                     "snntorch")
#: The package (or extension) each backend needs; one import check per family.
FAMILY: Dict[str, str] = {
    "emulator_sparse": "emulator", "emulator_exact": "emulator", "reference": "reference",
    "spikingjelly": "spikingjelly", "torch_loop": "torch_loop", "snntorch": "snntorch",
    "torch_compile": "torch_compile",
}
#: Left out of ``--quick`` unless named: compiling T unrolled steps per layer shape takes
#: minutes on a small machine.
SLOW_TO_BUILD: Tuple[str, ...] = ("torch_compile",)

DEFAULT_ACTIVITIES: Tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.3)
QUICK_ACTIVITIES: Tuple[float, ...] = (0.02, 0.1)

BETA, THRESHOLD = 0.9, 1.0
SPARSE_WINDOW = 0.1 * THRESHOLD
#: Initial weights W0 ~ N(WEIGHT_MEAN, 1) / sqrt(fan_in), times a calibrated gain per
#: layer: a positive mean lets sparse input drive the layers at all.
WEIGHT_MEAN = 0.25
