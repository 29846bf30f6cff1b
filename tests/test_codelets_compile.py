"""Every codelet translation unit compiles cleanly (-Wall -Wextra -Werror) the three
ways it is built: as the host extension builds it, as popc sees it for the IPU
(``-D__IPU__``, here through our host shim of the vertex API), and for a plain
x86-64 CPU without AVX2 (the code that popc's ``cpu`` target and every CPU without
AVX2 compile)."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted((ROOT / "codelets").glob("*.cpp")) + sorted(
    (ROOT / "popops_ext" / "poplar" / "codelets").glob("*.cpp"))
WARNINGS = ["-Wall", "-Wextra", "-Werror"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _setup():
    spec = importlib.util.spec_from_file_location("snn_ipu_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() itself runs only as __main__
    return module


def _host_builds():
    setup = _setup()
    return {suffix: setup.COMPILE_ARGS + march for suffix, march in setup.variants()}


def _ways():
    ways = {f"host-{suffix}": args for suffix, args in _host_builds().items()}
    ways["ipu"] = ["-D__IPU__"]
    ways["x86-64"] = ["-march=x86-64"]
    return ways


WAYS = _ways()


def test_every_unit_is_found():
    names = {p.name for p in UNITS}
    assert {"NeuronUpdate.cpp", "SpikeMatmul.cpp", "StateGrad.cpp", "WeightGrad.cpp",
            "SpikeListCombine.cpp", "TileListSlice.cpp"} <= names


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_codelet_compiles(unit, way):
    if way == "x86-64" and not _setup().is_x86_64():
        pytest.skip("-march=x86-64 is an x86-64 flag")
    cmd = ["g++", "-std=c++17", "-fsyntax-only", *WARNINGS, *WAYS[way],
           "-I", str(ROOT / "popops_ext" / "host" / "shim"), "-I", str(ROOT / "codelets"),
           str(unit)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
