"""The PopART/Poplar glue (every translation unit of popops_ext/poplar/) compiles against
the public headers of the real SDK: PopART (willow/include), poplibs and poprithms at SDK
3.2.0 and 3.4.0, from ``../shared/sdk-headers`` beside the clone (CI has it; see its
README). Poplar's own headers are closed source: our host implementation of the Poplar
API (popops_ext/host/graph_api/include/poplar) stands in for them, so what PopART and
poplibs need from Poplar is declared there with the SDK's names and signatures. The SDK
folders come in with -isystem: -Werror applies to our files, not to PopART's own warnings.

The vertices of popops_ext/poplar/codelets/ include no SDK library header: they are
compiled (host, -D__IPU__, -march=x86-64) by tests/test_codelets_compile.py."""

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLUE = ROOT / "popops_ext" / "poplar"
UNITS = sorted(GLUE.glob("*.cpp"))
VERSIONS = ["3.2.0", "3.4.0"]
# Headers of the SDK that are neither public nor ours (each file of tests/sdk_standins/
# says what it stands in for).
STANDINS = ROOT / "tests" / "sdk_standins"
OUR_POPLAR = ROOT / "popops_ext" / "host" / "graph_api" / "include" / "poplar"


def sdk_headers() -> Path:
    """``../shared/sdk-headers``, beside the clone."""
    return ROOT.parent / "shared" / "sdk-headers"


def cmake_definitions() -> list[str]:
    """The definitions CMakeLists.txt builds the glue with (PopART's: ONNX_NAMESPACE,
    nonstd optional/any), so that this check and the SDK build cannot drift apart."""
    text = (GLUE / "CMakeLists.txt").read_text()
    match = re.search(r"target_compile_definitions\(snn_ipu_popart PRIVATE([^)]*)\)", text)
    assert match, "CMakeLists.txt: no target_compile_definitions for snn_ipu_popart"
    return [f"-D{d}" for d in match.group(1).split()]


def compile_command(version: str, unit: Path, poplar_dir: Path) -> list[str]:
    sdk = sdk_headers() / version
    return ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
            *cmake_definitions(),
            "-I", str(GLUE), "-I", str(ROOT / "popops_ext"), "-I", str(ROOT / "codelets"),
            # only poplar/ of our host API: popops/ and poputil/ are the real poplibs'
            "-I", str(poplar_dir),
            "-isystem", str(STANDINS),
            "-isystem", str(sdk / "popart" / "willow" / "include"),
            "-isystem", str(sdk / "poplibs" / "include"),
            "-isystem", str(sdk / "poprithms" / "poprithms" / "poprithms" / "include"),
            "-H", str(unit)]  # -H: the headers used, checked below


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every (version, unit) compiled once, in parallel; {(version, name): (cmd, result)}."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    missing = [str(sdk_headers() / v) for v in VERSIONS if not (sdk_headers() / v).is_dir()]
    if missing:
        pytest.skip(f"the SDK's public headers are not here: {', '.join(missing)}")
    poplar_dir = tmp_path_factory.mktemp("our_poplar")
    (poplar_dir / "poplar").symlink_to(OUR_POPLAR, target_is_directory=True)
    jobs = [(v, u) for v in VERSIONS for u in UNITS]

    def run(job):
        cmd = compile_command(*job, poplar_dir)
        return cmd, subprocess.run(cmd, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = list(pool.map(run, jobs))
    return {(v, u.name): r for (v, u), r in zip(jobs, done)}


def test_every_unit_is_found():
    assert {p.name for p in UNITS} >= {"CustomOps.cpp", "LayerGraph.cpp", "LayerOps.cpp"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("unit", [u.name for u in UNITS])
def test_glue_compiles_against_the_sdk_headers(results, version, unit):
    cmd, result = results[(version, unit)]
    errors = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("."))
    assert result.returncode == 0, f"{' '.join(cmd)}\n{errors[-6000:]}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sdk_headers_and_ours_are_what_is_compiled(results, version):
    """poplibs' and PopART's headers come from the SDK folder, poplar/ from our host API
    (never our host's popops/ or poputil/): read from g++ -H, not assumed."""
    sdk = sdk_headers() / version
    seen = set()
    for unit in UNITS:
        cmd, result = results[(version, unit.name)]
        assert result.returncode == 0, unit.name
        included = {line.lstrip(". ") for line in result.stderr.splitlines()
                    if re.match(r"^\.+ ", line)}
        for path in included:
            if Path(path).resolve().is_relative_to(GLUE):
                continue
            library = Path(path).parent.name
            if library in ("popops", "poputil", "popart"):
                assert Path(path).resolve().is_relative_to(sdk.resolve()), path
                seen.add(library)
            elif library == "poplar":
                assert Path(path).resolve().is_relative_to(OUR_POPLAR), path
                seen.add(library)
    assert seen == {"popops", "poputil", "popart", "poplar"}, seen
