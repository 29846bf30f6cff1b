// Merges the tiles' lists of one sample and step into the layer's
// fixed-capacity list: the spikes of all tiles in tile order (tiles own
// ascending neuron ranges, so ids stay ascending), then the eligible-only
// entries of all tiles. Entries past the capacity are dropped, spikes last;
// the tail of ids is zero-filled, the tail of membrane is left as it is
// (nothing reads membrane past the listed entries). counts = {listed spikes,
// listed, spikes, needed}.
#pragma once
#include <poplar/Vertex.hpp>

namespace snn {
// Copies a tile's first n entries (ids and membrane) to the list at pos, as many
// as the capacity leaves room for; returns the list's new end.
template <class Ids, class Mem, class SrcIds, class SrcMem>
inline unsigned appendEntries(Ids &ids, Mem &membrane, const SrcIds &srcIds,
                              const SrcMem &srcMem, unsigned n, unsigned pos,
                              unsigned capacity) {
  const unsigned take = n < capacity - pos ? n : capacity - pos;
  if (take != 0) {
    __builtin_memcpy(&ids[pos], &srcIds[0], take * sizeof(int));
    __builtin_memcpy(&membrane[pos], &srcMem[0], take * sizeof(float));
  }
  return pos + take;
}
} // namespace snn

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
      pos = snn::appendEntries(ids, membrane, spikeIds[i], spikeMembrane[i], c, pos,
                               capacity);
    }
    const unsigned listedSpikes = pos;
    needed = spikes;
    for (unsigned i = 0; i < numTiles; ++i) {
      const unsigned c = tileCounts[2 * i + 1];
      needed += c;
      pos = snn::appendEntries(ids, membrane, eligibleIds[i], eligibleMembrane[i], c, pos,
                               capacity);
    }
    if (pos < capacity)
      __builtin_memset(&ids[pos], 0, (capacity - pos) * sizeof(int));
    counts[0] = listedSpikes;
    counts[1] = pos;
    counts[2] = spikes;
    counts[3] = needed;
    return true;
  }

};

// SpikeListCombine with the tiles' lists shared out over the workers (the IPU
// graph: one sample per combining tile left five of six idle). Worker w copies
// the lists of tiles [w * share, (w + 1) * share), share = ceil(tiles / workers),
// to where SpikeListCombine would have put them: each worker first sums the
// counts of the tiles before its own (and of all, for where the eligible-only
// entries start), so the list, its zero-filled tail and counts are the same,
// entry for entry. The last worker writes the tail and the counts.
class SpikeListCombineParts : public poplar::MultiVertex {
public:
  poplar::Vector<poplar::Input<poplar::Vector<int>>> spikeIds;
  poplar::Vector<poplar::Input<poplar::Vector<float>>> spikeMembrane;
  poplar::Vector<poplar::Input<poplar::Vector<int>>> eligibleIds;
  poplar::Vector<poplar::Input<poplar::Vector<float>>> eligibleMembrane;
  poplar::Input<poplar::Vector<unsigned>> tileCounts; // [numTiles x {spikes, eligible}]
  poplar::Output<poplar::Vector<int>> ids;
  poplar::Output<poplar::Vector<float>> membrane;
  poplar::Output<poplar::Vector<unsigned>> counts;

  bool compute(unsigned workerId) {
    const unsigned workers = numWorkers(), capacity = ids.size(), numTiles = spikeIds.size();
    const unsigned share = (numTiles + workers - 1) / workers;
    const unsigned lo = workerId * share < numTiles ? workerId * share : numTiles;
    const unsigned hi = lo + share < numTiles ? lo + share : numTiles;
    unsigned spikesBefore = 0, spikes = 0, eligibleBefore = 0, eligible = 0;
    for (unsigned i = 0; i < numTiles; ++i) {
      if (i == lo) {
        spikesBefore = spikes;
        eligibleBefore = eligible;
      }
      spikes += tileCounts[2 * i];
      eligible += tileCounts[2 * i + 1];
    }
    const unsigned listedSpikes = spikes < capacity ? spikes : capacity;
    unsigned pos = spikesBefore < capacity ? spikesBefore : capacity;
    for (unsigned i = lo; i < hi; ++i)
      pos = snn::appendEntries(ids, membrane, spikeIds[i], spikeMembrane[i], tileCounts[2 * i],
                               pos, capacity);
    const unsigned eligibleStart = listedSpikes + eligibleBefore;
    pos = eligibleStart < capacity ? eligibleStart : capacity;
    for (unsigned i = lo; i < hi; ++i)
      pos = snn::appendEntries(ids, membrane, eligibleIds[i], eligibleMembrane[i],
                               tileCounts[2 * i + 1], pos, capacity);
    if (workerId + 1 == workers) {
      const unsigned listedEnd = listedSpikes + eligible;
      const unsigned listed = listedEnd < capacity ? listedEnd : capacity;
      if (listed < capacity)
        __builtin_memset(&ids[listed], 0, (capacity - listed) * sizeof(int));
      counts[0] = listedSpikes;
      counts[1] = listed;
      counts[2] = spikes;
      counts[3] = spikes + eligible;
    }
    return true;
  }

};

