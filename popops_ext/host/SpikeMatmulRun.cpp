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
                                      unsigned numThreads, float *out) {
  const unsigned numTiles = layout.numTiles(), B = shape.batch, T = shape.steps;
  const unsigned threads = effectiveThreads(numThreads, numTiles);
  TileBlocks<WT> blocks;
  blocks.resize(numTiles);
  std::vector<AlignedVector<float>> currents(numTiles);
  ThreadPool &pool = ThreadPool::instance();
  const auto start = std::chrono::steady_clock::now();
  StepLists lists;
  lists.build(input, T, B, numThreads); // split by step, as the layer does: not capped by tiles
  const double repackSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Tile-major, as the feed-forward layer runs: a thread builds a tile's block
  // (its weight rows, in the layout the vertex reads) and then runs the tile's
  // steps over it, so the block is where the layer has it, in that core's
  // cache. The builds are not the kernel's time: each thread clocks its
  // vertex calls, and the busiest thread's total is the kernel's wall time.
  std::vector<double> threadSeconds(threads, 0.0);
  std::atomic<unsigned> next{0};
  pool.run(threads, [&](unsigned thread, unsigned) {
    SpikeMatmul<WT> mm;
    mm.accumulate = 0;
    double seconds = 0.0;
    for (unsigned j; (j = next.fetch_add(1)) < numTiles;) {
      blocks.build(layout, j, weight, shape.inFeatures);
      currents[j].assign(std::size_t(B) * layout.rowLength(j), 0.0f);
      mm.weights.bind(blocks.block(j), blocks.blockSize(j));
      mm.currents.bind(currents[j].data(), currents[j].size());
      mm.rowLength = layout.rowLength(j);
      const auto tileStart = std::chrono::steady_clock::now();
      for (unsigned t = 0; t < T; ++t) {
        mm.ids.bind(lists.ids(t), lists.spikes(t));
        mm.ends.bind(lists.ends(t), B);
        mm.compute();
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - tileStart)
                     .count();
    }
    threadSeconds[thread] = seconds;
  });
  const double seconds =
      repackSeconds + *std::max_element(threadSeconds.begin(), threadSeconds.end());
  const unsigned N = shape.outFeatures;
  for (unsigned j = 0; j < numTiles; ++j)
    for (unsigned b = 0; b < B; ++b)
      std::memcpy(out + std::size_t(b) * N + layout.first(j),
                  currents[j].data() + std::size_t(b) * layout.rowLength(j),
                  layout.width(j) * sizeof(float));
  return {seconds, (long long)lists.totalSpikes() * (long long)N};
}

template SpikeMatmulTiming spikeMatmulOverTime<float>(const Shape &, const TileLayout &,
                                                      const SpikeListView &, const float *,
                                                      unsigned, float *);
template SpikeMatmulTiming spikeMatmulOverTime<half>(const Shape &, const TileLayout &,
                                                     const SpikeListView &, const half *,
                                                     unsigned, float *);

} // namespace snn
