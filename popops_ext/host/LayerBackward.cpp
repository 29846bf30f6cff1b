#include "LayerBackward.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <poplar/HalfFloat.hpp>

#include "BucketRows.hpp"
#include "Prefetch.hpp"
#include "StateGrad.hpp"
#include "SurrogateDerivative.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"
#include "UnitSchedule.hpp"
#include "WeightGrad.hpp"

namespace snn {

template <typename WT>
LayerBackward<WT>::LayerBackward(const Shape &shape, const NeuronSpec &neuron,
                                 const TileLayout &layout, const BackwardInputs &in,
                                 const WT *weight, const WT *recWeight,
                                 const GradNeeds &needs, unsigned numThreads,
                                 unsigned sampleGroups)
    : shape_(shape), neuron_(neuron), layout_(layout), in_(in), weight_(weight),
      recWeight_(recWeight), needs_(needs), numThreads_(numThreads),
      groups_(shape.batch, sampleGroups) {
  const unsigned numTiles = layout.numTiles(), G = groups_.count();
  blocks_.resize(numTiles);
  recBlocks_.resize(numTiles);
  weightGrad_.resize(G);
  recWeightGrad_.resize(G);
  for (unsigned g = 0; g < G; ++g) {
    weightGrad_[g].resize(numTiles);
    recWeightGrad_[g].resize(numTiles);
  }
  units_.resize(std::size_t(numTiles) * G);
  zeros_.assign(layout.maxRowLength(), 0.0f);
  // A scalar threshold or beta, filled per neuron: the state-grad vertices take
  // it as one value (bit for bit every neuron's, so the results are the same).
  commonThreshold_ = neuron.model != MODEL_READOUT && sameEverywhere(neuron.threshold,
                                                                      shape.outFeatures);
  commonBeta_ = sameEverywhere(neuron.beta, shape.outFeatures);
  byOutputs_ = prefersOutputEntries();
  // Every step's dL/dI is kept for the walk of the input's entries (or for the
  // caller); otherwise the steps that the state gradient reads back.
  depth_ = ((needs.input && !byOutputs_) || needs.current) ? shape.steps : (recWeight ? 2 : 1);
}

namespace {
enum class InputGradWalk { Auto, Inputs, Outputs };

InputGradWalk inputGradWalk() {
  const char *mode = std::getenv("SNN_IPU_INPUT_GRAD");
  if (!mode || !*mode || std::strcmp(mode, "auto") == 0)
    return InputGradWalk::Auto;
  if (std::strcmp(mode, "inputs") == 0)
    return InputGradWalk::Inputs;
  if (std::strcmp(mode, "outputs") == 0)
    return InputGradWalk::Outputs;
  throw std::invalid_argument(std::string("SNN_IPU_INPUT_GRAD is '") + mode +
                              "'; expected auto, inputs or outputs");
}
} // namespace

// dL/dx[t, b, i] = sum_n W[n, i] dL/dI[t, b, n] at the input list's entries.
// Walked by the input's entries, that is one dot product over the layer's
// outputs per entry (inputGrad). Where dL/dI obeys dL/dI[t] = E[t] + beta
// dL/dI[t + 1], E[t] being the surrogate terms at the output list's entries
// (a leaky neuron whose reset does not gate the carry, one beta for every
// neuron), the sum is also Y[t, b] = beta Y[t + 1, b] + sum of E's entries
// times their rows of W: one row over the inputs per output entry
// (inputGradByOutputs). A synaptic neuron (one alpha too) carries dL/dU so,
// and dL/dI[t] = dL/dU[t] + alpha dL/dI[t + 1]: a second sum over the inputs,
// Z[t] = Y[t] + alpha Z[t + 1]. The walk with the fewer row elements, weighed by
// their cost, is taken; each gives its own rounding of the same sums.
template <typename WT> bool LayerBackward<WT>::prefersOutputEntries() const {
  if (!needs_.input)
    return false;
  const InputGradWalk walk = inputGradWalk(); // (a wrong setting is named on any layer)
  const bool synaptic = neuron_.model == MODEL_SYNAPTIC;
  if (in_.input.capacity == 0 || neuron_.model == MODEL_READOUT ||
      neuron_.reset == RESET_ZERO || !commonBeta_ ||
      (synaptic && !sameEverywhere(neuron_.alpha, shape_.outFeatures)))
    return false;
  if (walk != InputGradWalk::Auto)
    return walk == InputGradWalk::Outputs;
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  std::uint64_t inEntries = 0, outEntries = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    inEntries += in_.input.listedAt(row);
    outEntries += in_.output.listedAt(row);
  }
  // A row of the output walk also scales and gathers its sums: one more row
  // (two for the synaptic current's second carry).
  // Each output entry streams its whole row from memory, where the input walk
  // reads a row once for the samples that list its id (IdBuckets.hpp) and
  // dots it with dL/dI rows in cache: on L (1466-1466, 48 samples) the walks
  // broke even at 0.73 of the input walk's elements (docs/performance.md,
  // "Round 28").
  const std::uint64_t rowTerms = rows * (synaptic ? 2 : 1);
  return 10 * (outEntries + rowTerms) * shape_.inFeatures < 7 * inEntries * shape_.outFeatures;
}

template <typename WT> void LayerBackward<WT>::buildBlocks(unsigned j) {
  if (needs_.input && !byOutputs_)
    blocks_.build(layout_, j, weight_, shape_.inFeatures);
  if (recWeight_)
    recBlocks_.build(layout_, j, recWeight_, shape_.outFeatures);
}

template <typename WT> void LayerBackward<WT>::prepareUnit(unsigned j, unsigned g) {
  const unsigned B = groups_.size(g), len = layout_.rowLength(j), width = layout_.width(j);
  if (needs_.weight)
    weightGrad_[g].allocate(layout_, j, shape_.inFeatures);
  if (needs_.recWeight && recWeight_)
    recWeightGrad_[g].allocate(layout_, j, shape_.outFeatures);
  TileState &s = unit(j, g);
  s.carry.assign(std::size_t(B) * len, 0.0f);
  if (neuron_.model == MODEL_SYNAPTIC)
    s.carrySynaptic.assign(std::size_t(B) * len, 0.0f);
  s.notSpiked.assign(len, 1.0f);
  if (runsInPlace_) {
    s.runIds.resize(width);
    s.runMembrane.resize(width);
    s.runGrad.resize(width);
  }
  // The state-grad vertices write every neuron of a slot before it is read;
  // only the padding (read by the whole-row kernels) must be zero.
  if (!currentOut_) {
    s.currentGrad.resize(std::size_t(depth_) * B * len);
    if (len != width)
      for (std::size_t r = 0; r < std::size_t(depth_) * B; ++r)
        std::fill(s.currentGrad.data() + r * len + width, s.currentGrad.data() + (r + 1) * len,
                  0.0f);
  }
  if (recWeight_)
    s.partials.assign(std::size_t(layout_.numTiles()) * width, 0.0f);
  s.betaGrad.assign(len, 0.0f);
  s.thresholdGrad.assign(len, 0.0f);
  s.alphaGrad.assign(len, 0.0f);
  s.biasGrad.assign(len, 0.0f);
}

template <typename WT>
float *LayerBackward<WT>::currentGradAt(unsigned j, unsigned g, unsigned t, unsigned b) {
  if (currentOut_)
    return currentOut_ +
           (std::size_t(t) * shape_.batch + groups_.first(g) + b) * shape_.outFeatures +
           layout_.first(j);
  const std::size_t slot = t % depth_;
  return unit(j, g).currentGrad.data() +
         (slot * groups_.size(g) + b) * std::size_t(layout_.rowLength(j));
}

template <typename WT>
float *LayerBackward<WT>::currentGradOfRow(unsigned j, std::size_t row) {
  const unsigned B = shape_.batch;
  const std::size_t t = row / B;
  const auto [g, b] = groups_.locate(unsigned(row - t * B));
  return currentGradAt(j, g, unsigned(t), b);
}

// The output list is validated ascending within its spike part and within its
// eligible part, so a tile's entries form one run in each; one merge-like walk
// per row finds where every tile's runs start.
template <typename WT>
void LayerBackward<WT>::splitRows(std::size_t firstRow, std::size_t endRow) {
  const unsigned numTiles = layout_.numTiles();
  for (std::size_t row = firstRow; row < endRow; ++row) {
    const int32_t *ids = in_.output.idsAt(row);
    // Each part of the row ascends: a binary search per tile boundary (a scan
    // would read all of a row of exact gradients, which lists every neuron).
    auto split = [&](unsigned begin, unsigned end, unsigned *out) {
      const int32_t *k = ids + begin;
      for (unsigned j = 0; j < numTiles; ++j) {
        k = std::lower_bound(k, ids + end, int32_t(layout_.first(j)));
        out[j] = unsigned(k - ids);
      }
      out[numTiles] = end;
    };
    const std::size_t at = row * (numTiles + 1);
    const unsigned spikes = in_.output.spikesAt(row), listed = in_.output.listedAt(row);
    unsigned *s = spikeSplit_.data() + at, *e = eligibleSplit_.data() + at;
    split(0, spikes, s);
    if (listed == shape_.outFeatures) {
      // Every neuron listed: tile j's eligible-only entries are its neurons that
      // did not spike, after the spikes of the tiles before it.
      for (unsigned j = 0; j <= numTiles; ++j)
        e[j] = spikes + (j < numTiles ? layout_.first(j) : shape_.outFeatures) - s[j];
    } else {
      split(spikes, listed, e);
    }
  }
}

// Whether every row of the output list lists every neuron (exact gradients).
template <typename WT> bool LayerBackward<WT>::listsEveryNeuron() const {
  const unsigned N = shape_.outFeatures;
  if (in_.output.capacity != N)
    return false;
  for (std::size_t row = 0, rows = std::size_t(shape_.steps) * shape_.batch; row < rows; ++row)
    if (in_.output.listedAt(row) != N)
      return false;
  return true;
}

// A tile's spikes in a row of the output list.
template <typename WT>
unsigned LayerBackward<WT>::tileSpikes(unsigned j, std::size_t row) const {
  if (!tileMajor_)
    return in_.output.spikesAt(row);
  const unsigned *s = spikeSplit_.data() + row * (layout_.numTiles() + 1);
  return s[j + 1] - s[j];
}

namespace {
// A tile's run of a list is a handful of entries; a library memcpy call per
// run (six per tile and row) cost more than the copying. The attribute keeps
// GCC from turning the loop back into that call.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
void copyRun(const int32_t *ids, const float *membrane, const float *grad, unsigned m,
             int32_t *idsOut, float *membraneOut, float *gradOut) {
  for (unsigned k = 0; k < m; ++k) {
    idsOut[k] = ids[k];
    membraneOut[k] = membrane[k];
    gradOut[k] = grad[k];
  }
}
} // namespace

// Where each tile's runs go in the tile-major copy: tile after tile, each
// tile's rows in order.
template <typename WT> void LayerBackward<WT>::planTileRuns() {
  const unsigned numTiles = layout_.numTiles();
  const std::size_t rows = std::size_t(shape_.steps) * shape_.batch;
  tileStart_.resize(std::size_t(numTiles) * (rows + 1));
  std::size_t at = 0;
  for (unsigned j = 0; j < numTiles; ++j) {
    std::size_t *start = tileStart_.data() + j * (rows + 1);
    for (std::size_t row = 0; row < rows; ++row) {
      start[row] = at;
      const unsigned *s = spikeSplit_.data() + row * (numTiles + 1);
      const unsigned *e = eligibleSplit_.data() + row * (numTiles + 1);
      at += (s[j + 1] - s[j]) + (e[j + 1] - e[j]);
    }
    start[rows] = at;
  }
  tileIds_.resize(at);
  tileMembrane_.resize(at);
  tileGrad_.resize(at);
}

// Tile j's two runs of a row (its spikes, then its eligible-only entries)
// copied side by side to ids, membrane and grad; returns their length.
template <typename WT>
unsigned LayerBackward<WT>::copyTileRow(unsigned j, std::size_t row, int32_t *ids,
                                        float *membrane, float *grad) const {
  const unsigned numTiles = layout_.numTiles();
  const unsigned *s = spikeSplit_.data() + row * (numTiles + 1);
  const unsigned *e = eligibleSplit_.data() + row * (numTiles + 1);
  const int32_t *rowIds = in_.output.idsAt(row);
  const float *rowMem = in_.membrane + row * in_.output.capacity;
  const float *rowGrad = in_.gradOut + row * in_.output.capacity;
  const unsigned ns = s[j + 1] - s[j], ne = e[j + 1] - e[j];
  copyRun(rowIds + s[j], rowMem + s[j], rowGrad + s[j], ns, ids, membrane, grad);
  copyRun(rowIds + e[j], rowMem + e[j], rowGrad + e[j], ne, ids + ns, membrane + ns,
          grad + ns);
  return ns + ne;
}

// Row after row: each row's entries are read once, in order, and written to
// the tiles' runs.
template <typename WT>
void LayerBackward<WT>::copyTileRuns(std::size_t firstRow, std::size_t endRow) {
  for (std::size_t row = firstRow; row < endRow; ++row)
    for (unsigned j = 0; j < layout_.numTiles(); ++j) {
      const std::size_t at = tileRunStart(j, row);
      copyTileRow(j, row, tileIds_.data() + at, tileMembrane_.data() + at,
                  tileGrad_.data() + at);
    }
}

// Where tile j's run of a row starts in the tile-major copy (row = rows: its end).
template <typename WT>
std::size_t LayerBackward<WT>::tileRunStart(unsigned j, std::size_t row) const {
  return tileStart_[j * (std::size_t(shape_.steps) * shape_.batch + 1) + row];
}

// A tile's listed entries of a row: its runs in the tile-major copy, or, on
// a layer of one tile, the row itself, read in place (where the rows are read
// in place by several tiles, listed(j, g, row)).
template <typename WT>
typename LayerBackward<WT>::Listed LayerBackward<WT>::listed(unsigned j, std::size_t row) {
  if (tileMajor_) {
    const std::size_t at = tileRunStart(j, row);
    return {tileIds_.data() + at, tileMembrane_.data() + at, tileGrad_.data() + at,
            unsigned(tileRunStart(j, row + 1) - at)};
  }
  return wholeRow(row);
}

// Unit (j, g)'s listed entries of a row: listed(j, row), or, where the rows are
// read in place (runsInPlace_), the tile's two runs copied side by side into the
// unit's scratch.
template <typename WT>
typename LayerBackward<WT>::Listed LayerBackward<WT>::listed(unsigned j, unsigned g,
                                                            std::size_t row) {
  if (!runsInPlace_)
    return listed(j, row);
  TileState &u = unit(j, g);
  const unsigned n = copyTileRow(j, row, u.runIds.data(), u.runMembrane.data(),
                                 u.runGrad.data());
  return {u.runIds.data(), u.runMembrane.data(), u.runGrad.data(), n};
}

// All of a row's listed entries, in list order, read in place.
template <typename WT>
typename LayerBackward<WT>::Listed LayerBackward<WT>::wholeRow(std::size_t row) const {
  const std::size_t base = row * in_.output.capacity;
  return {in_.output.idsAt(row), in_.membrane + base, in_.gradOut + base,
          in_.output.listedAt(row)};
}

// The tile's spikes of a row: the first tileSpikes(j, row) entries of its run.
template <typename WT>
const int32_t *LayerBackward<WT>::tileSpikeIds(unsigned j, std::size_t row) {
  if (!runsInPlace_)
    return listed(j, row).ids;
  return in_.output.idsAt(row) + spikeSplit_[row * (layout_.numTiles() + 1) + j];
}

// The tile's listed spikes of a row (ids, numIds) and its dropped ones
// together: points ids at the tile's copy of both where any were dropped.
template <typename WT>
unsigned LayerBackward<WT>::withDropped(unsigned j, unsigned g, std::size_t row,
                                        const int32_t *&ids, unsigned numIds) {
  const int32_t *all = in_.droppedIds + in_.droppedStart[row];
  const int32_t *allEnd = in_.droppedIds + in_.droppedStart[row + 1];
  const int first = int(layout_.first(j));
  const int32_t *begin = std::lower_bound(all, allEnd, first);
  const int32_t *end = std::lower_bound(begin, allEnd, first + int(layout_.width(j)));
  if (begin == end)
    return numIds;
  std::vector<int> &s = unit(j, g).prevSpikes;
  s.assign(ids, ids + numIds);
  s.insert(s.end(), begin, end);
  ids = s.data();
  return unsigned(s.size());
}

// dL/dS at the tile's listed entries of step t gains what they feed into
// step t+1 through the recurrent weights: added into the tile-major copy's
// dL/dS (the layer's private copy).
template <typename WT>
void LayerBackward<WT>::addRecurrentGrad(unsigned j, unsigned g, unsigned t, unsigned b,
                                         std::size_t row) {
  TileState &s = unit(j, g);
  const unsigned numTiles = layout_.numTiles(), width = layout_.width(j);
  const std::size_t at = tileRunStart(j, row);
  unsigned numListed = unsigned(tileRunStart(j, row + 1) - at);
  InputSpikeGrad<WT> dot;
  dot.ids.bind(tileIds_.data() + at, numListed);
  dot.numIds.bind(&numListed);
  for (unsigned i = 0; i < numTiles; ++i) {
    const unsigned len = layout_.rowLength(i);
    dot.weights.bind(recBlocks_.block(i), recBlocks_.blockSize(i));
    dot.currentGrad.bind(currentGradAt(i, g, t + 1, b), len);
    dot.partials.bind(s.partials.data() + std::size_t(i) * width, width);
    dot.rowLength = len;
    dot.compute();
  }
  PartialReduce reduce;
  reduce.partials.bind(s.partials.data(), s.partials.size());
  reduce.out.bind(tileGrad_.data() + at, numListed);
  reduce.numOut.bind(&numListed);
  reduce.numPartials = numTiles;
  reduce.stride = width;
  reduce.compute();
}

// What stepUnit reads of one row outside the unit's own state and the
// tile-major copy (which it reads in order).
template <typename WT> void LayerBackward<WT>::prefetchRow(unsigned j, std::size_t row) {
  const unsigned B = shape_.batch;
  if (runsInPlace_) { // the tile's two runs
    const std::size_t at = row * (layout_.numTiles() + 1), base = row * in_.output.capacity;
    for (const unsigned *split : {spikeSplit_.data() + at, eligibleSplit_.data() + at}) {
      prefetchRun(in_.output.idsAt(row), split[j], split[j + 1]);
      prefetchRun(in_.membrane + base, split[j], split[j + 1]);
      prefetchRun(in_.gradOut + base, split[j], split[j + 1]);
    }
  } else if (neuron_.model != MODEL_READOUT && !tileMajor_) {
    const std::size_t base = row * in_.output.capacity, n = in_.output.listedAt(row);
    prefetchRun(in_.output.idsAt(row), 0, n);
    prefetchRun(in_.membrane + base, 0, n);
    prefetchRun(in_.gradOut + base, 0, n);
    if (row >= B)
      prefetchRun(in_.output.idsAt(row - B), 0, in_.output.spikesAt(row - B));
  }
  if (needs_.weight)
    prefetchRun(in_.input.idsAt(row), 0, in_.input.spikesAt(row));
}

template <typename WT>
void LayerBackward<WT>::stepUnit(unsigned j, unsigned g, unsigned t) {
  TileState &s = unit(j, g);
  const unsigned B = shape_.batch, N = shape_.outFeatures, T = shape_.steps;
  const unsigned Bg = groups_.size(g), b0 = groups_.first(g);
  const unsigned len = layout_.rowLength(j), width = layout_.width(j), first = layout_.first(j);
  static const int noIds[1] = {0};
  // The step's input spikes by id, where dL/dW walks them so.
  const IdBuckets::Segment spikes =
      needs_.weight ? spikeBuckets_.segment(std::size_t(t) * groups_.count() + g, len)
                    : IdBuckets::Segment{};

  for (unsigned lb = 0; lb < Bg; ++lb) {
    const unsigned b = b0 + lb; // in the batch; lb in the group
    const std::size_t row = std::size_t(t) * B + b;
    // Rows run b upwards within the group and steps downwards.
    if (lb + kRowsAhead < Bg)
      prefetchRow(j, row + kRowsAhead);
    else if (t > 0 && lb + kRowsAhead - Bg < Bg)
      prefetchRow(j, row + kRowsAhead - B - Bg);
    float *currentGrad = currentGradAt(j, g, t, lb);
    float *carry = s.carry.data() + std::size_t(lb) * len;
    // U[t-1] or syn[t-1] of the tile (at t = 0 the initial state's, or zero);
    // unbound when its gradient is not needed.
    auto prevDense = [&](const float *dense, const float *initial, bool needed) {
      if (!needed)
        return std::make_pair(static_cast<const float *>(nullptr), std::size_t(0));
      const float *prev = t > 0     ? dense + (row - B) * N + first
                          : initial ? initial + std::size_t(b) * N + first
                                    : zeros_.data();
      return std::make_pair(prev, std::size_t(width));
    };
    // Sample b's initial spikes (all tiles), ascending.
    const int32_t *initialIds = nullptr, *initialEnd = nullptr;
    if (t == 0 && in_.initialSpikeIds) {
      initialIds = in_.initialSpikeIds + in_.initialSpikeStart[b];
      initialEnd = in_.initialSpikeIds + in_.initialSpikeStart[b + 1];
    }

    if (neuron_.model == MODEL_READOUT) {
      ReadoutStateGrad v;
      v.outputGrad.bind(in_.gradOut + row * N + first, width);
      v.beta.bind(neuron_.beta + first, width);
      const auto prevU = prevDense(in_.membrane, in_.initialMembrane, needs_.beta);
      v.prevMembrane.bind(prevU.first, prevU.second);
      v.carry.bind(carry, width);
      v.currentGrad.bind(currentGrad, width);
      v.betaGrad.bind(s.betaGrad.data(), width);
      v.numNeurons = width;
      v.compute();
    } else {
      if (recWeight_ && t + 1 < T) // (a recurrent layer's list is always tile-major)
        addRecurrentGrad(j, g, t, lb, row);
      const Listed listed = this->listed(j, g, row);
      unsigned numListed = listed.size;
      const int32_t *prevIds = noIds;
      unsigned numPrev = 0;
      if (t > 0) { // the tile's spikes of step t-1: the first entries of its run
        prevIds = tileSpikeIds(j, row - B);
        numPrev = tileSpikes(j, row - B);
      } else if (initialIds) { // the tile's initial spikes
        const int32_t *begin = std::lower_bound(initialIds, initialEnd, int(first));
        prevIds = begin;
        numPrev = unsigned(std::lower_bound(begin, initialEnd, int(first + width)) - begin);
      }
      if (t > 0 && in_.droppedStart)
        numPrev = withDropped(j, g, row - B, prevIds, numPrev);
      auto bindCommon = [&](auto &v) {
        v.listIds.bind(listed.ids, numListed);
        v.listMembrane.bind(listed.membrane, numListed);
        v.listGrad.bind(listed.grad, numListed);
        v.numListed.bind(&numListed);
        v.prevSpikeIds.bind(prevIds, numPrev);
        v.numPrevSpikes.bind(&numPrev);
        v.beta.bind(neuron_.beta + first, width);
        v.threshold.bind(neuron_.threshold + first, commonThreshold_ ? 1 : width);
        const auto prevU = prevDense(in_.denseMembrane, in_.initialMembrane, needs_.beta);
        v.prevMembrane.bind(prevU.first, prevU.second);
        v.carry.bind(carry, width);
        v.notSpiked.bind(s.notSpiked.data(), width);
        v.currentGrad.bind(currentGrad, width);
        v.betaGrad.bind(s.betaGrad.data(), width);
        v.thresholdGrad.bind(s.thresholdGrad.data(), needs_.threshold ? width : 0);
        v.numNeurons = width;
        v.firstNeuron = first;
        v.reset = neuron_.reset;
        v.surrogateKind = neuron_.surrogateKind;
        v.surrogateP0 = neuron_.surrogateP0;
        v.surrogateP1 = neuron_.surrogateP1;
      };
      if (neuron_.model == MODEL_SYNAPTIC) {
        SynapticStateGrad v;
        bindCommon(v);
        const auto prevSyn = prevDense(in_.denseSynaptic, in_.initialSynaptic, needs_.alpha);
        v.prevSynaptic.bind(prevSyn.first, prevSyn.second);
        v.alpha.bind(neuron_.alpha + first, width);
        v.carrySynaptic.bind(s.carrySynaptic.data() + std::size_t(lb) * len, width);
        v.alphaGrad.bind(s.alphaGrad.data(), width);
        v.compute();
      } else {
        LifStateGrad v;
        bindCommon(v);
        if (commonBeta_)
          v.beta.bind(neuron_.beta, 1);
        v.compute();
      }
    }

    if (needs_.weight || needs_.bias) {
      WeightGradScatter scatter;
      unsigned numIds = needs_.weight && !spikes.bucketed ? in_.input.spikesAt(row) : 0;
      scatter.ids.bind(in_.input.idsAt(row), numIds);
      scatter.numIds.bind(&numIds);
      scatter.currentGrad.bind(currentGrad, len);
      if (needs_.weight)
        scatter.weightGrad.bind(weightGrad_[g].block(j), weightGrad_[g].blockSize(j));
      if (needs_.bias)
        scatter.biasGrad.bind(s.biasGrad.data(), len);
      scatter.rowLength = len;
      shim::runWorkers(scatter);
    }
    if (recWeight_ && needs_.recWeight && (t > 0 || initialIds)) {
      // V's gradient meets the step's recurrent input: S[t-1], the initial spikes at t = 0.
      WeightGradScatter scatter;
      unsigned numIds = t > 0 ? in_.output.spikesAt(row - B) : unsigned(initialEnd - initialIds);
      if (t == 0 && in_.initialRecurrentCap > 0)
        numIds = std::min(numIds, in_.initialRecurrentCap);
      scatter.ids.bind(t > 0 ? in_.output.idsAt(row - B) : initialIds, numIds);
      scatter.numIds.bind(&numIds);
      scatter.currentGrad.bind(currentGrad, len);
      scatter.weightGrad.bind(recWeightGrad_[g].block(j), recWeightGrad_[g].blockSize(j));
      scatter.rowLength = len;
      shim::runWorkers(scatter);
    }
  }
  if (spikes.bucketed)
    bucketWeightGrad(j, g, t, spikes);
}

// dL/dW of the step's input spikes, id after id: each listed id's row of the
// tile's block takes the dL/dI rows of the samples that list it, in sample
// order, in registers, so every element adds what WeightGradScatter would add
// row by row, in the same order.
template <typename WT>
void LayerBackward<WT>::bucketWeightGrad(unsigned j, unsigned g, unsigned t,
                                         const IdBuckets::Segment &seg) {
  const unsigned len = layout_.rowLength(j);
  float *block = weightGrad_[g].block(j);
  const float *currentGrad = currentGradAt(j, g, t, 0); // the group's rows, len apart
  unsigned begin = 0;
  for (unsigned k = 0; k < seg.numIds; ++k) {
    if (k + 2 < seg.numIds)
      snn::prefetchRow<1, 1>(block + std::size_t(unsigned(seg.ids[k + 2])) * len);
    const unsigned n = seg.ends[k] - begin;
    addRows<true>(block + std::size_t(unsigned(seg.ids[k])) * len, currentGrad,
                  seg.entries + begin, &n, 1, len);
    begin = seg.ends[k];
  }
}

// Tile-major over the thread's share of rows, so each tile's weight block is
// read from cache rather than memory; each entry's partials are added into
// gradIn tile after tile, the same order as one PartialReduce over all tiles.
// A step whose listed ids repeat across its samples (inputBuckets_) is walked
// id by id (bucketInputGrad); every entry's dot product has the same
// arithmetic either way (rowDots), so both walks give the same sums.
namespace {
// inputGrad shares whole steps out where each thread gets this many or more.
constexpr unsigned kStepsPerThread = 4;
} // namespace

template <typename WT>
void LayerBackward<WT>::inputGrad(unsigned thread, unsigned numThreads, float *gradIn) {
  const unsigned numTiles = layout_.numTiles(), B = shape_.batch, T = shape_.steps;
  const unsigned Kin = in_.input.capacity;
  std::vector<float> partials(Kin);
  InputSpikeGrad<WT> dot;
  dot.partials.bind(partials.data(), Kin);
  PartialReduce reduce;
  reduce.partials.bind(partials.data(), Kin);
  reduce.numPartials = 1;
  reduce.stride = Kin;
  // A row's cost, in 8-float vector operations: clearing its Kin values, and per
  // listed entry and tile a dot product of the tile's row and the sum into
  // gradIn (~2), plus a vertex call per tile. In a wide layer the entries
  // dominate, in a readout of few neurons the clearing.
  std::uint64_t perEntry = 0;
  for (unsigned i = 0; i < numTiles; ++i)
    perEntry += layout_.rowLength(i) / 8 + 2;
  auto rowCost = [&](std::size_t row) {
    return Kin / 8 + in_.input.listedAt(row) * perEntry + 4 * numTiles;
  };
  // Whole steps a thread where there are enough to go round (a bucketed step is
  // walked whole), rows otherwise, so that a call of one step still uses every
  // thread.
  std::pair<std::size_t, std::size_t> share;
  if (T >= kStepsPerThread * numThreads) {
    share = costShare(T, thread, numThreads, [&](std::size_t t) {
      std::uint64_t cost = 0;
      for (std::size_t row = t * B; row < (t + 1) * B; ++row)
        cost += rowCost(row);
      return cost;
    });
    share = {share.first * B, share.second * B};
  } else {
    share = costShare(std::size_t(T) * B, thread, numThreads, rowCost);
  }
  // The list padding must read 0 too; each thread clears its own rows.
  std::memset(gradIn + share.first * Kin, 0, (share.second - share.first) * Kin * sizeof(float));
  std::vector<const float *> grads(B);
  for (unsigned i = 0; i < numTiles; ++i) {
    const unsigned len = layout_.rowLength(i);
    dot.weights.bind(blocks_.block(i), blocks_.blockSize(i));
    dot.rowLength = len;
    for (std::size_t row = share.first; row < share.second; ++row) {
      const std::size_t t = row / B;
      if (row == t * B && row + B <= share.second) {
        if (const IdBuckets::Segment seg = inputBuckets_.segment(t, len); seg.bucketed) {
          for (unsigned b = 0; b < B; ++b)
            grads[b] = currentGradOfRow(i, row + b);
          bucketInputGrad(seg, i, grads.data(), gradIn + row * Kin);
          row += B - 1;
          continue;
        }
      }
      if (row + kRowsAhead < share.second) {
        const std::size_t ahead = row + kRowsAhead;
        prefetchRun(in_.input.idsAt(ahead), 0, in_.input.listedAt(ahead));
        prefetchRun(gradIn + ahead * Kin, 0, in_.input.listedAt(ahead));
      }
      unsigned n = in_.input.listedAt(row);
      if (n == 0)
        continue;
      dot.ids.bind(in_.input.idsAt(row), n);
      dot.numIds.bind(&n);
      dot.currentGrad.bind(currentGradOfRow(i, row), len);
      dot.compute();
      reduce.out.bind(gradIn + row * Kin, n);
      reduce.numOut.bind(&n);
      reduce.compute();
    }
  }
}

// One step's listed entries on tile i, id by id: each id's weight row, read
// once, against the dL/dI rows (grads[b], sample b) of the entries that list
// it, eight at a time; an id's last few entries join the next ids' in
// (weight row, dL/dI row) pairs, four at a time, so that few entries an id
// still keep several chains in flight. Each sum is added into its entry of
// gradIn (the step's [B x Kin]).
template <typename WT>
void LayerBackward<WT>::bucketInputGrad(const IdBuckets::Segment &seg, unsigned i,
                                        const float *const *grads, float *gradIn) {
  const unsigned Kin = in_.input.capacity, len = layout_.rowLength(i);
  const WT *block = blocks_.block(i);
  const float *g[8];
  float out[8];
  float *at[8];
  const WT *pairW[4];
  const float *pairG[4];
  float *pairAt[4];
  unsigned pending = 0;
  auto target = [&](unsigned e) {
    return gradIn + std::size_t(seg.entries[e]) * Kin + seg.positions[e];
  };
  auto flushPairs = [&](auto r) {
    constexpr unsigned R = decltype(r)::value;
    rowDotsOfPairs<R>(pairW + pending - R, pairG + pending - R, len, out);
    for (unsigned k = 0; k < R; ++k)
      *pairAt[pending - R + k] += out[k];
    pending -= R;
  };
  unsigned e = 0;
  for (unsigned k = 0; k < seg.numIds; ++k) {
    if (k + 2 < seg.numIds)
      snn::prefetchRow<1, 0>(block + std::size_t(unsigned(seg.ids[k + 2])) * len);
    const WT *row = block + std::size_t(unsigned(seg.ids[k])) * len;
    const unsigned end = seg.ends[k];
    for (; e + 8 <= end; e += 8) {
      for (unsigned m = 0; m < 8; ++m) {
        g[m] = grads[seg.entries[e + m]];
        at[m] = target(e + m);
      }
      rowDotsOfRow<8>(row, g, len, out);
      for (unsigned m = 0; m < 8; ++m)
        *at[m] += out[m];
    }
    for (; e < end; ++e) {
      pairW[pending] = row;
      pairG[pending] = grads[seg.entries[e]];
      pairAt[pending++] = target(e);
      if (pending == 4)
        flushPairs(std::integral_constant<unsigned, 4>{});
    }
  }
  if (pending >= 2)
    flushPairs(std::integral_constant<unsigned, 2>{});
  if (pending == 1)
    flushPairs(std::integral_constant<unsigned, 1>{});
}

// The E terms of rows [firstRow, endRow): dL/dS times the surrogate's
// derivative at each listed entry (as the state gradient adds them), the
// row's spikes then its eligible-only entries (the list's own order, however
// its neurons are cut into tiles), zeros left out.
template <typename WT>
void LayerBackward<WT>::surrogateTerms(std::size_t firstRow, std::size_t endRow) {
  const unsigned numTiles = layout_.numTiles();
  for (std::size_t row = firstRow; row < endRow; ++row) {
    int32_t *ids = termIds_.data() + termStart_[row];
    float *values = termValues_.data() + termStart_[row];
    unsigned n = 0;
    // (read in place, the row is in list order already: one run of all its entries)
    const unsigned walkTiles = runsInPlace_ ? 1 : numTiles;
    for (unsigned part = 0; part < 2; ++part)
      for (unsigned j = 0; j < walkTiles; ++j) {
        const Listed listed = runsInPlace_ ? wholeRow(row) : this->listed(j, row);
        const unsigned spikes = runsInPlace_ ? in_.output.spikesAt(row) : tileSpikes(j, row);
        for (unsigned k = part ? spikes : 0, end = part ? listed.size : spikes; k < end; ++k) {
          const int32_t id = listed.ids[k];
          const float thr = neuron_.threshold[commonThreshold_ ? 0 : unsigned(id)];
          const float e = listed.grad[k] * surrogateDerivative(neuron_.surrogateKind,
                                                               neuron_.surrogateP0,
                                                               neuron_.surrogateP1,
                                                               listed.membrane[k] - thr);
          if (e != 0.0f) {
            ids[n] = id;
            values[n++] = e;
          }
        }
      }
    termCount_[row] = n;
  }
}

// Sample b's sums Y[t, b] over inputs [begin, end) (a whole number of
// 8-float vectors from begin; the tail of the inputs in the last part), steps
// downwards: Y[t] = beta Y[t + 1] + step t's E terms times their weight rows
// (and Z[t] = Y[t] + alpha Z[t + 1] for a synaptic layer), then gathered into
// sample b's input entries whose ids fall in the part.
// writesPadding: this part also clears the rows' list padding.
template <typename WT>
void LayerBackward<WT>::inputGradOfSample(unsigned b, unsigned begin, unsigned end,
                                          bool writesPadding, float *gradIn) {
  const unsigned B = shape_.batch, Kin = in_.input.capacity, N = shape_.inFeatures;
  const unsigned width = end - begin;
  const float beta = neuron_.beta[0];
  const bool synaptic = neuron_.model == MODEL_SYNAPTIC;
  const float alpha = synaptic ? neuron_.alpha[0] : 0.0f;
  AlignedVector<float> y(width, 0.0f), z(synaptic ? width : 0, 0.0f);
  for (unsigned t = shape_.steps; t-- > 0;) {
    const std::size_t row = std::size_t(t) * B + b;
    scaleAddRows(y.data(), beta, weight_ + begin, termIds_.data() + termStart_[row],
                 termValues_.data() + termStart_[row], termCount_[row], N, width);
    if (synaptic) // (as the state gradient's gSyn = gV + cs, cs = alpha gSyn)
      for (unsigned i = 0; i < width; ++i)
        z[i] = y[i] + alpha * z[i];
    const float *sums = synaptic ? z.data() : y.data();
    const int32_t *ids = in_.input.idsAt(row);
    const unsigned listed = in_.input.listedAt(row);
    float *out = gradIn + row * Kin;
    for (unsigned k = 0; k < listed; ++k) {
      const unsigned i = unsigned(ids[k]) - begin; // (wraps below begin)
      if (i < width)
        out[k] = sums[i];
    }
    if (writesPadding)
      std::fill(out + listed, out + Kin, 0.0f);
  }
}

// dL/d(input values) by the output list's entries (prefersOutputEntries), a
// sample's steps in order on one thread. Where the samples are fewer than
// twice the threads, the inputs are cut into parts of whole vectors, a
// (sample, part) per unit of work; each input's sums are the same whatever
// the cut.
template <typename WT> void LayerBackward<WT>::inputGradByOutputs(float *gradIn) {
  const unsigned B = shape_.batch, T = shape_.steps, N = shape_.inFeatures;
  const unsigned vectors = (N + 7) / 8;
  unsigned parts = 1;
  while (B * parts < 2 * numThreads_ && parts * 2 <= vectors / 8)
    parts *= 2;
  auto partBegin = [&](unsigned p) { return p == parts ? N : 8 * (vectors * p / parts); };
  const std::size_t rows = std::size_t(T) * B, units = std::size_t(B) * parts;
  termStart_.resize(rows + 1);
  termCount_.resize(rows);
  termStart_[0] = 0;
  for (std::size_t row = 0; row < rows; ++row)
    termStart_[row + 1] = termStart_[row] + in_.output.listedAt(row);
  termIds_.resize(termStart_[rows]);
  termValues_.resize(termStart_[rows]);
  ThreadPool &pool = ThreadPool::instance();
  pool.run(effectiveThreads(numThreads_, rows), [&](unsigned thread, unsigned team) {
    const auto share = costShare(rows, thread, team,
                                 [&](std::size_t row) { return in_.output.listedAt(row) + 1; });
    surrogateTerms(share.first, share.second);
  });
  auto cost = [&](std::size_t u) {
    const unsigned b = unsigned(u / parts), p = unsigned(u % parts);
    const std::uint64_t width = partBegin(p + 1) - partBegin(p);
    std::uint64_t c = 0;
    for (unsigned t = 0; t < T; ++t) {
      const std::size_t row = std::size_t(t) * B + b;
      c += (in_.output.listedAt(row) + 1) * width + in_.input.listedAt(row);
    }
    return c;
  };
  pool.run(effectiveThreads(numThreads_, units), [&](unsigned thread, unsigned team) {
    const auto share = costShare(units, thread, team, cost);
    for (std::size_t u = share.first; u < share.second; ++u) {
      const unsigned b = unsigned(u / parts), p = unsigned(u % parts);
      inputGradOfSample(b, partBegin(p), partBegin(p + 1), p == 0, gradIn);
    }
  });
}

// Group 0's block of tile j becomes the sum of all groups' blocks, added in
// group order.
template <typename WT>
void LayerBackward<WT>::sumGroups(std::vector<GradBlocks> &grads, unsigned j) {
  float *__restrict sum = grads[0].block(j);
  const std::size_t n = grads[0].blockSize(j);
  for (std::size_t g = 1; g < grads.size(); ++g) {
    const float *__restrict part = grads[g].block(j);
    for (std::size_t k = 0; k < n; ++k)
      sum[k] += part[k];
  }
}

template <typename WT>
void LayerBackward<WT>::writeWeightGrad(unsigned j, const BackwardOutputs &out) {
  if (!out.gradWeight || weightGrad_[0].blockSize(j) == 0) // not needed, or written already
    return;
  sumGroups(weightGrad_, j);
  weightGrad_[0].writeMatrix(layout_, j, shape_.inFeatures, out.gradWeight);
  for (GradBlocks &grad : weightGrad_)
    grad.release(j);
}

template <typename WT>
void LayerBackward<WT>::writeOutputs(unsigned j, const BackwardOutputs &out) {
  const unsigned first = layout_.first(j), width = layout_.width(j), G = groups_.count();
  writeWeightGrad(j, out);
  if (out.gradRecWeight) {
    sumGroups(recWeightGrad_, j);
    recWeightGrad_[0].writeMatrix(layout_, j, shape_.outFeatures, out.gradRecWeight);
  }
  // The groups' sums, added in group order.
  auto write = [&](float *dst, std::vector<float> TileState::*grad) {
    if (!dst)
      return;
    std::memcpy(dst + first, (unit(j, 0).*grad).data(), width * sizeof(float));
    for (unsigned g = 1; g < G; ++g) {
      const float *part = (unit(j, g).*grad).data();
      for (unsigned n = 0; n < width; ++n)
        dst[first + n] += part[n];
    }
  };
  write(out.gradBias, &TileState::biasGrad);
  write(out.gradBeta, &TileState::betaGrad);
  write(out.gradThreshold, &TileState::thresholdGrad);
  write(out.gradAlpha, &TileState::alphaGrad);
  if (out.gradCurrent && !currentOut_) {
    const unsigned B = shape_.batch, N = shape_.outFeatures;
    for (std::size_t row = 0; row < std::size_t(shape_.steps) * B; ++row)
      std::memcpy(out.gradCurrent + row * N + first, currentGradOfRow(j, row),
                  width * sizeof(float));
  }
}

template <typename WT> void LayerBackward<WT>::run(const BackwardOutputs &out) {
  const unsigned numTiles = layout_.numTiles(), T = shape_.steps, G = groups_.count();
  if (out.gradCurrent && depth_ == T && numTiles == 1 && layout_.rowLength(0) == layout_.width(0))
    currentOut_ = out.gradCurrent; // its rows are the tile's, unpadded
  const unsigned tileThreads = effectiveThreads(numThreads_, numTiles);
  ThreadPool &pool = ThreadPool::instance();
  tileMajor_ = neuron_.model != MODEL_READOUT && (numTiles > 1 || recWeight_);
  // Rows that list every neuron (exact gradients) are read in place, each tile's two
  // runs of a row copied side by side as it reaches the row: the runs are hundreds
  // of entries, where a tile-major copy of the whole list cost more than it saved.
  runsInPlace_ = tileMajor_ && !recWeight_ && listsEveryNeuron();
  if (tileMajor_) {
    const std::size_t rows = std::size_t(T) * shape_.batch;
    const unsigned rowThreads = effectiveThreads(numThreads_, rows);
    spikeSplit_.resize(rows * (numTiles + 1));
    eligibleSplit_.resize(rows * (numTiles + 1));
    // Both passes cost a row its listed entries (and a scan of the tiles).
    auto rowCost = [&](std::size_t row) { return in_.output.listedAt(row) + numTiles; };
    pool.run(rowThreads, [&](unsigned thread, unsigned team) {
      const auto share = costShare(rows, thread, team, rowCost);
      splitRows(share.first, share.second);
    });
    if (!runsInPlace_) {
      planTileRuns();
      pool.run(rowThreads, [&](unsigned thread, unsigned team) {
        const auto share = costShare(rows, thread, team, rowCost);
        copyTileRuns(share.first, share.second);
      });
    }
  }
  const unsigned rowLength = layout_.maxRowLength();
  if (const BucketPolicy policy = bucketPolicy();
      needs_.weight &&
      policy.appliesTo(rowLength, std::uint64_t(shape_.inFeatures) * rowLength * sizeof(float), 1))
    spikeBuckets_.buildSpikes(policy, in_.input, T, groups_, shape_.inFeatures, numThreads_,
                              false);
  auto runUnit = [&](unsigned j, unsigned g) {
    prepareUnit(j, g);
    for (unsigned t = T; t-- > 0;)
      stepUnit(j, g, t);
  };
  if (G == 1 && !recWeight_) {
    std::atomic<unsigned> next{0};
    pool.run(tileThreads, [&](unsigned, unsigned) {
      for (unsigned j; (j = next.fetch_add(1)) < numTiles;) {
        buildBlocks(j);
        runUnit(j, 0);
        // The tile's dL/dW is complete: out of the block while it is in cache, and
        // the block freed, so the blocks of all tiles never coexist with dL/dW.
        writeWeightGrad(j, out);
      }
    });
  } else if (G == 1) {
    pool.run(tileThreads, [&](unsigned thread, unsigned team) {
      const auto share = threadShare(numTiles, thread, team);
      for (std::size_t j = share.first; j < share.second; ++j) {
        buildBlocks(unsigned(j));
        prepareUnit(unsigned(j), 0);
      }
      pool.barrier();
      for (unsigned t = T; t-- > 0;) {
        for (std::size_t j = share.first; j < share.second; ++j)
          stepUnit(unsigned(j), 0, t);
        pool.barrier();
      }
    });
  } else {
    runSampleGroups(
        numThreads_, numTiles, G, recWeight_ != nullptr, [&](unsigned j) { buildBlocks(j); },
        runUnit,
        [&](unsigned g) {
          for (unsigned j = 0; j < numTiles; ++j)
            prepareUnit(j, g);
          for (unsigned t = T; t-- > 0;)
            for (unsigned j = 0; j < numTiles; ++j)
              stepUnit(j, g, t);
        });
  }
  if (byOutputs_) {
    inputGradByOutputs(out.gradIn);
  } else if (needs_.input && in_.input.capacity > 0) {
    const unsigned B = shape_.batch;
    const unsigned rowThreads = effectiveThreads(numThreads_, std::size_t(T) * B);
    // (inputGrad walks by ids only where its threads take whole steps)
    if (const BucketPolicy policy = bucketPolicy();
        policy.appliesTo(rowLength, std::uint64_t(shape_.inFeatures) * rowLength * sizeof(WT),
                         2) &&
        T >= kStepsPerThread * rowThreads) {
      inputBuckets_.build(
          policy, policy.minInputGradReuse, T, shape_.inFeatures, numThreads_, false, true,
          [&](std::size_t t) { return t * B; }, [&](std::size_t) { return B; },
          [&](std::size_t row) { return in_.input.idsAt(row); },
          [&](std::size_t row) { return in_.input.listedAt(row); });
    }
    pool.run(rowThreads,
             [&](unsigned thread, unsigned team) { inputGrad(thread, team, out.gradIn); });
  }
  pool.run(tileThreads, [&](unsigned thread, unsigned team) {
    const auto share = threadShare(numTiles, thread, team);
    for (std::size_t j = share.first; j < share.second; ++j)
      writeOutputs(unsigned(j), out);
  });
}

template class LayerBackward<float>;
template class LayerBackward<half>;

} // namespace snn
