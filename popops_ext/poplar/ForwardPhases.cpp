// The forward time loop of a layer, one builder per phase (LayerGraph.hpp):
// the set-up before the loop, then per step the input exchange, the spike
// matmul, the neuron update (which emits the tiles' partial lists), the lists'
// exchange to the combining tiles, the list combine and the spike bits, and the
// step's outputs. Each vertex carries its cost (plan/PerformanceEstimation.hpp),
// the same function the planner adds up (plan/Planner.cpp).
#include "LayerGraph.hpp"

#include <popops/Cast.hpp>
#include <popops/ElementWise.hpp>
#include <popops/Expr.hpp>
#include <popops/Zero.hpp>
#include <poputil/Util.hpp>

#include <algorithm>
#include <numeric>

#include "Codes.hpp"
#include "plan/PerformanceEstimation.hpp"

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;
namespace pe = popops::expr;

ForwardLoop LayerGraph::beginForward(Sequence &prog, const ForwardInputs &in) {
  const unsigned B = batch_, T = steps_, K = capacityOut_, N = outFeatures_;
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  ForwardLoop L;
  L.in = in;
  L.W = weightBlocks(prog, in.weight, inFeatures_, "W");
  if (config_.recurrent)
    L.V = weightBlocks(prog, in.recWeight, N, "V");
  L.beta = paramSlices(prog, in.beta, "beta");
  if (!readout())
    L.thr = paramSlices(prog, in.threshold, "threshold");
  if (synaptic)
    L.alpha = paramSlices(prog, in.alpha, "alpha");
  if (config_.hasBias)
    L.bias = paramSlices(prog, in.bias, "bias");
  L.noBias = empty(FLOAT);

  // Tile state, [B, ...] per tile.
  L.cur = perTile(FLOAT, true, "currents");
  // Membrane and spikes padded per sample like the currents, so that every
  // sample's row starts on the 8-byte boundary the emission's vector loads need.
  L.U = perTile(FLOAT, true, "membrane");
  std::vector<Tensor> toZero = {flatAll(L.cur), flatAll(L.U)};
  if (synaptic) {
    L.syn = perTile(FLOAT, false, "synaptic");
    toZero.push_back(flatAll(L.syn));
  }
  if (readout()) {
    L.outStep = perTile(FLOAT, false, "membraneOut");
  } else {
    L.spiked = perTile(FLOAT, true, "spiked");
    L.spikeIds = perTile(INT, false, "spikeIds");
    L.spikeMem = perTile(FLOAT, false, "spikeMembrane");
    L.eligIds = perTile(INT, false, "eligibleIds");
    L.eligMem = perTile(FLOAT, false, "eligibleMembrane");
    L.tileCounts = perTileFixed(UNSIGNED_INT, 2, "tileCounts");
    toZero.push_back(flatAll(L.spiked));
  }
  if (!readout()) // S[t] of the tile's neurons, 16 to a word
    L.bits = perTileFixed(FLOAT, wordsPerTile_, "spikeBits[t]");

  if (!readout()) {
    L.out.ids = sliceable(INT, {T, B, K}, "ids");
    L.out.membrane = sliceable(FLOAT, {T, B, K}, "listMembrane");
    L.counts4 = sliceable(INT, {T, B, 4}, "counts4");
    L.out.spikeBits = sliceable(FLOAT, {T, B, tilesPerGroup_ * wordsPerTile_}, "spikeBits");
    L.stepIds = perSample(INT, K, "stepIds");
    L.stepMem = perSample(FLOAT, K, "stepMembrane");
    L.stepCounts = perSample(UNSIGNED_INT, 4, "stepCounts");
  }
  if (readout() || config_.keepDenseState)
    L.out.denseMembrane = sliceable(FLOAT, {T, B, N}, "denseMembrane");
  if (synaptic && config_.keepDenseState)
    L.out.denseSynaptic = sliceable(FLOAT, {T, B, N}, "denseSynaptic");
  popops::zero(graph_, concat(toZero), prog, {dnai_, "initState"});
  if (!readout()) // a tensor has one element type: the counts are zeroed apart
    popops::zero(graph_, L.stepCounts, prog, {dnai_, "initCounts"}); // no list before step 0
  return L;
}

void LayerGraph::exchangeInput(Sequence &ops, Sequence &copies, ForwardLoop &L, const Tensor &t) {
  L.idsT = toEveryTile(copies, stepSlice(ops, L.in.inIds, t, "inIds[t]"), "inIds[t]");
  L.cntT = toEveryTile(
      copies, stepSlice(ops, L.in.inCounts, t, "inCounts[t]").reinterpret(UNSIGNED_INT),
      "inCounts[t]");
  if (config_.recurrent) {
    // The previous step's own list (stepIds still holds it here), on every tile.
    L.prevIds = toEveryTile(copies, L.stepIds, "ids[t-1]");
    L.prevCounts = toEveryTile(copies, L.stepCounts, "counts[t-1]");
  }
}

void LayerGraph::exchangeInput(Sequence &copies, ForwardLoop &L, const Tensor &stepIds,
                               const Tensor &stepCounts) {
  L.idsT = toEveryTile(copies, stepIds, "inIds[t]");
  L.cntT = toEveryTile(copies, stepCounts.reinterpret(UNSIGNED_INT), "inCounts[t]");
  if (config_.recurrent) {
    L.prevIds = toEveryTile(copies, L.stepIds, "ids[t-1]");
    L.prevCounts = toEveryTile(copies, L.stepCounts, "counts[t-1]");
  }
}

void LayerGraph::spikeMatmulParts(ComputeSet cs, const std::vector<Tensor> &ids,
                                  const std::vector<Tensor> &counts,
                                  const std::vector<Tensor> &weights,
                                  const std::vector<Tensor> &currents, bool accumulate,
                                  double expectedSpikes) {
  // One MultiVertex per tile for all of its samples, each sample's row cut into
  // as many column ranges as keep the workers busy (plan/PerformanceEstimation.hpp:
  // spikeMatmulPartsCycles, the same split).
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const bool floatW = weightType_ == FLOAT;
  const std::string name = std::string("SpikeMatmulParts<") + (floatW ? "float" : "half") + ">";
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    auto v = graph_.addVertex(cs, name,
                              {{"ids", ids[j].flatten()},
                               {"counts", counts[j].flatten()},
                               {"weights", weights[j]},
                               {"currents", currents[j].flatten()}});
    graph_.setInitialValue(v["rowLength"], tile.rowLength);
    graph_.setInitialValue(v["idStride"], unsigned(ids[j].dim(1)));
    graph_.setInitialValue(v["countStride"], unsigned(counts[j].dim(1)));
    graph_.setInitialValue(v["parts"],
                           plan::cost::workerParts(tile.samples, tile.rowLength / 8, workers));
    graph_.setInitialValue(v["accumulate"], accumulate ? 1u : 0u);
    graph_.setTileMapping(v, tile.index);
    estimate(v, plan::cost::spikeMatmulPartsCycles(tile.samples, expectedSpikes, tile.rowLength,
                                                   floatW, floatW ? 2 : 4, workers));
  }
}

void LayerGraph::addSpikeMatmul(ComputeSet cs, ForwardLoop &L) {
  const double spikesIn = std::min<double>(capacityIn_, plan_.spec.activity * inFeatures_);
  spikeMatmulParts(cs, L.idsT, L.cntT, L.W, L.cur, false, spikesIn); // sets I[t]
}

void LayerGraph::addRecurrentMatmul(ComputeSet cs, ForwardLoop &L) {
  spikeMatmulParts(cs, L.prevIds, L.prevCounts, L.V, L.cur, true,
                   std::min<double>(capacityOut_, plan_.spec.activity * outFeatures_));
}

void LayerGraph::addNeuronUpdate(ComputeSet cs, ForwardLoop &L) {
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  const char *updateVertex =
      readout() ? "ReadoutUpdate" : synaptic ? "SynapticUpdate" : "LifUpdate";
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    for (unsigned b = 0; b < tile.samples; ++b) {
      auto v = graph_.addVertex(cs, updateVertex);
      graph_.connect(v["currents"], L.cur[j][b]);
      graph_.connect(v["bias"], config_.hasBias ? L.bias[j] : L.noBias);
      graph_.connect(v["beta"], L.beta[j]);
      graph_.connect(v["membrane"], L.U[j][b].slice(0, tile.width));
      graph_.setInitialValue(v["numNeurons"], tile.width);
      if (readout()) {
        graph_.connect(v["membraneOut"], L.outStep[j][b]);
      } else {
        graph_.connect(v["threshold"], L.thr[j]);
        graph_.connect(v["spiked"], L.spiked[j][b].slice(0, tile.width));
        graph_.connect(v["spikeIds"], L.spikeIds[j][b]);
        graph_.connect(v["spikeMembrane"], L.spikeMem[j][b]);
        graph_.connect(v["eligibleIds"], L.eligIds[j][b]);
        graph_.connect(v["eligibleMembrane"], L.eligMem[j][b]);
        graph_.connect(v["counts"], L.tileCounts[j][b]);
        graph_.setInitialValue(v["firstNeuron"], tile.first);
        graph_.setInitialValue(v["reset"], config_.reset);
        graph_.setInitialValue(v["gradWindow"], config_.gradWindow);
        if (synaptic) {
          graph_.connect(v["alpha"], L.alpha[j]);
          graph_.connect(v["synaptic"], L.syn[j][b]);
        }
      }
      graph_.setTileMapping(v, tile.index);
      // a readout lists nothing
      estimate(v, plan::cost::stateUpdateWorkerCycles(plan_.spec.model, tile.width,
                                                      readout() ? 0.0 : expectedListed(tile)));
    }
  }
}

void LayerGraph::exchangeTileLists(Sequence &body, ForwardLoop &L) {
  // Sample b's partial lists (from its group's tiles) meet on combineTile(b);
  // only the first localCapacity entries of each can reach the combined list.
  const unsigned B = batch_;
  std::vector<std::vector<Tensor>> sIds(B), sMem(B), eIds(B), eMem(B), counts(B);
  for (unsigned b = 0; b < B; ++b)
    for (unsigned j : groupTiles(b)) {
      const unsigned cap = tiles_[j].localCapacity, lb = localSample(b);
      sIds[b].push_back(L.spikeIds[j][lb].slice(0, cap));
      sMem[b].push_back(L.spikeMem[j][lb].slice(0, cap));
      eIds[b].push_back(L.eligIds[j][lb].slice(0, cap));
      eMem[b].push_back(L.eligMem[j][lb].slice(0, cap));
      counts[b].push_back(L.tileCounts[j][lb]);
    }
  L.gIds = gatherSamples(body, sIds, "gatheredSpikeIds");
  L.gMem = gatherSamples(body, sMem, "gatheredSpikeMembrane");
  L.gEIds = gatherSamples(body, eIds, "gatheredEligibleIds");
  L.gEMem = gatherSamples(body, eMem, "gatheredEligibleMembrane");
  L.gCounts = gatherSamples(body, counts, "gatheredCounts");
}

void LayerGraph::addListCombine(ComputeSet cs, ForwardLoop &L) {
  // With fewer samples per combining tile than workers, each sample's combine is
  // a SpikeListCombineParts whose workers share out the tiles' lists (the
  // planner's choice too: plan::cost::listCombineUsesParts).
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const unsigned combineSamples = (tiles_[0].samples + tilesPerGroup_ - 1) / tilesPerGroup_;
  const bool parts = plan::cost::listCombineUsesParts(combineSamples, tilesPerGroup_,
                                                      expectedListed(), workers);
  for (unsigned b = 0; b < batch_; ++b) {
    std::vector<Tensor> pIds, pMem, qIds, qMem;
    unsigned at = 0;
    for (unsigned j : groupTiles(b)) {
      const unsigned cap = tiles_[j].localCapacity;
      pIds.push_back(L.gIds[b].slice(at, at + cap));
      pMem.push_back(L.gMem[b].slice(at, at + cap));
      qIds.push_back(L.gEIds[b].slice(at, at + cap));
      qMem.push_back(L.gEMem[b].slice(at, at + cap));
      at += cap;
    }
    auto v = graph_.addVertex(cs, parts ? "SpikeListCombineParts" : "SpikeListCombine");
    connectEach(v, "spikeIds", pIds);
    connectEach(v, "spikeMembrane", pMem);
    connectEach(v, "eligibleIds", qIds);
    connectEach(v, "eligibleMembrane", qMem);
    graph_.connect(v["tileCounts"], L.gCounts[b]);
    graph_.connect(v["ids"], L.stepIds[b]);
    graph_.connect(v["membrane"], L.stepMem[b]);
    graph_.connect(v["counts"], L.stepCounts[b]);
    graph_.setTileMapping(v, combineTile(b));
    estimate(v, parts ? plan::cost::vertexCycles(plan::cost::listCombinePartsWorkerCycles(
                                                     tilesPerGroup_, expectedListed(), workers),
                                                 workers)
                      : plan::cost::listCombineWorkerCycles(tilesPerGroup_, expectedListed()));
  }
}

void LayerGraph::addSpikeBits(ComputeSet cs, ForwardLoop &L) {
  // Every spike of the step as bits, dropped ones included: the backward
  // pass needs them for the resets.
  for (unsigned j = 0; j < tiles_.size(); ++j)
    for (unsigned b = 0; b < tiles_[j].samples; ++b) {
      auto v = graph_.addVertex(cs, "SpikeBitsPack",
                                {{"spiked", L.spiked[j][b]}, {"bits", L.bits[j][b]}});
      graph_.setInitialValue(v["numNeurons"], tiles_[j].width);
      graph_.setTileMapping(v, tiles_[j].index);
      estimate(v, plan::cost::spikeBitsWorkerCycles(tiles_[j].width));
    }
}

void LayerGraph::writeStep(Sequence &body, ForwardLoop &L, const Tensor &t) {
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  if (!readout()) {
    stepUpdate(body, L.out.ids, L.stepIds, t, "ids[t]=");
    stepUpdate(body, L.out.membrane, L.stepMem, t, "membrane[t]=");
    stepUpdate(body, L.counts4, L.stepCounts.reinterpret(INT), t, "counts[t]=");
    stepUpdate(body, L.out.spikeBits, assemble(L.bits), t, "spikeBits[t]=");
  }
  if (readout())
    stepUpdate(body, L.out.denseMembrane, assemble(L.outStep), t, "U[t]=");
  else if (config_.keepDenseState)
    stepUpdate(body, L.out.denseMembrane, unpadded(L.U), t, "U[t]=");
  if (synaptic && config_.keepDenseState)
    stepUpdate(body, L.out.denseSynaptic, assemble(L.syn), t, "syn[t]=");
}

ForwardOutputs LayerGraph::endForward(Sequence &prog, ForwardLoop &L) {
  ForwardOutputs out = L.out;
  if (readout())
    return out;
  const unsigned B = batch_, T = steps_, K = capacityOut_;
  out.counts = poputil::duplicate(graph_, L.counts4.slice(0, 2, 2), prog, {dnai_, "counts"});
  out.needed = popops::cast(graph_, L.counts4.slice(2, 4, 2), FLOAT, prog, {dnai_, "needed"});
  // values[t, b, k] = k < spikes listed: the differentiable part of the list.
  std::vector<int> iota(K);
  std::iota(iota.begin(), iota.end(), 0);
  Tensor k = graph_.addConstant<int>(INT, {1, 1, K}, iota, {dnai_, "k"});
  graph_.setTileMapping(k, tiles_[0].index);
  const Tensor spikes = out.counts.slice(0, 1, 2).broadcast(K, 2);
  out.values = popops::map(graph_, pe::Cast(pe::Lt(pe::_1, pe::_2), FLOAT),
                           {k.broadcast(T, 0).broadcast(B, 1), spikes}, prog, {dnai_, "values"});
  return out;
}

} // namespace ipu
} // namespace snn
