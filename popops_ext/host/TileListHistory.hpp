// One tile's emitted lists for every (step, sample) row of a call, stored as
// compressed rows (CSR): spikes and eligible-only entries with their
// membrane values. The LifUpdate/SynapticUpdate vertices write straight into
// the free space at the end, so reserveRow() must precede each emission;
// the buffers grow geometrically and are pre-sized from an activity guess,
// so growth is rare.
#pragma once
#include <cstddef>
#include <vector>

#include "MemoryBudget.hpp"
#include "RawVector.hpp"

namespace snn {


struct TileListHistory {
  RawVector<int> spikeIds, eligibleIds;
  RawVector<float> spikeMembrane, eligibleMembrane;
  std::vector<std::size_t> spikeStart, eligibleStart; // [rows + 1]
  std::vector<unsigned> counts;                       // [rows x {spikes, eligible-only}]

  void init(std::size_t rows, std::size_t expectedSpikes, std::size_t expectedEligible,
            MemoryBudget &budget) {
    budget_ = &budget;
    spikeStart.assign(rows + 1, 0);
    eligibleStart.assign(rows + 1, 0);
    counts.assign(2 * rows, 0);
    spikeIds.clear();
    eligibleIds.clear();
    grow(spikeIds, spikeMembrane, expectedSpikes);
    grow(eligibleIds, eligibleMembrane, expectedEligible);
  }

  void reserveRow(std::size_t row, std::size_t width) {
    grow(spikeIds, spikeMembrane, spikeStart[row] + width);
    grow(eligibleIds, eligibleMembrane, eligibleStart[row] + width);
  }

  void closeRow(std::size_t row) {
    spikeStart[row + 1] = spikeStart[row] + counts[2 * row];
    eligibleStart[row + 1] = eligibleStart[row] + counts[2 * row + 1];
  }

private:
  void grow(RawVector<int> &ids, RawVector<float> &mem, std::size_t need) {
    if (ids.size() >= need)
      return;
    const std::size_t size = need > 2 * ids.size() ? need : 2 * ids.size();
    budget_->take((size - ids.size()) * (sizeof(int) + sizeof(float)),
                  "the spike lists (spikes and gradient-eligible neurons)");
    ids.resize(size);
    mem.resize(size);
  }

  MemoryBudget *budget_ = nullptr;
};

} // namespace snn
