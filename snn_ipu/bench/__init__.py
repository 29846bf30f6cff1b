"""The training-step benchmark (``snn-ipu bench``); method and results in
docs/performance.md.

Modules by job: :mod:`.configs` (networks, backends, constants), :mod:`.workload`
(inputs, weights, activity calibration), :mod:`.networks` (one training step per
backend, our layers and the peers), :mod:`.timing` (paired, interleaved timing),
:mod:`.memory` (peak memory in a subprocess), :mod:`.kernel` (spike-matmul rate against
torch.mm), :mod:`.sweep` (one config's rows), :mod:`.report` (console table, plot),
:mod:`.summary` (the README's table and plot), :mod:`.command` (the command line).
"""

from .command import main

__all__ = ["main"]
