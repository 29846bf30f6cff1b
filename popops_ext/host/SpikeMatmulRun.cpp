#include "SpikeMatmulRun.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include <poplar/HalfFloat.hpp>

#include "SpikeMatmul.hpp"
#include "StepLists.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"

namespace snn {

template <typename WT>
SpikeMatmulTiming spikeMatmulOverTime(const Shape &shape, const TileLayout &layout,
                                      const SpikeListView &input, const WT *weight,
                                      unsigned numThreads, unsigned sampleGroups, float *out) {
  const unsigned numTiles = layout.numTiles(), B = shape.batch, T = shape.steps;
  const SampleGroups groups(B, sampleGroups);
  const unsigned G = groups.count(), numUnits = numTiles * G;
  const unsigned threads = effectiveThreads(numThreads, numUnits);
  TileBlocks<WT> blocks;
  blocks.resize(numTiles);
  std::vector<AlignedVector<float>> currents(numUnits);
  ThreadPool &pool = ThreadPool::instance();
  const auto start = std::chrono::steady_clock::now();
  StepLists lists;
  lists.build(input, T, groups, numThreads); // split by step, as the layer does: not capped by tiles
  const double repackSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Unit after unit, as the feed-forward layer runs: a thread builds a tile's
  // block (its weight rows, in the layout the vertex reads; with sample
  // groups, all blocks before any unit runs) and then runs the unit's steps
  // over it, so the block is where the layer has it, in cache. The builds are
  // not the kernel's time: each thread clocks its vertex calls, and the
  // busiest thread's total is the kernel's wall time.
  std::vector<double> threadSeconds(threads, 0.0);
  std::atomic<unsigned> next{0};
  pool.run(threads, [&](unsigned thread, unsigned team) {
    if (G > 1) {
      const auto tiles = threadShare(numTiles, thread, team);
      for (std::size_t j = tiles.first; j < tiles.second; ++j)
        blocks.build(layout, unsigned(j), weight, shape.inFeatures);
      pool.barrier();
    }
    SpikeMatmul<WT> mm;
    mm.accumulate = 0;
    double seconds = 0.0;
    for (unsigned u; (u = next.fetch_add(1)) < numUnits;) {
      const unsigned j = u % numTiles, g = u / numTiles;
      if (G == 1)
        blocks.build(layout, j, weight, shape.inFeatures);
      currents[u].assign(std::size_t(groups.size(g)) * layout.rowLength(j), 0.0f);
      mm.weights.bind(blocks.block(j), blocks.blockSize(j));
      mm.currents.bind(currents[u].data(), currents[u].size());
      mm.rowLength = layout.rowLength(j);
      const auto unitStart = std::chrono::steady_clock::now();
      for (unsigned t = 0; t < T; ++t) {
        mm.ids.bind(lists.ids(t, g), lists.spikes(t, g));
        mm.ends.bind(lists.ends(t, g), groups.size(g));
        mm.compute();
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - unitStart)
                     .count();
    }
    threadSeconds[thread] = seconds;
  });
  const double seconds =
      repackSeconds + *std::max_element(threadSeconds.begin(), threadSeconds.end());
  const unsigned N = shape.outFeatures;
  for (unsigned u = 0; u < numUnits; ++u) {
    const unsigned j = u % numTiles, g = u / numTiles;
    for (unsigned b = 0; b < groups.size(g); ++b)
      std::memcpy(out + std::size_t(groups.first(g) + b) * N + layout.first(j),
                  currents[u].data() + std::size_t(b) * layout.rowLength(j),
                  layout.width(j) * sizeof(float));
  }
  return {seconds, (long long)lists.totalSpikes() * (long long)N};
}

template SpikeMatmulTiming spikeMatmulOverTime<float>(const Shape &, const TileLayout &,
                                                      const SpikeListView &, const float *,
                                                      unsigned, unsigned, float *);
template SpikeMatmulTiming spikeMatmulOverTime<half>(const Shape &, const TileLayout &,
                                                     const SpikeListView &, const half *,
                                                     unsigned, unsigned, float *);

} // namespace snn
