// The SpikeMatmul vertex on its own over a whole call, for measuring the
// kernel's add rate and checking it against a dense matmul: every tile adds
// the weight rows of the listed input spikes of all T steps into its
// per-sample currents, so the result is sum_t x[t] W^T ([B x out]).
#pragma once
#include "LayerViews.hpp"
#include "TileLayout.hpp"

namespace snn {

struct SpikeMatmulTiming {
  double kernelSeconds; // the vertex calls only; weight blocks are built before
  long long adds;       // listed input spikes x out
};

template <typename WT>
SpikeMatmulTiming spikeMatmulOverTime(const Shape &shape, const TileLayout &layout,
                                      const SpikeListView &input, const WT *weight,
                                      unsigned numThreads, float *out);

} // namespace snn
