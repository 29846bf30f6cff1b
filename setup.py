"""Builds snn_ipu._C: the host executor (popops_ext/host), the tile planner
(popops_ext/plan) and, through them, the codelets (codelets/) compiled by g++
against our host shim of the Poplar vertex API (popops_ext/host/shim)."""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

sources = sorted(glob("popops_ext/host/*.cpp") + glob("popops_ext/plan/*.cpp"))
headers = sorted(
    glob("codelets/*.hpp")
    + glob("popops_ext/host/*.hpp")
    + glob("popops_ext/host/shim/poplar/*.hpp")
    + glob("popops_ext/plan/*.hpp")
)

ext = Pybind11Extension(
    "snn_ipu._C",
    sources,
    depends=headers,
    include_dirs=["popops_ext/host/shim", "popops_ext", "codelets", "."],
    cxx_std=17,
    # Built from source on the machine that runs it, so tuning for it is safe.
    # OpenMP: the executor runs on torch's own OpenMP team (see ThreadPool.hpp).
    extra_compile_args=["-O3", "-march=native", "-fno-math-errno", "-fopenmp"],
    extra_link_args=["-fopenmp"],
)


class ParallelBuildExt(build_ext):
    def build_extensions(self):
        self.parallel = self.parallel or 2
        super().build_extensions()


setup(ext_modules=[ext], cmdclass={"build_ext": ParallelBuildExt})
