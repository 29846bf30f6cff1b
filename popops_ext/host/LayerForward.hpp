// Forward pass of one layer over the whole time loop on the host.
//
// Feed-forward layers run tile-major: each tile owns its neurons' state and
// weight block and walks all steps on its own (the block stays in cache);
// the tiles' lists are merged afterwards. A recurrent layer needs the
// layer's previous-step spikes on every tile, so all tiles advance one step
// at a time with one barrier per step, each tile reading the other tiles'
// spikes of step t-1 in tile order. With sample groups (TilePartition.hpp)
// the unit of work is a tile's neurons for a group's samples; a recurrent
// layer then runs each group's tiles on one thread, with no barrier.
#pragma once
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "IdBuckets.hpp"
#include "LayerViews.hpp"
#include "MemoryBudget.hpp"
#include "StepLists.hpp"
#include "TileLayout.hpp"
#include "TileListHistory.hpp"
#include "TilePartition.hpp"

namespace snn {

struct ForwardOptions {
  unsigned capacity; // 0: auto
  unsigned overflow; // OverflowPolicy
  bool keepDenseState;
  unsigned numThreads;
  // [T x B x out] feed-forward currents W x[t], computed by the caller (a GEMM,
  // where the input is dense enough for one to beat the spike matmul), or null:
  // the tiles then add their input rows themselves. Its rows are
  // inputCurrentsStride floats apart (>= out).
  const float *inputCurrents = nullptr;
  unsigned inputCurrentsStride = 0;
  // The state before step 0, [B x out] each (a previous call's last step: its
  // membrane, synaptic current and 0/1 spikes, which reset at step 0 and, in a
  // recurrent layer, are its input), or null: zero.
  const float *initialMembrane = nullptr;
  const float *initialSynaptic = nullptr;
  const float *initialSpikes = nullptr;
  bool returnState = false; // the bindings copy the last step's state out
  unsigned sampleGroups = 1; // see SampleGroups; results do not depend on it
  // What the list histories may take (MemoryBudget.hpp); outlives the call.
  MemoryBudget *budget = nullptr;
  // Where a layer of one tile that lists every neuron (exact gradients, automatic
  // capacity; see directRows) writes each row's list, [T x B x out] ids and
  // membrane, and the compact copy of the ids, [T x B x out] too: straight from
  // the neuron update rather than through the history and combine(), which
  // moved every entry twice more. Null: the history.
  int32_t *directIds = nullptr;
  float *directMembrane = nullptr;
  int32_t *directCompact = nullptr;
  // Where the sparse path also takes the input list's private copy (the
  // backward's, StepLists.hpp) while it repacks the list; null: none. Where an
  // id lies outside the input (copy->outside), run() stops before any tile
  // works.
  ListCopy *inputCopy = nullptr;
};

// Whether a layer call can write its lists in place (ForwardOptions::directIds):
// one tile, so each row's list is that tile's own; every neuron listed (a
// spiking layer with an infinite gradient window), so K is the layer's width
// and every row starts at row * out; feed-forward, since a recurrent layer
// reads its last lists from the history; and the automatic capacity.
bool directRows(const NeuronSpec &neuron, unsigned numTiles, bool recurrent, unsigned capacity);

struct OverflowAt {
  bool happened = false;
  unsigned step = 0, sample = 0, spikes = 0, needed = 0;
};

struct ForwardStats {
  unsigned capacity = 0;       // K of the emitted lists
  unsigned neededCapacity = 0; // max over rows of spikes + eligible-only
  std::int64_t spikesDropped = 0;
  std::int64_t eligibleDropped = 0;
  std::int64_t totalSpikes = 0; // spikes fired, including dropped ones
  std::int64_t eligibleListed = 0; // eligible-only entries in the emitted lists
  std::int64_t listedSpikes = 0;   // spike entries in the emitted lists
  OverflowAt overflowAt;
};

template <typename WT> class LayerForward {
public:
  // weight [out x in]; recWeight [out x out] or null. Arrays must outlive the object.
  LayerForward(const Shape &shape, const NeuronSpec &neuron, const TileLayout &layout,
               const SpikeListView &input, const WT *weight, const WT *recWeight,
               const ForwardOptions &options);

  // Runs the time loop. Dense outputs [T x B x out] may be null; the readout
  // always writes denseMembrane, spiking layers only when keepDenseState.
  void run(float *denseMembrane, float *denseSynaptic);

  // Spiking layers, after run(): decides K (stats().capacity) ...
  const ForwardStats &decideCapacity();
  // ... then where each row's entries start in the compact copy of the list
  // (the listed ids, row after row), rows + 1 offsets ...
  std::vector<std::size_t> compactRowStarts() const;
  // ... then writes ids/membrane [T x B x K], counts [T x B x 2], the spike
  // values [T x B x K] (1 at the spike entries, 0 elsewhere) and the compact
  // copy of the ids at compactIds (compactRowStarts()'s offsets). Where run()
  // wrote the lists in place (directIds), ids and membrane hold them already
  // (ids [T x B x K]), and compactIds is written only where it is not
  // directCompact.
  void combine(int32_t *ids, int32_t *counts, float *membrane, float *values,
               int32_t *compactIds, const std::size_t *compactStart);
  // ... and where the capacity dropped spikes, each row's dropped spike ids
  // (ascending; appended to `dropped`) and their number, droppedCounts [T x B]:
  // a dropped spike still reset its neuron, which the backward must know.
  void droppedSpikes(const int32_t *counts, std::vector<int32_t> &dropped,
                     int32_t *droppedCounts) const;

  const ForwardStats &stats() const { return stats_; }
  // After run(): the (step, sample group) pieces whose input spikes the tiles
  // added id by id (IdBuckets.hpp).
  std::size_t bucketedSteps() const { return inputBuckets_.bucketedSegments(); }

  // After run(): the state after the last step, [B x out] each (synaptic and
  // spikes may be null; a readout has no spikes).
  void finalState(float *membrane, float *synaptic, float *spikes) const;

private:
  // One unit's state: tile j's neurons for group g's B samples; its history
  // rows are (step, sample of the group).
  struct TileState {
    AlignedVector<float> currents, membrane, synaptic, spiked; // [B x rowLength]
    TileListHistory history;
    // Recurrent only: the unit's listed spikes of the last two steps,
    // [parity x B x width] and [parity x B].
    std::vector<int> recentIds;
    std::vector<unsigned> recentCounts;
    std::vector<int> recurrentIds; // the layer's spikes of t-1 gathered for one sample
    // In place (directIds): a row's eligible-only entries, until the row's spike
    // count says where they go.
    AlignedVector<int> eligibleIds;
    AlignedVector<float> eligibleMembrane;
  };

  TileState &unit(unsigned j, unsigned g) { return units_[std::size_t(g) * layout_.numTiles() + j]; }
  const TileState &unit(unsigned j, unsigned g) const {
    return units_[std::size_t(g) * layout_.numTiles() + j];
  }
  // The group of a (step, sample) row of the call, and the row in its units.
  std::pair<unsigned, std::size_t> localRow(std::size_t row) const;
  void buildBlocks(unsigned j);
  void prepareUnit(unsigned j, unsigned g);
  void stepUnit(unsigned j, unsigned g, unsigned t, float *denseMembrane, float *denseSynaptic);
  void addRecurrentInput(unsigned j, unsigned g, unsigned t, unsigned b, float *currents);
  void emitRecent(unsigned j, unsigned g, unsigned t, unsigned b);
  void combineDirect(const int32_t *ids, int32_t *counts, float *values, int32_t *compactIds,
                     const std::size_t *compactStart);

  Shape shape_;
  NeuronSpec neuron_;
  const TileLayout &layout_;
  SpikeListView input_;
  StepLists inputLists_; // input_ repacked for SpikeMatmul, by run()
  // The input spikes of each (step, group) by id: a segment whose ids repeat
  // across its samples adds each id's row to all of them at once.
  IdBuckets inputBuckets_;
  const WT *weight_;
  const WT *recWeight_;
  ForwardOptions options_;
  unsigned recurrentCap_; // most spikes per row that recur (drop/error with fixed K)
  SampleGroups groups_;
  TileBlocks<WT> blocks_, recBlocks_;
  std::vector<TileState> units_; // [groups x tiles]
  std::vector<unsigned> rowNeeded_; // each row's spikes + eligible-only, by decideCapacity
  ForwardStats stats_;
  // A scalar beta or threshold, filled per neuron: LifUpdate takes it as one
  // value (bit for bit every neuron's, so the results are the same).
  bool commonBeta_ = false, commonThreshold_ = false;
};

} // namespace snn
