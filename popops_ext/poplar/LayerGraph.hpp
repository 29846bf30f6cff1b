// Poplar graph builders for one spiking layer (SDK only; not built on the
// CPU). They turn a plan::LayerPlan into variables mapped to its tiles,
// compute sets of the codelets in codelets/ and one Repeat over the
// timesteps, forward and backward. The tensors crossing the boundary have
// the shapes of the emulator's layer_forward / layer_backward.
#pragma once

#include <poplar/DebugContext.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/Tensor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/Planner.hpp"

namespace snn {
namespace ipu {

// Everything about a layer that is not a tensor (the op's attributes).
struct NeuronConfig {
  unsigned model = 0; // snn::Model (codelets/Codes.hpp)
  unsigned reset = 0; // snn::ResetKind
  unsigned surrogateKind = 0;
  float surrogateP0 = 2.0f;
  float surrogateP1 = 0.0f;
  float gradWindow = 0.0f; // +inf: every neuron eligible
  bool hasBias = true;
  bool recurrent = false;
  bool keepDenseState = false; // dense U (, syn) over T, for the beta / alpha grads
  unsigned firstTile = 0;      // where the layer's tile 0 sits on the IPU
  // Something upstream differentiates the input list's values; without, backward
  // builds no input gradient, reduction or exchange of its partials.
  bool inputNeedsGrad = true;
};

struct ForwardInputs {
  poplar::Tensor inIds;     // INT [T, B, Kin]
  poplar::Tensor inCounts;  // INT [T, B, 2]
  poplar::Tensor weight;    // FLOAT/HALF [out, in]
  poplar::Tensor bias;      // FLOAT/HALF [out] (ignored without hasBias)
  poplar::Tensor recWeight; // FLOAT/HALF [out, out] (recurrent only)
  // Neuron parameters: FLOAT or HALF, widened to float32 on the tiles.
  poplar::Tensor beta;      // [out]
  poplar::Tensor threshold; // [out] (spiking only)
  poplar::Tensor alpha;     // [out] (synaptic only)
};

struct ForwardOutputs {
  // spiking models
  poplar::Tensor values;        // FLOAT [T, B, K]: 1 at spikes, 0 at eligible-only entries
  poplar::Tensor ids;           // INT [T, B, K]
  poplar::Tensor counts;        // INT [T, B, 2]: spikes listed, entries listed
  poplar::Tensor membrane;      // FLOAT [T, B, K]: U at the listed entries
  poplar::Tensor needed;        // FLOAT [T, B, 2]: spikes and entries before the capacity cut
  // FLOAT [T, B, tiles x spikeBitWords]: every spike, dropped or not, 16 to a
  // word (a float holds a 16-bit integer exactly), for the grad op
  poplar::Tensor spikeBits;
  poplar::Tensor denseMembrane; // FLOAT [T, B, N] (keepDenseState) / readout output
  poplar::Tensor denseSynaptic; // FLOAT [T, B, N] (synaptic, keepDenseState)
};

struct BackwardInputs {
  ForwardInputs forward;
  ForwardOutputs outputs;
  poplar::Tensor gradValues; // FLOAT [T, B, K] = dL/dvalues; readout: FLOAT [T, B, N] = dL/dU
};

struct BackwardOutputs {
  poplar::Tensor gradInValues;  // FLOAT [T, B, Kin]
  poplar::Tensor gradWeight;    // FLOAT [out, in]
  poplar::Tensor gradBias;      // FLOAT [out]
  poplar::Tensor gradRecWeight; // FLOAT [out, out]
  poplar::Tensor gradBeta;      // FLOAT [out]
  poplar::Tensor gradThreshold; // FLOAT [out]
  poplar::Tensor gradAlpha;     // FLOAT [out]
};

// Words of a tile's spike bits (16 neurons each) in ForwardOutputs::spikeBits:
// each tile has as many as the widest tile needs, so that no two tiles write one word.
unsigned spikeBitWords(const plan::LayerPlan &plan);

// Adds codelets/*.gp (built by popc, see CMakeLists.txt) to the graph of an op.
void addSnnCodelets(poplar::Graph &graph, const std::string &gpPath);

// What a forward time loop's set-up (LayerGraph::beginForward) leaves for the
// phases of its steps: the tiles' copies of the weights and parameters, their
// state variables, the per-sample step list and the [T, ...] outputs; and what
// one phase of a step hands the next (the step's input on the tiles, the tiles'
// partial lists gathered for the combine).
struct ForwardLoop {
  ForwardInputs in;
  ForwardOutputs out;
  // per tile: weight blocks, neuron parameters
  std::vector<poplar::Tensor> W, V, beta, thr, alpha, bias;
  poplar::Tensor noBias;
  // per tile: state, [samples, ...]
  std::vector<poplar::Tensor> cur, U, syn, spiked, spikeIds, spikeMem, eligIds, eligMem,
      tileCounts, outStep, bits;
  // per sample, on its combining tile: the step's list (step t - 1's until the combine)
  poplar::Tensor stepIds, stepMem, stepCounts;
  poplar::Tensor counts4; // [T, B, 4]: counts and needed, split by endForward
  // set by the step's phases
  std::vector<poplar::Tensor> idsT, cntT, prevIds, prevCounts;
  std::vector<poplar::Tensor> gIds, gMem, gEIds, gEMem, gCounts;
};

// The same for the backward time loop (LayerGraph::beginBackward).
struct BackwardLoop {
  BackwardInputs in;
  BackwardOutputs out;
  bool denseU = false, denseSyn = false; // dense U (, syn) histories are read
  std::vector<poplar::Tensor> W, V, beta, thr, alpha;
  poplar::Tensor noFloat;
  // per tile: carries, accumulators, the step's slice of the list
  std::vector<poplar::Tensor> carry, curGrad, gBeta, carrySyn, notSpiked, gThr, gAlpha, listIds,
      listMem, listGrad, nums, prevList, prevNums, gW, gV, gB, partials, recPartials;
  // per sample, on its reducing tile
  poplar::Tensor stepRecGrad, stepGradIn;
  // step t - 1 of the forward's outputs is row t of these
  poplar::Tensor prevIdsAll, prevCountsAll, prevBitsAll, prevDenseU, prevDenseSyn;
  // set by the step's phases
  poplar::Tensor gradT; // dL/dvalues[t] ([B, K]; readout dL/dU[t], [B, N])
  std::vector<poplar::Tensor> idsT, cntT, oIds, oCnt, oMem, pIds, pCnt, pBits, pU, pSyn,
      gradLocal, recGathered, gathered;
};

class LayerGraph {
public:
  LayerGraph(poplar::Graph &graph, const plan::LayerPlan &plan, const NeuronConfig &config,
             const poplar::Type &weightType, const poplar::DebugContext &dc);

  // A [rows, cols] weight laid out so that tile j holds the rows of its
  // neurons (the op offers it to PopART so the per-call block copy stays on tile).
  poplar::Tensor createWeight(unsigned cols, const poplar::DebugContext &dc) const;

  // The layer on its own: set-up, one Repeat over T of the phases below, each
  // in its own compute set or exchange, and the outputs.
  ForwardOutputs forward(poplar::program::Sequence &prog, const ForwardInputs &in);
  BackwardOutputs backward(poplar::program::Sequence &prog, const BackwardInputs &in);

  // The phases, one builder each, in the manner of poplibs' popsparse (plan and
  // cost model in plan/, vertices in codelets/): a compute-set phase adds its
  // vertices, each with its cost estimate (plan/PerformanceEstimation.hpp), to
  // the compute set it is given, so that several layers' phases can share one
  // (a fused time loop); an exchange phase adds its Copy programs to a Sequence.
  // `t` is the step counter (UNSIGNED_INT [1]) of the loop they run in.
  // Forward (ForwardPhases.cpp):
  ForwardLoop beginForward(poplar::program::Sequence &prog, const ForwardInputs &in);
  // An exchange phase adds its popops operations (the step slices, zeroing) to
  // `ops` and its Copy programs to `copies`: the same Sequence for a layer on its
  // own, two where a fused loop gathers every layer's copies into one phase.
  // Exchange: step t of the input list onto every tile, sliced from in.inIds /
  // in.inCounts, or given as [B, Kin] / [B, 2] tensors (stepIds, stepCounts).
  void exchangeInput(poplar::program::Sequence &ops, poplar::program::Sequence &copies,
                     ForwardLoop &L, const poplar::Tensor &t);
  void exchangeInput(poplar::program::Sequence &copies, ForwardLoop &L,
                     const poplar::Tensor &stepIds, const poplar::Tensor &stepCounts);
  void addSpikeMatmul(poplar::ComputeSet cs, ForwardLoop &L);     // I[t] = W x[t]
  void addRecurrentMatmul(poplar::ComputeSet cs, ForwardLoop &L); // I[t] += V S[t-1]
  void addNeuronUpdate(poplar::ComputeSet cs, ForwardLoop &L);    // state; the tiles' lists
  void exchangeTileLists(poplar::program::Sequence &body, ForwardLoop &L); // to the combiners
  void addListCombine(poplar::ComputeSet cs, ForwardLoop &L);     // sample b's list
  void addSpikeBits(poplar::ComputeSet cs, ForwardLoop &L);       // emission: every spike as bits
  void writeStep(poplar::program::Sequence &body, ForwardLoop &L, const poplar::Tensor &t);
  ForwardOutputs endForward(poplar::program::Sequence &prog, ForwardLoop &L);
  // Backward (BackwardPhases.cpp), t = T-1 .. 0:
  BackwardLoop beginBackward(poplar::program::Sequence &prog, const BackwardInputs &in);
  void exchangeGradInputs(poplar::program::Sequence &ops, poplar::program::Sequence &copies,
                          BackwardLoop &L, const poplar::Tensor &t);
  void addRecurrentInputGrad(poplar::ComputeSet cs, BackwardLoop &L); // V^T dL/dI[t+1]
  void exchangeRecurrentPartials(poplar::program::Sequence &ops,
                                 poplar::program::Sequence &copies, BackwardLoop &L);
  void addRecurrentReduce(poplar::ComputeSet cs, BackwardLoop &L);
  void addRecurrentGrad(poplar::program::Sequence &body, BackwardLoop &L); // into gradT
  void exchangeStepGrad(poplar::program::Sequence &body, BackwardLoop &L); // gradT to the tiles
  void addTileListSlice(poplar::ComputeSet cs, BackwardLoop &L);
  void addStateGrad(poplar::ComputeSet cs, BackwardLoop &L);
  // The weight gradient: one round, a WeightGradRows per tile for all of its
  // samples (the rounds of a sample each are gone; the count stays for callers).
  unsigned weightGradRounds() const { return 1; }
  void addWeightGrad(poplar::ComputeSet cs, BackwardLoop &L, unsigned round);
  void addInputGrad(poplar::ComputeSet cs, BackwardLoop &L); // per-tile partials
  void exchangeInputGradPartials(poplar::program::Sequence &ops,
                                 poplar::program::Sequence &copies, BackwardLoop &L);
  void addInputGradReduce(poplar::ComputeSet cs, BackwardLoop &L); // reduction
  void writeGradStep(poplar::program::Sequence &body, BackwardLoop &L, const poplar::Tensor &t);
  BackwardOutputs endBackward(poplar::program::Sequence &prog, BackwardLoop &L);

  bool readout() const;
  bool recurrent() const { return config_.recurrent; }
  poplar::ComputeSet computeSet(const std::string &name);
  const poplar::DebugNameAndId &debugId() const { return dnai_; }

private:
  // A tile of the layer: its neurons [first, first + width) for the samples
  // [sampleBegin, sampleBegin + samples) of its sample group. The plan's
  // numTiles tiles of neurons are repeated for each of its sampleGroups groups,
  // group g on tiles firstTile + g * numTiles + j; tiles_ holds them group by group.
  struct Tile {
    unsigned index, first, width, rowLength, localCapacity, group, sampleBegin, samples;
  };

  // Per tile, a [rows x rowLength] block of the transposed weight, padding zeroed.
  std::vector<poplar::Tensor> weightBlocks(poplar::program::Sequence &prog, const poplar::Tensor &w,
                                           unsigned rows, const std::string &name);
  // Per tile, a copy of the neuron parameter's slice, so steps read it locally.
  std::vector<poplar::Tensor> paramSlices(poplar::program::Sequence &prog, const poplar::Tensor &p,
                                          const std::string &name);
  // Vertices read only their own tile's memory: what they need from other
  // tiles is copied over first (exchange as explicit Copy programs, counted
  // in the graph report). Per tile, a copy of its group's samples of t ([B, ...]):
  std::vector<poplar::Tensor> toEveryTile(poplar::program::Sequence &prog, const poplar::Tensor &t,
                                          const std::string &name);
  // Per tile, a copy of its own slice of t ([B, ...]) along t's last dimension
  // (its neurons, or its perTile columns [j * perTile, (j + 1) * perTile)) for
  // its group's samples.
  std::vector<poplar::Tensor> toOwnTiles(poplar::program::Sequence &prog, const poplar::Tensor &t,
                                         const std::string &name, unsigned perTile = 0);
  // Per sample b, the concatenation of pieces[b], gathered on the tile that combines b.
  std::vector<poplar::Tensor> gatherSamples(poplar::program::Sequence &prog,
                                            const std::vector<std::vector<poplar::Tensor>> &pieces,
                                            const std::string &name);
  // I[t] (+)= the rows of each sample's listed spikes (lists [samples, K] and
  // counts [samples, >= 2] per tile): a SpikeMatmulParts per tile in cs.
  void spikeMatmulParts(poplar::ComputeSet cs, const std::vector<poplar::Tensor> &ids,
                        const std::vector<poplar::Tensor> &counts,
                        const std::vector<poplar::Tensor> &weights,
                        const std::vector<poplar::Tensor> &currents, bool accumulate,
                        double expectedSpikes);
  // partials[j][b][k] = (row ids[j][b][k] of weights[j]) . curGrad[j][b] for the
  // listed k < counts[j][b][1]: an InputSpikeGradRange per (tile, sample, range).
  void inputGradRanges(poplar::ComputeSet cs, const std::vector<poplar::Tensor> &ids,
                       const std::vector<poplar::Tensor> &counts,
                       const std::vector<poplar::Tensor> &weights,
                       const std::vector<poplar::Tensor> &curGrad,
                       const std::vector<poplar::Tensor> &partials, double expectedListed);
  // Sample b's partials (K entries per tile of its group) gathered on
  // combineTile(b) range by range ([range][tile][entries of the range]), and
  // summed there into out[b] by a PartialReduceRange per range, so that the
  // tile's workers share a sample. numOut[b]: b's listed entries; `expected`:
  // listed entries, for the estimates.
  std::vector<poplar::Tensor> gatherPartials(poplar::program::Sequence &body,
                                             const std::vector<poplar::Tensor> &partials,
                                             const std::string &name);
  void reducePartials(poplar::ComputeSet cs, const std::vector<poplar::Tensor> &gathered,
                      unsigned K, const std::vector<poplar::Tensor> &numOut,
                      const poplar::Tensor &out, double expected);
  // Per tile, a [samples, width (or rowLength if padded)] variable on the tile.
  std::vector<poplar::Tensor> perTile(const poplar::Type &type, bool padded,
                                      const std::string &name);
  // Per tile, a [samples, columns] variable on the tile.
  std::vector<poplar::Tensor> perTileFixed(const poplar::Type &type, unsigned columns,
                                           const std::string &name);
  // [B, sum of columns of a group]: the tiles' [samples, columns] pieces, a
  // group's side by side and the groups one below the other.
  poplar::Tensor assemble(const std::vector<poplar::Tensor> &pieces) const;
  // [B, N]: the tiles' [samples, rowLength] variables without their padding.
  poplar::Tensor unpadded(const std::vector<poplar::Tensor> &perTilePadded) const;
  // All of the tiles' pieces, flattened, as one tensor.
  static poplar::Tensor flatAll(const std::vector<poplar::Tensor> &pieces);
  // Positions in tiles_ of sample b's group, and b's row in their variables.
  std::vector<unsigned> groupTiles(unsigned b) const;
  unsigned groupOf(unsigned b) const;
  unsigned localSample(unsigned b) const { return b - groupStart_[groupOf(b)]; }
  // Per sample b, a [columns] variable on the tile that combines / reduces b.
  poplar::Tensor perSample(const poplar::Type &type, unsigned columns, const std::string &name);
  poplar::Tensor empty(const poplar::Type &type);
  poplar::Tensor sliceable(const poplar::Type &type, std::vector<std::size_t> shape,
                           const std::string &name);
  poplar::Tensor stepSlice(poplar::program::Sequence &prog, const poplar::Tensor &t,
                           const poplar::Tensor &index, const std::string &name);
  void stepUpdate(poplar::program::Sequence &prog, const poplar::Tensor &t,
                  const poplar::Tensor &step, const poplar::Tensor &index, const std::string &name);
  // The position in tiles_ of the tile that reduces sample b (combineTile(b)'s).
  unsigned reducer(unsigned b) const { return groupTiles(b)[localSample(b) % tilesPerGroup_]; }
  // The tile of b's group that combines its lists and reduces its partials.
  unsigned combineTile(unsigned b) const {
    return tiles_[groupOf(b) * tilesPerGroup_ + localSample(b) % tilesPerGroup_].index;
  }
  void estimate(const poplar::VertexRef &v, std::uint64_t cycles);
  // Entries a step's list is expected to hold (spikes and eligible ones, at most
  // the capacity), and a tile's share of them, for the vertices' estimates.
  double expectedListed() const;
  double expectedListed(const Tile &tile) const;
  // A Vector<Input<Vector<T>>> field: one tensor per element.
  void connectEach(poplar::VertexRef v, const std::string &field,
                   const std::vector<poplar::Tensor> &tensors);

  poplar::Graph &graph_;
  plan::LayerPlan plan_;
  NeuronConfig config_;
  poplar::Type weightType_;
  std::unique_ptr<poplar::DebugInfo> debugInfo_; // written to the profile when destroyed
  poplar::DebugNameAndId dnai_;
  std::vector<Tile> tiles_;
  unsigned batch_, steps_, inFeatures_, outFeatures_, capacityIn_, capacityOut_;
  unsigned wordsPerTile_ = 0;
  unsigned groups_ = 1, tilesPerGroup_ = 1;
  std::vector<unsigned> groupStart_; // groups_ + 1 sample boundaries
};

} // namespace ipu
} // namespace snn
