// Backward through the synapses of one tile for one sample and step.
#pragma once
#include <poplar/HalfFloat.hpp>
#include <poplar/Vertex.hpp>

#include "RowKernels.hpp"

// dL/dW rows (tile block layout [numInputs x rowLength], float) of the listed
// input spikes += dL/dI of the tile; dL/db += dL/dI when biasGrad is bound.
// The samples of a tile share its gradient block, so they take turns (one
// compute set each); within a sample the workers share out the row's 8-float
// chunks, so that no two write the same element and each element still adds
// its spikes in list order.
class WeightGradScatter : public poplar::MultiVertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<unsigned> numIds;
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currentGrad;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weightGrad;
  poplar::InOut<poplar::Vector<float>> biasGrad; // empty: no bias
  unsigned rowLength;

  bool compute(unsigned workerId) {
    const unsigned workers = numWorkers();
    const unsigned chunks = (rowLength + 7) / 8, perWorker = (chunks + workers - 1) / workers;
    const unsigned lo = workerId * perWorker * 8 < rowLength ? workerId * perWorker * 8 : rowLength;
    const unsigned end = (workerId + 1) * perWorker * 8;
    const unsigned hi = end < rowLength ? end : rowLength;
    const float *__restrict g = &currentGrad[0];
    if (*numIds != 0)
      snn::scatterRows(&weightGrad[0] + lo, g + lo, &ids[0], *numIds, rowLength, hi - lo);
    const unsigned biasEnd = hi < biasGrad.size() ? hi : unsigned(biasGrad.size());
    if (biasEnd > lo) {
      float *__restrict gb = &biasGrad[0];
      for (unsigned n = lo; n < biasEnd; ++n)
        gb[n] += g[n];
    }
    return true;
  }
};

// This tile's share of dL/d(input value) for each listed input entry:
// partials[k] = sum over the tile's neurons of W[n, ids[k]] * dL/dI[n].
template <typename WT> class InputSpikeGrad : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<unsigned> numIds;
  poplar::Input<poplar::Vector<WT, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weights;
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currentGrad;
  poplar::Output<poplar::Vector<float>> partials;
  unsigned rowLength;

  bool compute() {
    const WT *w = &weights[0];
    const float *g = &currentGrad[0];
    const unsigned n = *numIds;
    unsigned k = 0;
    for (; k + 8 <= n; k += 8)
      snn::rowDot8(w, &ids[k], g, rowLength, &partials[k]);
    for (; k + 4 <= n; k += 4)
      snn::rowDot4(w, &ids[k], g, rowLength, &partials[k]);
    for (; k < n; ++k)
      partials[k] = snn::rowDot(w + (unsigned long)(unsigned)ids[k] * rowLength, g,
                                rowLength);
    return true;
  }
};

// out[k] += partials[0][k] + partials[1][k] + ... in tile order, so the
// cross-tile sum never depends on scheduling.
class PartialReduce : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> partials; // [numPartials x stride]
  poplar::InOut<poplar::Vector<float>> out;
  poplar::Input<unsigned> numOut;
  unsigned numPartials;
  unsigned stride;

  bool compute() {
    float *__restrict o = &out[0];
    const float *__restrict p = &partials[0];
    const unsigned n = *numOut;
    for (unsigned i = 0; i < numPartials; ++i)
      for (unsigned k = 0; k < n; ++k)
        o[k] += p[i * stride + k];
    return true;
  }
};
