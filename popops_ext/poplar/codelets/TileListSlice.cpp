// IPU only (the host executor finds a tile's entries with std::lower_bound).
// A tile's share of one sample's combined list: the combined list holds the
// spikes in ascending id order, then the eligible-only entries in ascending
// id order, and a tile owns the contiguous ids [firstNeuron, firstNeuron +
// numNeurons), so its entries are one run in each part. Copies them, with
// their membranes and gradients, into the tile's list buffers for the
// StateGrad vertices. membrane/grad may be empty (only ids are needed for
// the previous step's spikes).
#include <poplar/Vertex.hpp>

class TileListSlice : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<poplar::Vector<float>> membrane;
  poplar::Input<poplar::Vector<float>> grad;
  poplar::Input<poplar::Vector<int>> counts; // {spikes listed, listed}
  poplar::Output<poplar::Vector<int>> outIds;
  poplar::Output<poplar::Vector<float>> outMembrane;
  poplar::Output<poplar::Vector<float>> outGrad;
  poplar::Output<unsigned> numSpikes;
  poplar::Output<unsigned> numListed;
  unsigned firstNeuron;
  unsigned numNeurons;
  unsigned spikesOnly; // 1: take the spike part only

  bool compute() {
    const int lo = int(firstNeuron), hi = int(firstNeuron + numNeurons);
    const unsigned capacity = ids.size();
    unsigned spikes = unsigned(counts[0]), listed = unsigned(counts[1]);
    // Counts come from our own SpikeListCombine; clamp anyway so that a bad
    // input can never make this vertex read or write out of bounds.
    listed = listed < capacity ? listed : capacity;
    spikes = spikes < listed ? spikes : listed;
    unsigned n = copyRun(lowerBound(0, spikes, lo), lowerBound(0, spikes, hi), 0);
    *numSpikes = n;
    if (!spikesOnly)
      n = copyRun(lowerBound(spikes, listed, lo), lowerBound(spikes, listed, hi), n);
    *numListed = n;
    return true;
  }

private:
  unsigned lowerBound(unsigned begin, unsigned end, int id) const {
    while (begin < end) {
      const unsigned mid = begin + (end - begin) / 2;
      if (ids[mid] < id)
        begin = mid + 1;
      else
        end = mid;
    }
    return begin;
  }

  unsigned copyRun(unsigned begin, unsigned end, unsigned pos) {
    const unsigned room = outIds.size();
    const bool withMembrane = membrane.size() != 0 && outMembrane.size() != 0;
    const bool withGrad = grad.size() != 0 && outGrad.size() != 0;
    for (unsigned k = begin; k < end && pos < room; ++k, ++pos) {
      outIds[pos] = ids[k];
      if (withMembrane)
        outMembrane[pos] = membrane[k];
      if (withGrad)
        outGrad[pos] = grad[k];
    }
    return pos;
  }
};
