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

// InputSpikeGrad over the entries [first, first + partials.size()) of a list of
// *numIds entries: the IPU graph splits a sample's list into such ranges, one
// worker each, where a tile has fewer samples than workers. The entries are
// independent (each its own dot product, whose arithmetic does not depend on
// the group rowDots puts it in), so the ranges give the whole list's sums.
template <typename WT> class InputSpikeGradRange : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> ids; // the range's entries
  poplar::Input<unsigned> numIds;         // entries of the whole list
  poplar::Input<poplar::Vector<WT, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weights;
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currentGrad;
  poplar::Output<poplar::Vector<float>> partials; // the range's entries
  unsigned rowLength;
  unsigned first;

  bool compute() {
    const WT *w = &weights[0];
    const float *g = &currentGrad[0];
    const unsigned listed = *numIds, size = unsigned(partials.size());
    const unsigned n = listed <= first ? 0 : listed - first < size ? listed - first : size;
    if (n != 0)
      snn::rowDots(w, &ids[0], g, rowLength, &partials[0], n);
    return true;
  }
};

// The IPU graph's weight gradient: all of a tile's samples in one compute set
// (WeightGradScatter needs one per sample). Worker w owns the block's rows
// [w * share, (w + 1) * share), share = ceil(numRows / workers), and the bias
// columns of the same 8-float share; it walks the samples' lists in sample
// order and adds the rows of the ids it owns. An element is written by one
// worker only, and takes its additions in sample order and, within a sample,
// list order (a list's ids are distinct): the sums of WeightGradScatter run
// sample after sample, bit for bit. Sample b's list is ids[b * idStride ..]
// with counts[b * countStride] entries, its dL/dI currentGrad[b * rowLength ..].
class WeightGradRows : public poplar::MultiVertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<poplar::Vector<unsigned>> counts;
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currentGrad;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weightGrad;
  poplar::InOut<poplar::Vector<float>> biasGrad; // empty: no bias
  unsigned rowLength;
  unsigned idStride;
  unsigned countStride;

  bool compute(unsigned workerId) {
    const unsigned workers = numWorkers();
    const unsigned rows = weightGrad.size() / rowLength, samples = counts.size() / countStride;
    const unsigned share = (rows + workers - 1) / workers;
    const unsigned lo = workerId * share < rows ? workerId * share : rows;
    const unsigned span = lo + share < rows ? share : rows - lo;
    const unsigned chunks = (rowLength + 7) / 8, perWorker = (chunks + workers - 1) / workers;
    const unsigned biasSize = unsigned(biasGrad.size());
    const unsigned bLo = workerId * perWorker * 8 < biasSize ? workerId * perWorker * 8 : biasSize;
    const unsigned bEnd = (workerId + 1) * perWorker * 8;
    const unsigned bHi = bEnd < biasSize ? bEnd : biasSize;
    float *__restrict w = &weightGrad[0];
    for (unsigned b = 0; b < samples; ++b) {
      const float *__restrict g = &currentGrad[0] + (unsigned long)b * rowLength;
      const int *list = &ids[0] + (unsigned long)b * idStride;
      const unsigned n = counts[b * countStride];
      for (unsigned k = 0; k < n; ++k) {
        const unsigned id = unsigned(list[k]);
        if (id - lo < span) // lo <= id < lo + span, one compare
          snn::scatterRows(w, g, list + k, 1, rowLength, rowLength);
      }
      if (bHi > bLo) {
        float *__restrict gb = &biasGrad[0];
        for (unsigned c = bLo; c < bHi; ++c)
          gb[c] += g[c];
      }
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
    if (*numIds != 0)
      snn::rowDots(w, &ids[0], g, rowLength, &partials[0], *numIds);
    return true;
  }
};

// PartialReduce over the entries [first, first + out.size()) of a list of
// *numOut entries: the IPU graph splits a sample's reduction into such ranges,
// one worker each (PartialReduce is one worker for the whole list). partials
// holds the range's columns of every tile, [numPartials x stride]; each entry
// is summed in tile order, as PartialReduce sums it.
class PartialReduceRange : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> partials; // [numPartials x stride]
  poplar::InOut<poplar::Vector<float>> out;
  poplar::Input<unsigned> numOut; // entries of the whole list
  unsigned first;
  unsigned numPartials;
  unsigned stride;

  bool compute() {
    const unsigned listed = *numOut, size = unsigned(out.size());
    const unsigned n = listed <= first ? 0 : listed - first < size ? listed - first : size;
    float *__restrict o = &out[0];
    const float *__restrict p = &partials[0];
    for (unsigned i = 0; i < numPartials; ++i)
      for (unsigned k = 0; k < n; ++k)
        o[k] += p[i * stride + k];
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
