// The schedule of a layer call split into sample groups (TilePartition.hpp),
// shared by the forward and backward executors.
#pragma once
#include <cstddef>

#include "ThreadPool.hpp"
#include "TilePartition.hpp"

namespace snn {

// The tiles' blocks first (buildTile(j), shared by the groups), then units
// that never wait for one another: runUnit(j, g) for each (tile, group), or,
// in a recurrent layer, runGroup(g), which runs all of the group's tiles on
// one thread, so that it needs no barrier per step.
template <typename BuildTile, typename RunUnit, typename RunGroup>
void runSampleGroups(unsigned numThreads, unsigned numTiles, unsigned groups, bool recurrent,
                     BuildTile &&buildTile, RunUnit &&runUnit, RunGroup &&runGroup) {
  ThreadPool &pool = ThreadPool::instance();
  const std::size_t work = recurrent ? groups : std::size_t(numTiles) * groups;
  pool.run(effectiveThreads(numThreads, work), [&](unsigned thread, unsigned team) {
    const auto tiles = threadShare(numTiles, thread, team);
    for (std::size_t j = tiles.first; j < tiles.second; ++j)
      buildTile(unsigned(j));
    pool.barrier();
    const auto share = threadShare(work, thread, team);
    for (std::size_t w = share.first; w < share.second; ++w) {
      if (recurrent)
        runGroup(unsigned(w));
      else
        runUnit(unsigned(w % numTiles), unsigned(w / numTiles));
    }
  });
}

} // namespace snn
