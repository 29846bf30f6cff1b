// Forward synaptic input of one tile for a step's samples: the weight rows of
// each sample's listed input spikes are summed into its float currents, which
// the step's first input sets (accumulate = 0) and a second one, the recurrent
// input, adds to (accumulate = 1): the neuron update reads the currents and
// leaves them, with no load of stale currents or clearing pass between. The
// tile's weight block is [numInputs x rowLength] (rowLength = the tile's
// neuron count padded for vector width), so every spike reads one contiguous
// row. The samples' lists follow one another in ids: sample b's spikes are
// ids[ends[b-1], ends[b]) (ends[-1] = 0), its currents
// currents[b * rowLength, (b + 1) * rowLength). One sample is a list and its
// count: ends = {count}. A recurrent layer feeds its own previous-step list
// through the same vertex with the tile's block of V^T.
#pragma once
#include <poplar/HalfFloat.hpp>
#include <poplar/Vertex.hpp>

#include "RowKernels.hpp"

template <typename WT> class SpikeMatmul : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<poplar::Vector<unsigned>> ends;
  poplar::Input<poplar::Vector<WT, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weights;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currents;
  unsigned rowLength;
  unsigned accumulate;

  bool compute() {
    const unsigned numSamples = ends.size();
    if (accumulate)
      snn::addRows<true>(&currents[0], &weights[0], &ids[0], &ends[0], numSamples, rowLength);
    else
      snn::addRows<false>(&currents[0], &weights[0], &ids[0], &ends[0], numSamples, rowLength);
    return true;
  }
};
