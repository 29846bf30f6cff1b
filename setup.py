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


# snn_ipu._graph: the host implementation of the Poplar graph API
# (popops_ext/host/graph_api) running the IPU graph builders
# (popops_ext/poplar/LayerGraph.cpp) and the same codelets, with an ipu2
# tile's 6 workers per MultiVertex.
graph_sources = sorted(
    glob("popops_ext/host/graph_api/*.cpp")
    + ["popops_ext/poplar/LayerGraph.cpp"]
    + [f"popops_ext/plan/{name}.cpp" for name in ("Target", "Planner", "MemoryEstimation")]
)
graph_ext = Pybind11Extension(
    "snn_ipu._graph",
    graph_sources,
    depends=headers
    + sorted(glob("popops_ext/host/graph_api/**/*.hpp", recursive=True))
    + sorted(glob("popops_ext/poplar/*.hpp") + glob("popops_ext/poplar/codelets/*.cpp")),
    include_dirs=[
        "popops_ext/host/graph_api/include", "popops_ext/host/graph_api", "popops_ext/host/shim",
        "popops_ext", "popops_ext/poplar", "codelets", ".",
    ],
    define_macros=[("SNN_HOST_NUM_WORKERS", "6")],
    cxx_std=17,
    extra_compile_args=["-O2", "-march=native", "-fno-math-errno"],
)


class ParallelBuildExt(build_ext):
    def build_extensions(self):
        self.parallel = self.parallel or 2
        super().build_extensions()


setup(ext_modules=[ext, graph_ext], cmdclass={"build_ext": ParallelBuildExt})
