"""``python -m snn_ipu train|bench``; see :mod:`snn_ipu.cli`."""

import sys

from .cli import main

sys.exit(main())
