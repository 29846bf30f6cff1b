"""The training-step benchmark (``snn-ipu bench``); method and results in
docs/performance.md.

Modules by job: :mod:`.configs` (networks, backends, constants), :mod:`.workload`
(inputs, weights, activity calibration), :mod:`.networks` (one training step per
backend, our layers and the peers), :mod:`.timing` (paired, interleaved timing),
:mod:`.memory` (peak memory in a subprocess), :mod:`.kernel` (spike-matmul rate against
torch.mm), :mod:`.sweep` (one config's rows), :mod:`.report` (console table, plot),
:mod:`.summary` (the README's table and plot), :mod:`.command` (the command line).
"""

from pathlib import Path
from typing import Optional, Sequence

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None, default_out: Optional[Path] = None,
         prog: str = "snn-ipu bench") -> int:
    """Runs the benchmark with command-line arguments ``argv``; see
    :func:`snn_ipu.bench.command.main`."""
    # Imported here, not at the top: ``python -m snn_ipu.bench.summary`` (or ``.memory``)
    # would otherwise find its own module imported by the package before it runs.
    from . import command

    return command.main(argv, command.DEFAULT_OUT if default_out is None else default_out,
                        prog)
