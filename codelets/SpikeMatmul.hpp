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

// The IPU graph's spike matmul: SpikeMatmul's sums for all of a tile's samples,
// each sample's row cut into `parts` column ranges of whole 8-float chunks, and
// the (sample, range) items shared out over the workers in turn: with fewer
// samples than workers, a sample's row no longer waits on one worker. Sample
// b's list is ids[b * idStride ..] with counts[b * countStride] spikes, its
// currents currents[b * rowLength ..]. Every element adds its rows in list
// order, as SpikeMatmul does, so the sums are the same bit for bit.
template <typename WT> class SpikeMatmulParts : public poplar::MultiVertex {
public:
  poplar::Input<poplar::Vector<int>> ids;
  poplar::Input<poplar::Vector<unsigned>> counts;
  poplar::Input<poplar::Vector<WT, poplar::VectorLayout::SPAN, snn::kVectorAlign>> weights;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> currents;
  unsigned rowLength; // a multiple of 8
  unsigned idStride;
  unsigned countStride;
  unsigned parts;
  unsigned accumulate;

  bool compute(unsigned workerId) {
    const unsigned workers = numWorkers(), samples = unsigned(counts.size()) / countStride;
    const unsigned chunks = rowLength / 8, perPart = (chunks + parts - 1) / parts;
    unsigned turn = 0;
    for (unsigned b = 0; b < samples; ++b)
      for (unsigned p = 0; p < parts; ++p) {
        const bool mine = turn == workerId;
        turn = turn + 1 == workers ? 0 : turn + 1;
        const unsigned lo = p * perPart * 8;
        if (!mine || lo >= rowLength)
          continue;
        const unsigned hi = lo + perPart * 8 < rowLength ? lo + perPart * 8 : rowLength;
        const unsigned n = counts[b * countStride];
        float *acc = &currents[0] + (unsigned long)b * rowLength + lo;
        const WT *rows = &weights[0] + lo;
        const int *list = &ids[0] + (unsigned long)b * idStride;
        if (accumulate) {
          if (n != 0)
            add<true>(acc, rows, list, n, hi - lo);
        } else {
          add<false>(acc, rows, list, n, hi - lo);
        }
      }
    return true;
  }

private:
  template <bool Accumulate>
  void add(float *acc, const WT *rows, const int *list, unsigned n, unsigned length) {
    snn::forVectorChunks<16>(length, [&](auto v, unsigned at) {
      snn::addRowsChunk<Accumulate, decltype(v)::count>(acc + at, rows + at, list, &n, 1,
                                                        rowLength);
    });
  }
};

