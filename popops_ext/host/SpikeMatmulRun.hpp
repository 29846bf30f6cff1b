// The SpikeMatmul vertex on its own over a whole call, for measuring the
// kernel's add rate and checking it against a dense matmul: every tile sets
// its per-sample currents to the weight rows' sum of the listed input spikes
// at each of the T steps, as a feed-forward layer runs it, so the result is
// the last step's x[T-1] W^T ([B x out]). Sample groups split the work as
// in the layer (TilePartition.hpp).
#pragma once
#include "LayerViews.hpp"
#include "TileLayout.hpp"

namespace snn {

struct SpikeMatmulTiming {
  // The input list's repack and the vertex calls (on the busiest thread); not
  // the building of the weight blocks.
  double kernelSeconds;
  long long adds;       // listed input spikes x out
};

template <typename WT>
SpikeMatmulTiming spikeMatmulOverTime(const Shape &shape, const TileLayout &layout,
                                      const SpikeListView &input, const WT *weight,
                                      unsigned numThreads, unsigned sampleGroups, float *out);

} // namespace snn
