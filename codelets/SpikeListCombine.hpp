// Merges the tiles' lists of one sample and step into the layer's
// fixed-capacity list: the spikes of all tiles in tile order (tiles own
// ascending neuron ranges, so ids stay ascending), then the eligible-only
// entries of all tiles. Entries past the capacity are dropped, spikes last;
// the tail of ids is zero-filled, the tail of membrane is left as it is
// (nothing reads membrane past the listed entries). counts = {listed spikes,
// listed, spikes, needed}.
#pragma once
#include <poplar/Vertex.hpp>

class SpikeListCombine : public poplar::Vertex {
public:
  poplar::Vector<poplar::Input<poplar::Vector<int>>> spikeIds;
  poplar::Vector<poplar::Input<poplar::Vector<float>>> spikeMembrane;
  poplar::Vector<poplar::Input<poplar::Vector<int>>> eligibleIds;
  poplar::Vector<poplar::Input<poplar::Vector<float>>> eligibleMembrane;
  poplar::Input<poplar::Vector<unsigned>> tileCounts; // [numTiles x {spikes, eligible}]
  poplar::Output<poplar::Vector<int>> ids;
  poplar::Output<poplar::Vector<float>> membrane;
  poplar::Output<poplar::Vector<unsigned>> counts;

  bool compute() {
    const unsigned capacity = ids.size();
    const unsigned numTiles = spikeIds.size();
    unsigned pos = 0, spikes = 0, needed = 0;
    for (unsigned i = 0; i < numTiles; ++i) {
      const unsigned c = tileCounts[2 * i];
      spikes += c;
      pos = append(spikeIds[i], spikeMembrane[i], c, pos, capacity);
    }
    const unsigned listedSpikes = pos;
    needed = spikes;
    for (unsigned i = 0; i < numTiles; ++i) {
      const unsigned c = tileCounts[2 * i + 1];
      needed += c;
      pos = append(eligibleIds[i], eligibleMembrane[i], c, pos, capacity);
    }
    if (pos < capacity)
      __builtin_memset(&ids[pos], 0, (capacity - pos) * sizeof(int));
    counts[0] = listedSpikes;
    counts[1] = pos;
    counts[2] = spikes;
    counts[3] = needed;
    return true;
  }

private:
  template <class IdVec, class MemVec>
  unsigned append(const IdVec &srcIds, const MemVec &srcMem, unsigned n, unsigned pos,
                  unsigned capacity) {
    const unsigned take = n < capacity - pos ? n : capacity - pos;
    if (take != 0) {
      __builtin_memcpy(&ids[pos], &srcIds[0], take * sizeof(int));
      __builtin_memcpy(&membrane[pos], &srcMem[0], take * sizeof(float));
    }
    return pos + take;
  }
};
