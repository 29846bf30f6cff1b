"""Builds snn_ipu's compiled extension: the host executor (popops_ext/host), the
tile planner (popops_ext/plan) and, through them, the codelets (codelets/)
compiled by g++ against our host shim of the Poplar vertex API
(popops_ext/host/shim).

The extension is built once per instruction-set level from the same sources,
and snn_ipu._native picks the best one the running CPU supports, so that a
wheel or a shared install runs on any x86-64 machine of the last ~15 years:

* x86-64: ``_C_x86_64_v2`` (SSE4.2, POPCNT: the portable baseline) and
  ``_C_x86_64_v3`` (AVX2, FMA, F16C, BMI: the vector kernels' fast paths).
* other architectures: ``_C_generic``, the compiler's default target.
* ``SNN_IPU_NATIVE=1`` at build time: one ``_C_native`` with -march=native,
  for a machine that only ever runs what it built.

The tiny ``_cpu`` module (no -march flag) tells snn_ipu._native what the CPU
supports before any build is loaded.
"""

import os
import platform
from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import Extension, setup

NATIVE_ENV = "SNN_IPU_NATIVE"
# Set by the Makefile's editable install, which only registers the package: the
# in-place build_ext that follows compiles (once, not twice).
SKIP_ENV = "SNN_IPU_SKIP_EXT"

SOURCES = sorted(glob("popops_ext/host/*.cpp") + glob("popops_ext/plan/*.cpp"))
HEADERS = sorted(
    glob("codelets/*.hpp")
    + glob("popops_ext/host/*.hpp")
    + glob("popops_ext/host/shim/poplar/*.hpp")
    + glob("popops_ext/plan/*.hpp")
)
INCLUDE_DIRS = ["popops_ext/host/shim", "popops_ext", "codelets", "."]
# OpenMP: the executor runs on torch's own OpenMP team (see ThreadPool.hpp).
# -Wno-psabi: the kernels pass 32-byte vectors between inline functions, whose ABI
# without AVX (the x86-64-v2 build) g++ notes at every use; nothing crosses a library.
COMPILE_ARGS = ["-O3", "-fno-math-errno", "-fopenmp", "-Wno-psabi"]


def is_x86_64(machine: str = "") -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def native_requested() -> bool:
    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SystemExit(f"{NATIVE_ENV}={value!r}: set it to 1 (build with -march=native) or 0")


def variants():
    """``(module suffix, -march flags)`` of every build of the extension."""
    if native_requested():
        return [("native", ["-march=native"])]
    if is_x86_64():
        return [("x86_64_v2", ["-march=x86-64-v2"]), ("x86_64_v3", ["-march=x86-64-v3"])]
    return [("generic", [])]


def extensions():
    if os.environ.get(SKIP_ENV) == "1":
        return []
    built = [
        Pybind11Extension(
            f"snn_ipu._C_{suffix}",
            SOURCES,
            depends=HEADERS,
            include_dirs=INCLUDE_DIRS,
            cxx_std=17,
            define_macros=[("SNN_IPU_MODULE_NAME", f"_C_{suffix}")],
            extra_compile_args=COMPILE_ARGS + march,
            extra_link_args=["-fopenmp"],
        )
        for suffix, march in variants()
    ]
    built.append(
        Extension("snn_ipu._cpu", ["popops_ext/cpu/CpuFeatures.cpp"], language="c++",
                  extra_compile_args=["-O2", "-std=c++17"])
    )
    built.append(graph_extension())
    return built


def graph_extension():
    """snn_ipu._graph: the host implementation of the Poplar graph API
    (popops_ext/host/graph_api) running the IPU's graph code (popops_ext/poplar)
    and codelets, with an ipu2 tile's 6 workers per MultiVertex. One build, no
    -march flag: the codelets take the vector paths popc compiles, not the
    host's AVX ones."""
    sources = sorted(
        glob("popops_ext/host/graph_api/*.cpp")
        + [f"popops_ext/poplar/{name}.cpp"
           for name in ("LayerGraph", "ForwardPhases", "BackwardPhases", "LayerOps",
                        "NetworkOps")]
        + [f"popops_ext/plan/{name}.cpp" for name in ("Target", "Planner", "MemoryEstimation")]
    )
    return Pybind11Extension(
        "snn_ipu._graph",
        sources,
        depends=HEADERS
        + sorted(glob("popops_ext/host/graph_api/**/*.hpp", recursive=True))
        + sorted(glob("popops_ext/poplar/*.hpp") + glob("popops_ext/poplar/codelets/*.cpp")),
        include_dirs=["popops_ext/host/graph_api/include", "popops_ext/host/graph_api",
                      "popops_ext/poplar"] + INCLUDE_DIRS,
        define_macros=[("SNN_HOST_NUM_WORKERS", "6")],
        cxx_std=17,
        extra_compile_args=["-O2", "-fno-math-errno", "-Wno-psabi"],
    )


class BuildExt(build_ext):
    """One extension at a time, each into its own temp directory: the builds share
    their source files, and so would share (and race for) their object files.
    The objects of one build compile in parallel (ParallelCompile)."""

    def build_extension(self, ext):
        base = self.build_temp
        self.build_temp = os.path.join(base, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = base


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import it
    # SNN_IPU_BUILD_JOBS: parallel compiler processes (default 2).
    ParallelCompile("SNN_IPU_BUILD_JOBS", default=2).install()
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
