"""Training-step benchmark from a source checkout: ``snn_ipu.bench`` with the committed
results' directory (benchmarks/results/) as the default ``--out``.

    python benchmarks/bench_training.py                  # S and L, ~20-25 min idle
    python benchmarks/bench_training.py --quick --out /tmp/bench

The same benchmark runs from an installed package as ``snn-ipu bench``; method and
results: docs/performance.md.
"""

import sys
from pathlib import Path

from snn_ipu.bench import main

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], default_out=RESULTS, prog="bench_training.py"))
