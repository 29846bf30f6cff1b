// Forward synaptic input of one tile for one sample and step: the weight rows
// of the listed input spikes are summed into the tile's float currents, which
// the step's first input sets (accumulate = 0) and a second one, the recurrent
// input, adds to (accumulate = 1): the neuron update reads the currents and
// leaves them, with no load of stale currents or clearing pass between. The
// tile's weight block is [numInputs x rowLength] (rowLength = the tile's
// neuron count padded for vector width), so every spike reads one contiguous
// row. A recurrent layer feeds its own previous-step list through the same
// vertex with the tile's block of V^T.
#pragma once
#include <poplar/HalfFloat.hpp>
#include <poplar/Vertex.hpp>

#include "RowKernels.hpp"

template <typename WT> class SpikeMatmul : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<unsigned> numIds;
  poplar::Input<poplar::Vector<WT>> weights;
  poplar::InOut<poplar::Vector<float>> currents;
  unsigned rowLength;
  unsigned accumulate;

  bool compute() {
    if (accumulate)
      snn::addRows<true>(&currents[0], &weights[0], &ids[0], *numIds, rowLength);
    else
      snn::addRows<false>(&currents[0], &weights[0], &ids[0], *numIds, rowLength);
    return true;
  }
};
