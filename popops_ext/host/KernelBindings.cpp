// _C.spike_matmul: the spike-matmul kernel alone, for benchmarks and tests.
#include "KernelBindings.hpp"

#include <algorithm>
#include <stdexcept>

#include <poplar/HalfFloat.hpp>

#include "NumpyArgs.hpp"
#include "SpikeMatmulRun.hpp"
#include "ThreadPool.hpp"

namespace snn {

namespace {

// The sum over t of the listed input spikes times W^T, with the time spent in
// the vertex calls: (currents of the last step [B, out], seconds, additions).
py::tuple spikeMatmul(const IntArray &tileStarts, const IntArray &inIds, const IntArray &inCounts,
                      const py::array &weight_, unsigned numThreads, unsigned sampleGroups) {
  const WeightArg weight = toWeight(weight_, "weight");
  if (weight.array.ndim() != 2)
    throw std::invalid_argument("weight must be [out, in]");
  if (inIds.ndim() != 3)
    throw std::invalid_argument("in_ids must be [T, B, K]");
  if (sampleGroups < 1)
    throw std::invalid_argument("sample_groups must be >= 1");
  const Shape shape{unsigned(inIds.shape(0)), unsigned(inIds.shape(1)),
                    unsigned(weight.cols()), unsigned(weight.rows())};
  checkSpikeList(inIds, inCounts, shape.steps, shape.batch, shape.inFeatures, false,
                 "input list");
  const TileLayout layout(tileStarts.data(), tileStarts.size(), shape.outFeatures);
  FloatArray out({py::ssize_t(shape.batch), py::ssize_t(shape.outFeatures)});
  float *o = out.mutable_data();
  std::fill(o, o + out.size(), 0.0f);
  const SpikeListView input = listView(inIds, inCounts);
  const unsigned threads = numThreads > 0 ? numThreads : hardwareThreads();
  SpikeMatmulTiming timing{};
  {
    py::gil_scoped_release release;
    timing = weight.isHalf
                 ? spikeMatmulOverTime(shape, layout, input,
                                       static_cast<const half *>(weight.data()), threads,
                                       sampleGroups, o)
                 : spikeMatmulOverTime(shape, layout, input,
                                       static_cast<const float *>(weight.data()), threads,
                                       sampleGroups, o);
  }
  return py::make_tuple(out, timing.kernelSeconds, timing.adds);
}

} // namespace

void registerKernelBindings(py::module_ &m) {
  m.def("spike_matmul", &spikeMatmul, py::arg("tile_starts"), py::arg("in_ids"),
        py::arg("in_counts"), py::arg("weight"), py::arg("num_threads") = 0,
        py::arg("sample_groups") = 1,
        "(currents [B, out] of the last step, kernel seconds, additions)");
}

} // namespace snn
