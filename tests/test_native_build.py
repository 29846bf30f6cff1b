"""The portable build: which extension build snn_ipu._native loads, and the emulator
tests once more on the baseline build (no AVX2: the code path of every CPU without it)."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snn_ipu import _native
from snn_ipu._native import NativeBuildError, choose

ROOT = Path(__file__).resolve().parent.parent
X86 = ["x86-64-v2", "x86-64-v3"]


def test_auto_takes_the_best_build_the_cpu_runs():
    assert choose("auto", X86, 3) == "x86-64-v3"
    assert choose("auto", X86, 2) == "x86-64-v2"
    assert choose("auto", ["generic"], 0) == "generic"
    assert choose("auto", ["native"], 0) == "native"


def test_a_cpu_below_the_baseline_is_told_what_to_do():
    with pytest.raises(NativeBuildError, match="SNN_IPU_NATIVE=1"):
        choose("auto", X86, 1)


def test_forced_builds():
    assert choose("baseline", X86, 3) == "x86-64-v2"
    assert choose("baseline", ["generic"], 0) == "generic"
    assert choose("x86-64-v3", X86, 3) == "x86-64-v3"
    with pytest.raises(NativeBuildError, match="cannot run the x86-64-v3 build"):
        choose("x86-64-v3", X86, 2)
    with pytest.raises(NativeBuildError, match="not installed"):
        choose("baseline", ["native"], 3)
    with pytest.raises(NativeBuildError, match="SNN_IPU_ARCH='avx512' is not one of"):
        choose("avx512", X86, 3)
    with pytest.raises(NativeBuildError, match="not built"):
        choose("auto", [], 3)


def test_the_loaded_build_is_the_one_asked_for():
    """Also what the baseline run below relies on: SNN_IPU_ARCH really switched builds."""
    requested = os.environ.get(_native.ARCH_ENV, "auto")
    if requested == "baseline":
        assert _native.build in ("x86-64-v2", "generic")
    elif requested != "auto":
        assert _native.build == requested
    assert _native._C.__name__.endswith(_native.BUILDS[_native.build][0])


def _baseline_build():
    present = _native._present()
    if "x86-64-v2" in present and _native.build != "x86-64-v2":
        return "x86-64-v2"
    pytest.skip(f"no second, baseline build next to the loaded {_native.build} one "
                "(SNN_IPU_NATIVE=1 builds one, other architectures build one)")


def test_the_baseline_build_has_no_avx():
    _baseline_build()
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump")
    # found, not imported: two builds cannot share a process (their pybind11 types)
    path = importlib.util.find_spec("snn_ipu._C_x86_64_v2").origin
    text = subprocess.run([objdump, "-d", path], capture_output=True, text=True,
                          check=True).stdout
    assert "%ymm" not in text and "%zmm" not in text


def test_emulator_against_reference_on_the_baseline_build():
    """tests/test_emulator_vs_reference.py in a process that loads the baseline build:
    the kernels' non-AVX2 branches (vector emission, F16C-free half loads, mask tests)
    against the dense reference."""
    _baseline_build()
    env = dict(os.environ, **{_native.ARCH_ENV: "baseline"})
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/test_emulator_vs_reference.py",
           "tests/test_native_build.py::test_the_loaded_build_is_the_one_asked_for"]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
