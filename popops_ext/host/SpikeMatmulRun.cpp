#include "SpikeMatmulRun.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include <poplar/HalfFloat.hpp>

#include "Prefetch.hpp"
#include "SpikeMatmul.hpp"
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
  pool.run(threads, [&](unsigned thread, unsigned team) {
    const auto share = threadShare(numTiles, thread, team);
    for (std::size_t j = share.first; j < share.second; ++j) {
      blocks.build(layout, unsigned(j), weight, shape.inFeatures);
      currents[j].assign(std::size_t(B) * layout.rowLength(unsigned(j)), 0.0f);
    }
  });
  // Tile-major, as the feed-forward layer runs.
  const auto start = std::chrono::steady_clock::now();
  std::atomic<unsigned> next{0};
  pool.run(threads, [&, B, T](unsigned, unsigned) {
    // Loop invariants as locals: through the lambda's captured references
    // they were reloaded from memory after every (opaque) vertex call.
    const SpikeListView in = input;
    const std::size_t rows = std::size_t(T) * B;
    SpikeMatmul<WT> mm;
    for (unsigned j; (j = next.fetch_add(1)) < numTiles;) {
      const unsigned len = layout.rowLength(j);
      const WT *block = blocks.block(j);
      float *tileCurrents = currents[j].data();
      mm.weights.bind(block, blocks.blockSize(j));
      mm.rowLength = len;
      mm.accumulate = 0;
      for (std::size_t row = 0, b = 0; row < rows; ++row, b = b + 1 == B ? 0 : b + 1) {
        prefetchSpikeMatmul(in, block, row, rows, len);
        mm.ids.bind(in.idsAt(row), in.capacity);
        mm.numIds.bind(reinterpret_cast<const unsigned *>(&in.counts[2 * row]));
        mm.currents.bind(tileCurrents + b * len, len);
        mm.compute();
      }
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  long long spikes = 0;
  for (std::size_t row = 0; row < std::size_t(T) * B; ++row)
    spikes += input.spikesAt(row);
  const unsigned N = shape.outFeatures;
  for (unsigned j = 0; j < numTiles; ++j)
    for (unsigned b = 0; b < B; ++b)
      std::memcpy(out + std::size_t(b) * N + layout.first(j),
                  currents[j].data() + std::size_t(b) * layout.rowLength(j),
                  layout.width(j) * sizeof(float));
  return {seconds, spikes * (long long)N};
}

template SpikeMatmulTiming spikeMatmulOverTime<float>(const Shape &, const TileLayout &,
                                                      const SpikeListView &, const float *,
                                                      unsigned, float *);
template SpikeMatmulTiming spikeMatmulOverTime<half>(const Shape &, const TileLayout &,
                                                     const SpikeListView &, const half *,
                                                     unsigned, float *);

} // namespace snn
