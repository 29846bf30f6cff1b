// Backward pass (BPTT) of one layer over the whole time loop on the host.
//
// Each tile walks the steps downwards with dense per-neuron carries and
// accumulates its weight, bias and neuron-parameter gradients in its own
// blocks, in a fixed (step, sample) order. A recurrent layer advances all
// tiles one step at a time (one barrier per step): a tile first gathers
// dL/dS of its own listed entries from every tile's dL/dI of step t+1 in
// tile order. dL/d(input values) is a cross-tile sum, done last per
// (step, sample) row from the tiles' stored dL/dI. With sample groups
// (TilePartition.hpp) the unit of work is a tile's neurons for a group's
// samples, with its own gradient blocks; a recurrent layer runs each group's
// tiles on one thread, with no barrier; the groups' gradients are summed in
// group order at the end.
#pragma once
#include <cstdint>
#include <vector>

#include "IdBuckets.hpp"
#include "LayerViews.hpp"
#include "RawVector.hpp"
#include "TileLayout.hpp"
#include "TilePartition.hpp"

namespace snn {

struct GradNeeds {
  bool input, weight, bias, recWeight, beta, threshold, alpha;
  bool current = false; // copy dL/dI [T x B x out] out (keeps every step's dL/dI)
};

struct BackwardInputs {
  SpikeListView input;
  // Spiking models: the forward's output list [T x B x K] with the membrane
  // and dL/dvalues at its entries. Readout: membrane and gradOut are dense.
  SpikeListView output;
  const float *membrane;
  const float *gradOut;
  const float *denseMembrane; // [T x B x out] or null
  const float *denseSynaptic; // [T x B x out] or null
  // Spikes the output list's capacity dropped (overflow "drop"), which still
  // reset their neurons: row r's ids (ascending) are droppedIds[droppedStart[r]
  // .. droppedStart[r + 1]). Null when none were dropped.
  const int32_t *droppedIds;
  const std::size_t *droppedStart; // [T x B + 1]
  // The state before step 0 (a previous call's last step; null: zero), for
  // the terms of step 0: U[-1], syn[-1] [B x out], and the spikes S[-1] of
  // sample b, ids ascending: initialSpikeIds[initialSpikeStart[b] .. [b + 1]).
  const float *initialMembrane;
  const float *initialSynaptic;
  const int32_t *initialSpikeIds;
  const std::size_t *initialSpikeStart; // [B + 1]
  // How many of a sample's initial spikes were step 0's recurrent input: the
  // lowest-numbered ones, under a list capacity that drops (all of them: 0).
  unsigned initialRecurrentCap;
};

// Every pointer may be null when the gradient is not needed.
struct BackwardOutputs {
  float *gradIn;     // [T x B x Kin], written whole
  float *gradWeight; // [out x in]
  float *gradBias, *gradBeta, *gradThreshold, *gradAlpha; // [out]
  float *gradRecWeight;                                   // [out x out]
  float *gradCurrent; // [T x B x out] dL/dI (needs.current)
};

template <typename WT> class LayerBackward {
public:
  LayerBackward(const Shape &shape, const NeuronSpec &neuron, const TileLayout &layout,
                const BackwardInputs &in, const WT *weight, const WT *recWeight,
                const GradNeeds &needs, unsigned numThreads, unsigned sampleGroups = 1);
  void run(const BackwardOutputs &out);
  // After run(): the (step, sample group) pieces whose dL/dW the tiles added id
  // by id (IdBuckets.hpp).
  std::size_t bucketedSteps() const { return spikeBuckets_.bucketedSegments(); }
  // After run(): the steps whose dL/d(input values) the tiles summed id by id.
  std::size_t inputGradBucketedSteps() const { return inputBuckets_.bucketedSegments(); }
  // Whether dL/d(input values) walked the output list's entries
  // (inputGradByOutputs) rather than the input list's.
  bool inputGradWalkedOutputs() const { return byOutputs_; }

private:
  // One unit: tile j's neurons for group g's B samples.
  struct TileState {
    AlignedVector<float> carry, carrySynaptic; // [B x rowLength]
    AlignedVector<float> notSpiked;            // [rowLength]: the state-grad vertex's scratch
    RawVector<float> currentGrad; // [depth x B x rowLength]; padding zeroed
    std::vector<float> partials;                        // recurrent: [numTiles x width]
    std::vector<int> prevSpikes; // a row's listed and dropped spikes, where any were dropped
    std::vector<float> betaGrad, thresholdGrad, alphaGrad, biasGrad; // [rowLength]
    // runsInPlace_: the tile's two runs of the row being stepped, side by side
    RawVector<int32_t> runIds;
    RawVector<float> runMembrane, runGrad;
  };

  TileState &unit(unsigned j, unsigned g) { return units_[std::size_t(g) * layout_.numTiles() + j]; }
  void buildBlocks(unsigned j);
  void prepareUnit(unsigned j, unsigned g);
  void prefetchRow(unsigned j, std::size_t row);
  void stepUnit(unsigned j, unsigned g, unsigned t);
  // A tile's listed entries of one row: spikes, then eligible-only.
  struct Listed {
    const int32_t *ids;
    const float *membrane, *grad;
    unsigned size;
  };
  // Rows are the call's (step, sample); b and t name the sample in its group.
  Listed listed(unsigned j, std::size_t row);
  Listed listed(unsigned j, unsigned g, std::size_t row);
  const int32_t *tileSpikeIds(unsigned j, std::size_t row);
  Listed wholeRow(std::size_t row) const;
  bool listsEveryNeuron() const;
  unsigned tileSpikes(unsigned j, std::size_t row) const;
  std::size_t tileRunStart(unsigned j, std::size_t row) const;
  unsigned withDropped(unsigned j, unsigned g, std::size_t row, const int32_t *&ids,
                       unsigned numIds);
  void addRecurrentGrad(unsigned j, unsigned g, unsigned t, unsigned b, std::size_t row);
  void splitRows(std::size_t firstRow, std::size_t endRow);
  void planTileRuns();
  void copyTileRuns(std::size_t firstRow, std::size_t endRow);
  unsigned copyTileRow(unsigned j, std::size_t row, int32_t *ids, float *membrane,
                       float *grad) const;
  float *currentGradAt(unsigned j, unsigned g, unsigned t, unsigned b);
  float *currentGradOfRow(unsigned j, std::size_t row);
  void inputGrad(unsigned thread, unsigned numThreads, float *gradIn);
  bool prefersOutputEntries() const;
  void inputGradByOutputs(float *gradIn);
  void surrogateTerms(std::size_t firstRow, std::size_t endRow);
  void inputGradOfSample(unsigned b, unsigned begin, unsigned end, bool writesPadding,
                         float *gradIn);
  void bucketWeightGrad(unsigned j, unsigned g, unsigned t, const IdBuckets::Segment &seg);
  void bucketInputGrad(const IdBuckets::Segment &seg, unsigned i, const float *const *grads,
                       float *gradIn);
  static void sumGroups(std::vector<GradBlocks> &grads, unsigned j);
  // Tile j's dL/dW into the output matrix, its blocks then freed (once).
  void writeWeightGrad(unsigned j, const BackwardOutputs &out);
  void writeOutputs(unsigned j, const BackwardOutputs &out);

  Shape shape_;
  NeuronSpec neuron_;
  const TileLayout &layout_;
  BackwardInputs in_;
  const WT *weight_;
  const WT *recWeight_;
  GradNeeds needs_;
  unsigned numThreads_;
  SampleGroups groups_;
  unsigned depth_; // steps of dL/dI kept per unit
  // Where a layer of one tile whose rows need no padding keeps every step's
  // dL/dI when the caller wants it (needs.current): in the caller's
  // [T x B x out] itself, rather than in the units, copied out at the end.
  float *currentOut_ = nullptr;
  TileBlocks<WT> blocks_, recBlocks_;
  std::vector<GradBlocks> weightGrad_, recWeightGrad_; // [groups], each over the tiles
  std::vector<TileState> units_;                       // [groups x tiles]
  // The input spikes of each (step, group), by id: dL/dW of a segment whose
  // ids repeat across its samples is added bucket by bucket (bucketWeightGrad).
  IdBuckets spikeBuckets_;
  // The input list's listed entries of each step, by id: dL/dx of a step
  // whose ids repeat across its samples is walked id by id (bucketInputGrad).
  IdBuckets inputBuckets_;
  std::vector<float> zeros_; // U[-1] and syn[-1]
  // Where each tile's run starts in each row of the output list, spike part
  // and eligible part: [rows x (numTiles + 1)] each (spiking layers of
  // several tiles, or recurrent).
  RawVector<unsigned> spikeSplit_, eligibleSplit_;
  // The output list's entries tile-major: tile j's entries of row r (spikes,
  // then eligible-only) at [tileStart_[j * (rows + 1) + r], .. + 1). A tile
  // reads its runs of all rows in order from here, not a few entries from
  // each kilobytes-long row; a recurrent layer adds dL/dS into tileGrad_.
  bool tileMajor_ = false;
  // ... except where every row lists every neuron (exact gradients): then each
  // tile's runs are hundreds of entries, read in place (listed(j, g, row)).
  bool runsInPlace_ = false;
  // dL/dx walks the output list's entries (inputGradByOutputs), not the input's.
  bool byOutputs_ = false;
  // Its E terms: row r's non-zero ones, in list order, at [termStart_[r],
  // .. + termCount_[r]) (output ids and values).
  std::vector<std::size_t> termStart_;
  std::vector<unsigned> termCount_;
  RawVector<int32_t> termIds_;
  RawVector<float> termValues_;
  bool commonThreshold_ = false; // every neuron's threshold the same bits
  bool commonBeta_ = false;      // every neuron's beta the same bits (LIF)
  std::vector<std::size_t> tileStart_;
  // Written whole by copyTileRuns: not cleared first (with exact gradients they
  // hold every neuron of every row, and clearing them took a serial pass).
  RawVector<int32_t> tileIds_;
  RawVector<float> tileMembrane_, tileGrad_;
};

} // namespace snn
