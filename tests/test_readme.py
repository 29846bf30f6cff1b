"""The README's quick start, extracted and run as copied, trains: its last printed test
accuracy is well above chance (10 classes)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn", reason="the quick start trains on scikit-learn's digits")
pytest.importorskip("snn_ipu._native", reason="the emulator's C++ extension is not built")

README = Path(__file__).resolve().parent.parent / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the quick start is one python block"
    return blocks[0]


def test_quick_start_trains(tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", done.stdout)]
    assert accuracies, done.stdout
    assert accuracies[-1] > 0.8, done.stdout
