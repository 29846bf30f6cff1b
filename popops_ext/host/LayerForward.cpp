#include "LayerForward.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <poplar/HalfFloat.hpp>

#include "NeuronUpdate.hpp"
#include "SpikeListCombine.hpp"
#include "SpikeMatmul.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"

namespace snn {

template <typename WT>
LayerForward<WT>::LayerForward(const Shape &shape, const NeuronSpec &neuron,
                               const TileLayout &layout, const SpikeListView &input,
                               const WT *weight, const WT *recWeight,
                               const ForwardOptions &options)
    : shape_(shape), neuron_(neuron), layout_(layout), input_(input), weight_(weight),
      recWeight_(recWeight), options_(options) {
  const bool fixedCapacity = options.capacity > 0 && options.overflow != OVERFLOW_GROW;
  recurrentCap_ = fixedCapacity ? options.capacity : UINT_MAX;
  const unsigned numTiles = layout.numTiles();
  blocks_.resize(numTiles);
  recBlocks_.resize(numTiles);
  tiles_.resize(numTiles);
}

template <typename WT> void LayerForward<WT>::prepareTile(unsigned j) {
  const unsigned B = shape_.batch, len = layout_.rowLength(j), width = layout_.width(j);
  if (!options_.inputCurrents)
    blocks_.build(layout_, j, weight_, shape_.inFeatures);
  if (recWeight_)
    recBlocks_.build(layout_, j, recWeight_, shape_.outFeatures);
  TileState &s = tiles_[j];
  const unsigned N = shape_.outFeatures, first = layout_.first(j);
  // The tile's columns of a [B x out] initial state (zero without one).
  auto initial = [&](AlignedVector<float> &dst, const float *src) {
    dst.assign(std::size_t(B) * len, 0.0f);
    if (src)
      for (unsigned b = 0; b < B; ++b)
        std::memcpy(dst.data() + std::size_t(b) * len, src + std::size_t(b) * N + first,
                    width * sizeof(float));
  };
  s.currents.assign(std::size_t(B) * len, 0.0f);
  initial(s.membrane, options_.initialMembrane);
  if (neuron_.model == MODEL_SYNAPTIC)
    initial(s.synaptic, options_.initialSynaptic);
  if (neuron_.model == MODEL_READOUT)
    return;
  initial(s.spiked, options_.initialSpikes);
  const std::size_t rows = std::size_t(shape_.steps) * B, dense = rows * width;
  const bool allEligible = std::isinf(neuron_.gradWindow) && neuron_.gradWindow > 0;
  s.history.init(rows, dense / 16 + width, allEligible ? dense + width : dense / 8 + width);
  if (recWeight_) {
    s.recentIds.assign(2 * std::size_t(B) * width, 0);
    s.recentCounts.assign(2 * std::size_t(B), 0);
    s.recurrentIds.assign(shape_.outFeatures, 0);
    // The initial spikes as step -1's list (parity 1), the recurrent input of step 0.
    for (unsigned b = 0; options_.initialSpikes && b < B; ++b) {
      const float *spikes = options_.initialSpikes + std::size_t(b) * N + first;
      int *ids = s.recentIds.data() + (std::size_t(B) + b) * width;
      unsigned count = 0;
      for (unsigned n = 0; n < width; ++n)
        if (spikes[n] != 0.0f)
          ids[count++] = int(first + n);
      s.recentCounts[B + b] = count;
    }
  }
}

template <typename WT>
void LayerForward<WT>::finalState(float *membrane, float *synaptic, float *spikes) const {
  const unsigned B = shape_.batch, N = shape_.outFeatures;
  for (unsigned j = 0; j < layout_.numTiles(); ++j) {
    const TileState &s = tiles_[j];
    const unsigned len = layout_.rowLength(j), width = layout_.width(j), first = layout_.first(j);
    auto out = [&](float *dst, const AlignedVector<float> &src) {
      if (dst)
        for (unsigned b = 0; b < B; ++b)
          std::memcpy(dst + std::size_t(b) * N + first, src.data() + std::size_t(b) * len,
                      width * sizeof(float));
    };
    out(membrane, s.membrane);
    if (neuron_.model == MODEL_SYNAPTIC)
      out(synaptic, s.synaptic);
    if (neuron_.model != MODEL_READOUT)
      out(spikes, s.spiked);
  }
}

// The layer's listed spikes of step t-1 (all tiles, in tile order, at most
// recurrentCap_) are gathered into one list, so one SpikeMatmul adds them.
template <typename WT>
void LayerForward<WT>::addRecurrentInput(unsigned j, unsigned t, unsigned b, float *currents) {
  const unsigned B = shape_.batch, parity = (t - 1) & 1u;
  int *gathered = tiles_[j].recurrentIds.data();
  unsigned taken = 0;
  for (unsigned i = 0; i < layout_.numTiles() && taken < recurrentCap_; ++i) {
    const TileState &src = tiles_[i];
    const unsigned width = layout_.width(i);
    const unsigned take = std::min(src.recentCounts[parity * B + b], recurrentCap_ - taken);
    std::memcpy(gathered + taken, src.recentIds.data() + (std::size_t(parity) * B + b) * width,
                take * sizeof(int));
    taken += take;
  }
  SpikeMatmul<WT> mm;
  mm.ids.bind(gathered, taken);
  mm.ends.bind(&taken, 1);
  mm.weights.bind(recBlocks_.block(j), recBlocks_.blockSize(j));
  mm.currents.bind(currents, layout_.rowLength(j));
  mm.rowLength = layout_.rowLength(j);
  mm.accumulate = 1; // onto the feed-forward input
  mm.compute();
}

template <typename WT> void LayerForward<WT>::emitRecent(unsigned j, unsigned t, unsigned b) {
  TileState &s = tiles_[j];
  const unsigned B = shape_.batch, width = layout_.width(j), parity = t & 1u;
  const std::size_t row = std::size_t(t) * B + b;
  const unsigned count = s.history.counts[2 * row];
  std::memcpy(s.recentIds.data() + (std::size_t(parity) * B + b) * width,
              s.history.spikeIds.data() + s.history.spikeStart[row], count * sizeof(int));
  s.recentCounts[parity * B + b] = count;
}

template <typename WT>
void LayerForward<WT>::stepTile(unsigned j, unsigned t, float *denseMembrane,
                                float *denseSynaptic) {
  TileState &s = tiles_[j];
  const unsigned B = shape_.batch, N = shape_.outFeatures;
  const unsigned len = layout_.rowLength(j), width = layout_.width(j), first = layout_.first(j);
  const float *bias = neuron_.bias ? neuron_.bias + first : nullptr;
  const std::size_t biasSize = bias ? width : 0;

  if (options_.inputCurrents) {
    // The lanes past width stay at the zeros prepareTile wrote.
    for (unsigned b = 0; b < B; ++b)
      std::memcpy(s.currents.data() + std::size_t(b) * len,
                  options_.inputCurrents + (std::size_t(t) * B + b) * N + first,
                  width * sizeof(float));
  } else {
    SpikeMatmul<WT> mm;
    mm.ids.bind(inputLists_.ids(t), inputLists_.spikes(t));
    mm.ends.bind(inputLists_.ends(t), B);
    mm.weights.bind(blocks_.block(j), blocks_.blockSize(j));
    mm.currents.bind(s.currents.data(), s.currents.size());
    mm.rowLength = len;
    mm.accumulate = 0; // the step's first input sets the currents
    mm.compute();
  }

  for (unsigned b = 0; b < B; ++b) {
    const std::size_t row = std::size_t(t) * B + b;
    float *currents = s.currents.data() + std::size_t(b) * len;
    float *membrane = s.membrane.data() + std::size_t(b) * len;
    if (recWeight_ && (t > 0 || options_.initialSpikes))
      addRecurrentInput(j, t, b, currents);

    float *denseU = denseMembrane ? denseMembrane + row * N + first : nullptr;
    if (neuron_.model == MODEL_READOUT) {
      ReadoutUpdate v;
      v.currents.bind(currents, width);
      v.bias.bind(bias, biasSize);
      v.beta.bind(neuron_.beta + first, width);
      v.membrane.bind(membrane, width);
      v.membraneOut.bind(denseU, width);
      v.numNeurons = width;
      v.compute();
      continue;
    }

    TileListHistory &h = s.history;
    h.reserveRow(row, width);
    const std::size_t sp = h.spikeStart[row], el = h.eligibleStart[row];
    auto bindCommon = [&](auto &v) {
      v.currents.bind(currents, width);
      v.bias.bind(bias, biasSize);
      v.beta.bind(neuron_.beta + first, width);
      v.threshold.bind(neuron_.threshold + first, width);
      v.membrane.bind(membrane, width);
      v.spiked.bind(s.spiked.data() + std::size_t(b) * len, width);
      v.spikeIds.bind(h.spikeIds.data() + sp, width);
      v.spikeMembrane.bind(h.spikeMembrane.data() + sp, width);
      v.eligibleIds.bind(h.eligibleIds.data() + el, width);
      v.eligibleMembrane.bind(h.eligibleMembrane.data() + el, width);
      v.counts.bind(h.counts.data() + 2 * row, 2);
      v.numNeurons = width;
      v.firstNeuron = first;
      v.reset = neuron_.reset;
      v.gradWindow = neuron_.gradWindow;
    };
    if (neuron_.model == MODEL_SYNAPTIC) {
      float *synaptic = s.synaptic.data() + std::size_t(b) * len;
      SynapticUpdate v;
      bindCommon(v);
      v.alpha.bind(neuron_.alpha + first, width);
      v.synaptic.bind(synaptic, width);
      v.compute();
      if (denseSynaptic)
        std::memcpy(denseSynaptic + row * N + first, synaptic, width * sizeof(float));
    } else {
      LifUpdate v;
      bindCommon(v);
      v.compute();
    }
    h.closeRow(row);
    if (denseU)
      std::memcpy(denseU, membrane, width * sizeof(float));
    if (recWeight_)
      emitRecent(j, t, b);
  }
}

template <typename WT> void LayerForward<WT>::run(float *denseMembrane, float *denseSynaptic) {
  const unsigned numTiles = layout_.numTiles(), T = shape_.steps;
  const unsigned numThreads = effectiveThreads(options_.numThreads, numTiles);
  ThreadPool &pool = ThreadPool::instance();
  if (!options_.inputCurrents)
    inputLists_.build(input_, T, shape_.batch, options_.numThreads);
  if (!recWeight_) {
    std::atomic<unsigned> next{0};
    pool.run(numThreads, [&](unsigned, unsigned) {
      for (unsigned j; (j = next.fetch_add(1)) < numTiles;) {
        prepareTile(j);
        for (unsigned t = 0; t < T; ++t)
          stepTile(j, t, denseMembrane, denseSynaptic);
        blocks_.release(j);
      }
    });
    return;
  }
  pool.run(numThreads, [&](unsigned thread, unsigned team) {
    const auto share = threadShare(numTiles, thread, team);
    for (std::size_t j = share.first; j < share.second; ++j)
      prepareTile(unsigned(j));
    pool.barrier();
    for (unsigned t = 0; t < T; ++t) {
      for (std::size_t j = share.first; j < share.second; ++j)
        stepTile(unsigned(j), t, denseMembrane, denseSynaptic);
      pool.barrier();
    }
  });
}

template <typename WT> const ForwardStats &LayerForward<WT>::decideCapacity() {
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  unsigned needed = 0;
  std::int64_t spikes = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    unsigned n = 0;
    for (const TileState &s : tiles_) {
      n += s.history.counts[2 * row] + s.history.counts[2 * row + 1];
      spikes += s.history.counts[2 * row];
    }
    needed = std::max(needed, n);
  }
  stats_.neededCapacity = needed;
  stats_.totalSpikes = spikes;
  const unsigned autoCapacity = std::max(needed, 1u);
  if (options_.capacity == 0)
    stats_.capacity = autoCapacity;
  else if (options_.overflow == OVERFLOW_GROW)
    stats_.capacity = std::max(options_.capacity, autoCapacity);
  else
    stats_.capacity = options_.capacity;
  return stats_;
}

template <typename WT>
void LayerForward<WT>::combine(int32_t *ids, int32_t *counts, float *membrane,
                               float *values) {
  const unsigned B = shape_.batch, K = stats_.capacity, numTiles = layout_.numTiles();
  const std::size_t rows = std::size_t(shape_.steps) * B;
  std::vector<unsigned> rowCounts(4 * rows);
  const unsigned numThreads = effectiveThreads(options_.numThreads, rows);
  ThreadPool::instance().run(numThreads, [&](unsigned thread, unsigned team) {
    using IdEdge = poplar::Input<poplar::Vector<int>>;
    using MemEdge = poplar::Input<poplar::Vector<float>>;
    std::vector<IdEdge> spikeIds(numTiles), eligibleIds(numTiles);
    std::vector<MemEdge> spikeMem(numTiles), eligibleMem(numTiles);
    std::vector<unsigned> tileCounts(2 * numTiles);
    SpikeListCombine v;
    v.spikeIds.bind(spikeIds.data(), numTiles);
    v.eligibleIds.bind(eligibleIds.data(), numTiles);
    v.spikeMembrane.bind(spikeMem.data(), numTiles);
    v.eligibleMembrane.bind(eligibleMem.data(), numTiles);
    v.tileCounts.bind(tileCounts.data(), tileCounts.size());
    const auto share = threadShare(rows, thread, team);
    for (std::size_t row = share.first; row < share.second; ++row) {
      for (unsigned i = 0; i < numTiles; ++i) {
        const TileListHistory &h = tiles_[i].history;
        const unsigned ns = h.counts[2 * row], ne = h.counts[2 * row + 1];
        spikeIds[i].bind(h.spikeIds.data() + h.spikeStart[row], ns);
        spikeMem[i].bind(h.spikeMembrane.data() + h.spikeStart[row], ns);
        eligibleIds[i].bind(h.eligibleIds.data() + h.eligibleStart[row], ne);
        eligibleMem[i].bind(h.eligibleMembrane.data() + h.eligibleStart[row], ne);
        tileCounts[2 * i] = ns;
        tileCounts[2 * i + 1] = ne;
      }
      v.ids.bind(ids + row * K, K);
      v.membrane.bind(membrane + row * K, K);
      v.counts.bind(rowCounts.data() + 4 * row, 4);
      v.compute();
      counts[2 * row] = int32_t(rowCounts[4 * row]);
      counts[2 * row + 1] = int32_t(rowCounts[4 * row + 1]);
      float *v = values + row * K;
      std::fill(v, v + rowCounts[4 * row], 1.0f);
      std::fill(v + rowCounts[4 * row], v + K, 0.0f);
    }
  });
  for (std::size_t row = 0; row < rows; ++row) {
    const unsigned *c = rowCounts.data() + 4 * row;
    stats_.spikesDropped += c[2] - c[0];
    stats_.eligibleListed += c[1] - c[0];
    stats_.eligibleDropped += (c[3] - c[2]) - (c[1] - c[0]);
    if (c[3] > K && !stats_.overflowAt.happened)
      stats_.overflowAt = {true, unsigned(row / B), unsigned(row % B), c[2], c[3]};
  }
}

template <typename WT>
void LayerForward<WT>::droppedSpikes(const int32_t *counts, std::vector<int32_t> &dropped,
                                     int32_t *droppedCounts) const {
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  for (std::size_t row = 0; row < rows; ++row) {
    // The list kept the row's first counts[2 * row] spikes in tile order.
    unsigned rank = 0;
    const unsigned kept = unsigned(counts[2 * row]);
    const std::size_t before = dropped.size();
    for (const TileState &s : tiles_) {
      const TileListHistory &h = s.history;
      const unsigned n = h.counts[2 * row];
      const int *ids = h.spikeIds.data() + h.spikeStart[row];
      for (unsigned k = rank < kept ? std::min(n, kept - rank) : 0; k < n; ++k)
        dropped.push_back(ids[k]);
      rank += n;
    }
    droppedCounts[row] = int32_t(dropped.size() - before);
  }
}

template class LayerForward<float>;
template class LayerForward<half>;

} // namespace snn
