#include "LayerForward.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <poplar/HalfFloat.hpp>

#include "BucketRows.hpp"
#include "NeuronUpdate.hpp"
#include "SpikeListCombine.hpp"
#include "SpikeMatmul.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"
#include "UnitSchedule.hpp"

namespace snn {

namespace {
// An infinite gradient window: every neuron of a spiking layer is listed (exact
// gradients), short only where a membrane is NaN or -inf.
bool listsEveryNeuron(const NeuronSpec &neuron) {
  return std::isinf(neuron.gradWindow) && neuron.gradWindow > 0;
}
} // namespace

bool directRows(const NeuronSpec &neuron, unsigned numTiles, bool recurrent, unsigned capacity) {
  return numTiles == 1 && !recurrent && neuron.model != MODEL_READOUT &&
         listsEveryNeuron(neuron) && capacity == 0;
}

template <typename WT>
LayerForward<WT>::LayerForward(const Shape &shape, const NeuronSpec &neuron,
                               const TileLayout &layout, const SpikeListView &input,
                               const WT *weight, const WT *recWeight,
                               const ForwardOptions &options)
    : shape_(shape), neuron_(neuron), layout_(layout), input_(input), weight_(weight),
      recWeight_(recWeight), options_(options), groups_(shape.batch, options.sampleGroups) {
  const bool fixedCapacity = options.capacity > 0 && options.overflow != OVERFLOW_GROW;
  recurrentCap_ = fixedCapacity ? options.capacity : UINT_MAX;
  const unsigned numTiles = layout.numTiles();
  blocks_.resize(numTiles);
  recBlocks_.resize(numTiles);
  units_.resize(std::size_t(numTiles) * groups_.count());
  commonBeta_ = sameEverywhere(neuron.beta, shape.outFeatures);
  commonThreshold_ = neuron.model != MODEL_READOUT &&
                     sameEverywhere(neuron.threshold, shape.outFeatures);
}

template <typename WT> void LayerForward<WT>::buildBlocks(unsigned j) {
  if (!options_.inputCurrents)
    blocks_.build(layout_, j, weight_, shape_.inFeatures);
  if (recWeight_)
    recBlocks_.build(layout_, j, recWeight_, shape_.outFeatures);
}

template <typename WT>
std::pair<unsigned, std::size_t> LayerForward<WT>::localRow(std::size_t row) const {
  const unsigned B = shape_.batch;
  const std::size_t t = row / B;
  const auto [g, b] = groups_.locate(unsigned(row - t * B));
  return {g, t * groups_.size(g) + b};
}

template <typename WT> void LayerForward<WT>::prepareUnit(unsigned j, unsigned g) {
  const unsigned B = groups_.size(g), b0 = groups_.first(g);
  const unsigned len = layout_.rowLength(j), width = layout_.width(j);
  TileState &s = unit(j, g);
  const unsigned N = shape_.outFeatures, first = layout_.first(j);
  // The unit's part of a [B x out] initial state (zero without one).
  auto initial = [&](AlignedVector<float> &dst, const float *src) {
    dst.assign(std::size_t(B) * len, 0.0f);
    if (src)
      for (unsigned b = 0; b < B; ++b)
        std::memcpy(dst.data() + std::size_t(b) * len, src + std::size_t(b0 + b) * N + first,
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
  MemoryBudget &budget = options_.budget ? *options_.budget : MemoryBudget::unlimited();
  if (options_.directIds) {
    // the history keeps only the counts; the lists go to their rows
    s.history.init(rows, 0, 0, budget);
    s.eligibleIds.resize(width);
    s.eligibleMembrane.resize(width);
  } else {
    s.history.init(rows, dense / 16 + width,
                   listsEveryNeuron(neuron_) ? dense + width : dense / 8 + width, budget);
  }
  if (recWeight_) {
    s.recentIds.assign(2 * std::size_t(B) * width, 0);
    s.recentCounts.assign(2 * std::size_t(B), 0);
    s.recurrentIds.assign(shape_.outFeatures, 0);
    // The initial spikes as step -1's list (parity 1), the recurrent input of step 0.
    for (unsigned b = 0; options_.initialSpikes && b < B; ++b) {
      const float *spikes = options_.initialSpikes + std::size_t(b0 + b) * N + first;
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
  const unsigned N = shape_.outFeatures;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const unsigned j = unsigned(u % layout_.numTiles()), g = unsigned(u / layout_.numTiles());
    const TileState &s = units_[u];
    const unsigned B = groups_.size(g), b0 = groups_.first(g);
    const unsigned len = layout_.rowLength(j), width = layout_.width(j), first = layout_.first(j);
    auto out = [&](float *dst, const AlignedVector<float> &src) {
      if (dst)
        for (unsigned b = 0; b < B; ++b)
          std::memcpy(dst + std::size_t(b0 + b) * N + first, src.data() + std::size_t(b) * len,
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
// recurrentCap_) are gathered into one list, so one SpikeMatmul adds them;
// b is the sample's index within group g.
template <typename WT>
void LayerForward<WT>::addRecurrentInput(unsigned j, unsigned g, unsigned t, unsigned b,
                                         float *currents) {
  const unsigned B = groups_.size(g), parity = (t - 1) & 1u;
  int *gathered = unit(j, g).recurrentIds.data();
  unsigned taken = 0;
  for (unsigned i = 0; i < layout_.numTiles() && taken < recurrentCap_; ++i) {
    const TileState &src = unit(i, g);
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

template <typename WT>
void LayerForward<WT>::emitRecent(unsigned j, unsigned g, unsigned t, unsigned b) {
  TileState &s = unit(j, g);
  const unsigned B = groups_.size(g), width = layout_.width(j), parity = t & 1u;
  const std::size_t row = std::size_t(t) * B + b;
  const unsigned count = s.history.counts[2 * row];
  std::memcpy(s.recentIds.data() + (std::size_t(parity) * B + b) * width,
              s.history.spikeIds.data() + s.history.spikeStart[row], count * sizeof(int));
  s.recentCounts[parity * B + b] = count;
}

template <typename WT>
void LayerForward<WT>::stepUnit(unsigned j, unsigned g, unsigned t, float *denseMembrane,
                                float *denseSynaptic) {
  TileState &s = unit(j, g);
  const unsigned B = groups_.size(g), b0 = groups_.first(g), N = shape_.outFeatures;
  // Rows of the dense [T x B x out] arrays.
  const std::size_t rowOfStep = std::size_t(t) * shape_.batch + b0;
  const unsigned len = layout_.rowLength(j), width = layout_.width(j), first = layout_.first(j);
  const float *bias = neuron_.bias ? neuron_.bias + first : nullptr;
  const std::size_t biasSize = bias ? width : 0;

  if (options_.inputCurrents) {
    // The lanes past width stay at the zeros prepareUnit wrote.
    for (unsigned b = 0; b < B; ++b)
      std::memcpy(s.currents.data() + std::size_t(b) * len,
                  options_.inputCurrents + (rowOfStep + b) * options_.inputCurrentsStride +
                      first,
                  width * sizeof(float));
  } else if (const IdBuckets::Segment seg =
                 inputBuckets_.segment(std::size_t(t) * groups_.count() + g, len);
             seg.bucketed) {
    std::memset(s.currents.data(), 0, std::size_t(B) * len * sizeof(float));
    addBucketRows(s.currents.data(), blocks_.block(j), seg.ids, seg.ends, seg.entries,
                  seg.numIds, len);
  } else {
    SpikeMatmul<WT> mm;
    mm.ids.bind(inputLists_.ids(t, g), inputLists_.spikes(t, g));
    mm.ends.bind(inputLists_.ends(t, g), B);
    mm.weights.bind(blocks_.block(j), blocks_.blockSize(j));
    mm.currents.bind(s.currents.data(), s.currents.size());
    mm.rowLength = len;
    mm.accumulate = 0; // the step's first input sets the currents
    mm.compute();
  }

  for (unsigned b = 0; b < B; ++b) {
    const std::size_t row = std::size_t(t) * B + b; // of the unit's history
    float *currents = s.currents.data() + std::size_t(b) * len;
    float *membrane = s.membrane.data() + std::size_t(b) * len;
    if (recWeight_ && (t > 0 || options_.initialSpikes))
      addRecurrentInput(j, g, t, b, currents);

    float *denseU = denseMembrane ? denseMembrane + (rowOfStep + b) * N + first : nullptr;
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
    // In place, the spikes go to the front of the row's list and the
    // eligible-only entries to the unit's scratch, then after the spikes.
    const std::size_t outRow = (rowOfStep + b) * N;
    int *spikeIds, *eligibleIds;
    float *spikeMembrane, *eligibleMembrane;
    if (options_.directIds) {
      spikeIds = options_.directIds + outRow;
      spikeMembrane = options_.directMembrane + outRow;
      eligibleIds = s.eligibleIds.data();
      eligibleMembrane = s.eligibleMembrane.data();
    } else {
      h.reserveRow(row, width);
      spikeIds = h.spikeIds.data() + h.spikeStart[row];
      spikeMembrane = h.spikeMembrane.data() + h.spikeStart[row];
      eligibleIds = h.eligibleIds.data() + h.eligibleStart[row];
      eligibleMembrane = h.eligibleMembrane.data() + h.eligibleStart[row];
    }
    auto bindCommon = [&](auto &v) {
      v.currents.bind(currents, width);
      v.bias.bind(bias, biasSize);
      v.beta.bind(neuron_.beta + first, width);
      v.threshold.bind(neuron_.threshold + first, width);
      v.membrane.bind(membrane, width);
      v.spiked.bind(s.spiked.data() + std::size_t(b) * len, width);
      v.spikeIds.bind(spikeIds, width);
      v.spikeMembrane.bind(spikeMembrane, width);
      v.eligibleIds.bind(eligibleIds, width);
      v.eligibleMembrane.bind(eligibleMembrane, width);
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
        std::memcpy(denseSynaptic + (rowOfStep + b) * N + first, synaptic,
                    width * sizeof(float));
    } else {
      LifUpdate v;
      bindCommon(v);
      if (commonBeta_)
        v.beta.bind(neuron_.beta, 1);
      if (commonThreshold_)
        v.threshold.bind(neuron_.threshold, 1);
      v.compute();
    }
    h.closeRow(row);
    if (options_.directIds) {
      const unsigned ns = h.counts[2 * row], ne = h.counts[2 * row + 1];
      std::memcpy(spikeIds + ns, eligibleIds, ne * sizeof(int));
      std::memcpy(spikeMembrane + ns, eligibleMembrane, ne * sizeof(float));
      // a neuron at a NaN or -inf membrane is not eligible: the rest of the row reads 0
      std::fill(spikeIds + ns + ne, spikeIds + N, 0);
      std::memcpy(options_.directCompact + outRow, spikeIds, (ns + ne) * sizeof(int));
    }
    if (denseU)
      std::memcpy(denseU, membrane, width * sizeof(float));
    if (recWeight_)
      emitRecent(j, g, t, b);
  }
}

template <typename WT> void LayerForward<WT>::run(float *denseMembrane, float *denseSynaptic) {
  const unsigned numTiles = layout_.numTiles(), T = shape_.steps, G = groups_.count();
  ThreadPool &pool = ThreadPool::instance();
  if (!options_.inputCurrents) {
    inputLists_.build(input_, T, groups_, options_.numThreads, options_.inputCopy);
    if (options_.inputCopy && options_.inputCopy->outside)
      return;
    const unsigned rowLength = layout_.maxRowLength();
    if (const BucketPolicy policy = bucketPolicy();
        policy.appliesTo(rowLength, std::uint64_t(shape_.inFeatures) * rowLength * sizeof(WT), 2))
      inputBuckets_.buildSpikes(policy, input_, T, groups_, shape_.inFeatures,
                                options_.numThreads, true);
  }
  auto runUnit = [&](unsigned j, unsigned g) {
    prepareUnit(j, g);
    for (unsigned t = 0; t < T; ++t)
      stepUnit(j, g, t, denseMembrane, denseSynaptic);
  };
  if (G == 1 && !recWeight_) {
    std::atomic<unsigned> next{0};
    pool.run(effectiveThreads(options_.numThreads, numTiles), [&](unsigned, unsigned) {
      for (unsigned j; (j = next.fetch_add(1)) < numTiles;) {
        buildBlocks(j);
        runUnit(j, 0);
        blocks_.release(j);
      }
    });
    return;
  }
  if (G == 1) {
    pool.run(effectiveThreads(options_.numThreads, numTiles), [&](unsigned thread,
                                                                  unsigned team) {
      const auto share = threadShare(numTiles, thread, team);
      for (std::size_t j = share.first; j < share.second; ++j) {
        buildBlocks(unsigned(j));
        prepareUnit(unsigned(j), 0);
      }
      pool.barrier();
      for (unsigned t = 0; t < T; ++t) {
        for (std::size_t j = share.first; j < share.second; ++j)
          stepUnit(unsigned(j), 0, t, denseMembrane, denseSynaptic);
        pool.barrier();
      }
    });
    return;
  }
  runSampleGroups(
      options_.numThreads, numTiles, G, recWeight_ != nullptr,
      [&](unsigned j) { buildBlocks(j); }, runUnit,
      [&](unsigned g) {
        for (unsigned j = 0; j < numTiles; ++j)
          prepareUnit(j, g);
        for (unsigned t = 0; t < T; ++t)
          for (unsigned j = 0; j < numTiles; ++j)
            stepUnit(j, g, t, denseMembrane, denseSynaptic);
      });
}

template <typename WT> const ForwardStats &LayerForward<WT>::decideCapacity() {
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  unsigned needed = 0;
  std::int64_t spikes = 0;
  rowNeeded_.resize(rows);
  for (std::size_t row = 0; row < rows; ++row) {
    const auto [g, local] = localRow(row);
    unsigned n = 0;
    for (unsigned j = 0; j < layout_.numTiles(); ++j) {
      const unsigned *c = unit(j, g).history.counts.data() + 2 * local;
      n += c[0] + c[1];
      spikes += c[0];
    }
    rowNeeded_[row] = n;
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

// A row lists its entries up to the capacity (SpikeListCombine), so its
// compact run is min(needed, K) long.
template <typename WT> std::vector<std::size_t> LayerForward<WT>::compactRowStarts() const {
  const std::size_t rows = rowNeeded_.size();
  std::vector<std::size_t> start(rows + 1);
  std::size_t at = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    start[row] = at;
    at += std::min(rowNeeded_[row], stats_.capacity);
  }
  start[rows] = at;
  return start;
}

// The lists are in their rows already (directIds): the counts, the values and,
// where some row lists fewer than all neurons (so that the rows of directCompact
// are not where the compact copy has them), the compact copy. Nothing is
// dropped: the capacity is automatic.
template <typename WT>
void LayerForward<WT>::combineDirect(const int32_t *ids, int32_t *counts, float *values,
                                     int32_t *compactIds, const std::size_t *compactStart) {
  const unsigned K = stats_.capacity;
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  const bool copyCompact = compactIds != options_.directCompact;
  std::vector<unsigned> spikes(rows);
  ThreadPool::instance().run(effectiveThreads(options_.numThreads, rows), [&](unsigned thread,
                                                                            unsigned team) {
    const auto share = threadShare(rows, thread, team);
    for (std::size_t row = share.first; row < share.second; ++row) {
      const auto [g, local] = localRow(row);
      const unsigned *c = unit(0, g).history.counts.data() + 2 * local;
      const unsigned ns = c[0], listed = c[0] + c[1];
      spikes[row] = ns;
      counts[2 * row] = int32_t(ns);
      counts[2 * row + 1] = int32_t(listed);
      float *v = values + row * K;
      std::fill(v, v + ns, 1.0f);
      std::fill(v + ns, v + K, 0.0f);
      if (copyCompact)
        std::memcpy(compactIds + compactStart[row], ids + row * K, listed * sizeof(int32_t));
    }
  });
  for (std::size_t row = 0; row < rows; ++row) {
    stats_.listedSpikes += spikes[row];
    stats_.eligibleListed += rowNeeded_[row] - spikes[row];
  }
}

template <typename WT>
void LayerForward<WT>::combine(int32_t *ids, int32_t *counts, float *membrane, float *values,
                               int32_t *compactIds, const std::size_t *compactStart) {
  if (options_.directIds)
    return combineDirect(ids, counts, values, compactIds, compactStart);
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
    // A row moves its entries three times (ids, membrane, the compact copy) and
    // fills K ids and values; bursts make some rows many times the mean.
    const auto share = costShare(rows, thread, team, [&](std::size_t row) {
      return 3 * (compactStart[row + 1] - compactStart[row]) + 2 * K + numTiles;
    });
    for (std::size_t row = share.first; row < share.second; ++row) {
      const auto [g, local] = localRow(row);
      for (unsigned i = 0; i < numTiles; ++i) {
        const TileListHistory &h = unit(i, g).history;
        const unsigned ns = h.counts[2 * local], ne = h.counts[2 * local + 1];
        spikeIds[i].bind(h.spikeIds.data() + h.spikeStart[local], ns);
        spikeMem[i].bind(h.spikeMembrane.data() + h.spikeStart[local], ns);
        eligibleIds[i].bind(h.eligibleIds.data() + h.eligibleStart[local], ne);
        eligibleMem[i].bind(h.eligibleMembrane.data() + h.eligibleStart[local], ne);
        tileCounts[2 * i] = ns;
        tileCounts[2 * i + 1] = ne;
      }
      v.ids.bind(ids + row * K, K);
      v.membrane.bind(membrane + row * K, K);
      v.counts.bind(rowCounts.data() + 4 * row, 4);
      v.compute();
      counts[2 * row] = int32_t(rowCounts[4 * row]);
      counts[2 * row + 1] = int32_t(rowCounts[4 * row + 1]);
      // The compact copy, while the row is in cache (a pass of its own over the
      // [T, B, K] ids cost more).
      std::memcpy(compactIds + compactStart[row], ids + row * K,
                  rowCounts[4 * row + 1] * sizeof(int32_t));
      float *v = values + row * K;
      std::fill(v, v + rowCounts[4 * row], 1.0f);
      std::fill(v + rowCounts[4 * row], v + K, 0.0f);
    }
  });
  for (std::size_t row = 0; row < rows; ++row) {
    const unsigned *c = rowCounts.data() + 4 * row;
    stats_.listedSpikes += c[0];
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
    const auto [g, local] = localRow(row);
    for (unsigned j = 0; j < layout_.numTiles(); ++j) {
      const TileListHistory &h = unit(j, g).history;
      const unsigned n = h.counts[2 * local];
      const int *ids = h.spikeIds.data() + h.spikeStart[local];
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
