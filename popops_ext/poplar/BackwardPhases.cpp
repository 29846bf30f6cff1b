// The backward time loop of a layer (t = T-1 .. 0), one builder per phase
// (LayerGraph.hpp): the set-up before the loop, then per step the exchange of
// what the tiles read of step t (and t - 1), the recurrent input gradient and
// its reduction, the tiles' slices of the output list, the state gradient, the
// weight gradient (in rounds of samples), the input gradient and its reduction,
// and the step's output; after the loop the parameter gradients in torch's
// layouts. Each vertex carries its cost (plan/PerformanceEstimation.hpp), the
// same function the planner adds up (plan/Planner.cpp).
#include "LayerGraph.hpp"

#include <popops/ElementWise.hpp>
#include <popops/Reduce.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>
#include <poputil/Util.hpp>

#include <algorithm>

#include "Codes.hpp"
#include "plan/PerformanceEstimation.hpp"

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;

BackwardLoop LayerGraph::beginBackward(Sequence &prog, const BackwardInputs &bin) {
  const ForwardInputs &in = bin.forward;
  const ForwardOutputs &fo = bin.outputs;
  const unsigned B = batch_, T = steps_, K = capacityOut_, Kin = capacityIn_, N = outFeatures_;
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  BackwardLoop L;
  L.in = bin;
  L.denseU = readout() || (config_.keepDenseState && fo.denseMembrane.valid());
  L.denseSyn = synaptic && config_.keepDenseState && fo.denseSynaptic.valid();

  // The weight's blocks serve the input gradient only (dW needs no W).
  if (config_.inputNeedsGrad)
    L.W = weightBlocks(prog, in.weight, inFeatures_, "W");
  if (config_.recurrent)
    L.V = weightBlocks(prog, in.recWeight, N, "V");
  L.beta = paramSlices(prog, in.beta, "beta");
  if (!readout())
    L.thr = paramSlices(prog, in.threshold, "threshold");
  if (synaptic)
    L.alpha = paramSlices(prog, in.alpha, "alpha");
  L.noFloat = empty(FLOAT);

  // Dense carries and the per-sample parameter-gradient accumulators (the
  // per-sample vertices of a compute set must not share an InOut).
  L.carry = perTile(FLOAT, false, "carry");
  L.curGrad = perTile(FLOAT, true, "currentGrad"); // padding stays zero
  L.gBeta = perTile(FLOAT, false, "gradBeta");
  std::vector<Tensor> toZero = {flatAll(L.carry), flatAll(L.curGrad), flatAll(L.gBeta)};
  if (!readout()) {
    L.notSpiked = perTile(FLOAT, false, "notSpiked");
    L.gThr = perTile(FLOAT, false, "gradThreshold");
    toZero.push_back(flatAll(L.gThr));
    for (const Tile &tile : tiles_) {
      const unsigned Bt = tile.samples;
      Tensor ids = graph_.addVariable(INT, {Bt, 2 * tile.localCapacity}, {dnai_, "listIds"});
      Tensor mem = graph_.addVariable(FLOAT, {Bt, 2 * tile.localCapacity}, {dnai_, "listMembrane"});
      Tensor grd = graph_.addVariable(FLOAT, {Bt, 2 * tile.localCapacity}, {dnai_, "listGrad"});
      Tensor prv = graph_.addVariable(INT, {Bt, tile.width}, {dnai_, "prevSpikeIds"});
      for (const Tensor &x : {ids, mem, grd, prv})
        graph_.setTileMapping(x, tile.index);
      L.listIds.push_back(ids);
      L.listMem.push_back(mem);
      L.listGrad.push_back(grd);
      L.prevList.push_back(prv);
    }
    L.nums = perTileFixed(UNSIGNED_INT, 2, "numListed");
    L.prevNums = perTileFixed(UNSIGNED_INT, 1, "numPrevSpikes");
  }
  if (synaptic) {
    L.carrySyn = perTile(FLOAT, false, "carrySynaptic");
    L.gAlpha = perTile(FLOAT, false, "gradAlpha");
    toZero.push_back(flatAll(L.carrySyn));
    toZero.push_back(flatAll(L.gAlpha));
  }
  // Float weight gradients in the blocks' layout.
  for (const Tile &tile : tiles_) {
    Tensor g = graph_.addVariable(FLOAT, {inFeatures_ * tile.rowLength}, {dnai_, "gradW"});
    graph_.setTileMapping(g, tile.index);
    L.gW.push_back(g);
    toZero.push_back(g);
    if (config_.recurrent) {
      Tensor gv = graph_.addVariable(FLOAT, {N * tile.rowLength}, {dnai_, "gradV"});
      graph_.setTileMapping(gv, tile.index);
      L.gV.push_back(gv);
      toZero.push_back(gv);
    }
    if (config_.hasBias) {
      Tensor gb = graph_.addVariable(FLOAT, {tile.rowLength}, {dnai_, "gradBias"});
      graph_.setTileMapping(gb, tile.index);
      L.gB.push_back(gb);
      toZero.push_back(gb);
    }
  }
  if (config_.inputNeedsGrad)
    L.partials = perTileFixed(FLOAT, Kin, "inputGradPartials");
  if (config_.recurrent) {
    L.recPartials = perTileFixed(FLOAT, K, "recurrentGradPartials");
    L.stepRecGrad = perSample(FLOAT, K, "recurrentGrad");
  }
  if (config_.inputNeedsGrad) {
    L.stepGradIn = perSample(FLOAT, Kin, "gradIn[t]");
    L.out.gradInValues = sliceable(FLOAT, {T, B, Kin}, "gradInValues");
  }
  popops::zero(graph_, concat(toZero), prog, {dnai_, "initGrad"});
  if (!readout()) {
    Tensor ones = graph_.addConstant(FLOAT, {1}, 1.0f, {dnai_, "1"});
    graph_.setTileMapping(ones, tiles_[0].index);
    prog.add(Copy(ones.broadcast(unsigned(flatAll(L.notSpiked).numElements()), 0),
                  flatAll(L.notSpiked), false, {dnai_, "notSpiked=1"}));
  }

  // Step t - 1 of a [T, ...] tensor is row t of [zeros; tensor].
  auto shiftedByOne = [&](const Tensor &x, const std::string &name) {
    std::vector<std::size_t> shape = x.shape();
    shape[0] = 1;
    Tensor z = graph_.addConstant(x.elementType(), shape, 0, {dnai_, name + "[-1]"});
    poputil::mapTensorLinearly(graph_, z);
    return concat(z, x, 0);
  };
  if (!readout()) {
    L.prevBitsAll = shiftedByOne(fo.spikeBits, "spikeBits");
    if (config_.recurrent) {
      L.prevIdsAll = shiftedByOne(fo.ids, "ids");
      L.prevCountsAll = shiftedByOne(fo.counts, "counts");
    }
  }
  if (L.denseU)
    L.prevDenseU = shiftedByOne(fo.denseMembrane, "U");
  if (L.denseSyn)
    L.prevDenseSyn = shiftedByOne(fo.denseSynaptic, "syn");
  return L;
}

void LayerGraph::exchangeGradInputs(Sequence &ops, Sequence &copies, BackwardLoop &L,
                                    const Tensor &t) {
  const ForwardInputs &in = L.in.forward;
  const ForwardOutputs &fo = L.in.outputs;
  L.idsT = toEveryTile(copies, stepSlice(ops, in.inIds, t, "inIds[t]"), "inIds[t]");
  L.cntT = toEveryTile(
      copies, stepSlice(ops, in.inCounts, t, "inCounts[t]").reinterpret(UNSIGNED_INT),
      "inCounts[t]");
  L.gradT = stepSlice(ops, L.in.gradValues, t, "grad[t]"); // [B, K] or readout [B, N]
  if (!readout()) {
    L.oIds = toEveryTile(copies, stepSlice(ops, fo.ids, t, "ids[t]"), "ids[t]");
    L.oCnt = toEveryTile(copies, stepSlice(ops, fo.counts, t, "counts[t]"), "counts[t]");
    L.oMem = toEveryTile(copies, stepSlice(ops, fo.membrane, t, "membrane[t]"), "membrane[t]");
    L.pBits = toOwnTiles(copies, stepSlice(ops, L.prevBitsAll, t, "spikeBits[t-1]"),
                         "spikeBits[t-1]", wordsPerTile_);
    if (config_.recurrent) { // V's gradient pairs dL/dI[t] with the listed spikes of t - 1
      L.pIds = toEveryTile(copies, stepSlice(ops, L.prevIdsAll, t, "ids[t-1]"), "ids[t-1]");
      L.pCnt = toEveryTile(copies, stepSlice(ops, L.prevCountsAll, t, "counts[t-1]"),
                           "counts[t-1]");
    }
  }
  if (L.denseU)
    L.pU = toOwnTiles(copies, stepSlice(ops, L.prevDenseU, t, "U[t-1]"), "U[t-1]");
  if (L.denseSyn)
    L.pSyn = toOwnTiles(copies, stepSlice(ops, L.prevDenseSyn, t, "syn[t-1]"), "syn[t-1]");
}

void LayerGraph::inputGradRanges(ComputeSet cs, const std::vector<Tensor> &ids,
                                 const std::vector<Tensor> &counts,
                                 const std::vector<Tensor> &weights,
                                 const std::vector<Tensor> &curGrad,
                                 const std::vector<Tensor> &partials, double expectedListed) {
  // A sample's list in as many entry ranges as keep the tile's workers busy, a
  // worker vertex each (plan/PerformanceEstimation.hpp: inputGradRangesCycles).
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const bool floatW = weightType_ == FLOAT;
  const std::string name = std::string("InputSpikeGradRange<") + (floatW ? "float" : "half") + ">";
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    const unsigned K = unsigned(partials[j].dim(1));
    const unsigned parts = plan::cost::workerParts(tile.samples, K, workers);
    const unsigned length = (K + parts - 1) / parts;
    for (unsigned b = 0; b < tile.samples; ++b)
      for (unsigned first = 0; first < K; first += length) {
        const unsigned size = std::min(length, K - first);
        auto v = graph_.addVertex(cs, name,
                                  {{"ids", ids[j][b].slice(first, first + size)},
                                   {"numIds", counts[j][b][1].reinterpret(UNSIGNED_INT)},
                                   {"weights", weights[j]},
                                   {"currentGrad", curGrad[j][b]},
                                   {"partials", partials[j][b].slice(first, first + size)}});
        graph_.setInitialValue(v["rowLength"], tile.rowLength);
        graph_.setInitialValue(v["first"], first);
        graph_.setTileMapping(v, tile.index);
        estimate(v, plan::cost::inputGradRangeWorkerCycles(expectedListed, first, size,
                                                           tile.rowLength, floatW,
                                                           floatW ? 2 : 4));
      }
  }
}

std::vector<Tensor> LayerGraph::gatherPartials(Sequence &body, const std::vector<Tensor> &partials,
                                               const std::string &name) {
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const unsigned K = unsigned(partials[0].dim(1));
  const unsigned length = plan::cost::reduceRangeLength(K, workers);
  std::vector<std::vector<Tensor>> pieces(batch_);
  for (unsigned b = 0; b < batch_; ++b)
    for (unsigned first = 0; first < K; first += length)
      for (unsigned j : groupTiles(b))
        pieces[b].push_back(
            partials[j][localSample(b)].slice(first, std::min(K, first + length)));
  return gatherSamples(body, pieces, name);
}

void LayerGraph::reducePartials(ComputeSet cs, const std::vector<Tensor> &gathered, unsigned K,
                                const std::vector<Tensor> &numOut, const Tensor &out,
                                double expected) {
  // as the planner (partialReduceCycles): ranges of ceil(K / workers) entries
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const unsigned length = plan::cost::reduceRangeLength(K, workers);
  for (unsigned b = 0; b < batch_; ++b) {
    std::size_t at = 0;
    for (unsigned first = 0; first < K; first += length) {
      const unsigned size = std::min(length, K - first);
      const std::size_t span = std::size_t(tilesPerGroup_) * size;
      auto v = graph_.addVertex(cs, "PartialReduceRange",
                                {{"partials", gathered[b].slice(at, at + span)},
                                 {"out", out[b].slice(first, first + size)},
                                 {"numOut", numOut[b]}});
      graph_.setInitialValue(v["first"], first);
      graph_.setInitialValue(v["numPartials"], tilesPerGroup_);
      graph_.setInitialValue(v["stride"], size);
      graph_.setTileMapping(v, combineTile(b));
      estimate(v, plan::cost::partialReduceRangeWorkerCycles(expected, first, size,
                                                             tilesPerGroup_));
      at += span;
    }
  }
}

void LayerGraph::addRecurrentInputGrad(ComputeSet cs, BackwardLoop &L) {
  // dL/dS[t] += V^T dL/dI[t+1]; curGrad still holds step t+1 (zero at T-1).
  inputGradRanges(cs, L.oIds, L.oCnt, L.V, L.curGrad, L.recPartials,
                  std::min<double>(capacityOut_, 2 * plan_.spec.activity * outFeatures_));
}

void LayerGraph::exchangeRecurrentPartials(Sequence &ops, Sequence &copies, BackwardLoop &L) {
  popops::zero(graph_, L.stepRecGrad, ops, {dnai_, "recurrentGrad=0"});
  L.recGathered = gatherPartials(copies, L.recPartials, "recurrentGradPartials");
}

void LayerGraph::addRecurrentReduce(ComputeSet cs, BackwardLoop &L) {
  std::vector<Tensor> numOut(batch_);
  for (unsigned b = 0; b < batch_; ++b)
    numOut[b] = L.oCnt[reducer(b)][localSample(b)][1].reinterpret(UNSIGNED_INT);
  // as the planner: the expected listed entries, not the capacity
  reducePartials(cs, L.recGathered, capacityOut_, numOut, L.stepRecGrad,
                 std::min<double>(capacityOut_, 2 * plan_.spec.activity * outFeatures_));
}

void LayerGraph::addRecurrentGrad(Sequence &body, BackwardLoop &L) {
  popops::addInPlace(graph_, L.gradT, L.stepRecGrad, body, {dnai_, "grad[t]+=recurrent"});
}

void LayerGraph::exchangeStepGrad(Sequence &body, BackwardLoop &L) {
  // readout: the tile's neurons of dL/dU[t]; else the list's grads
  if (readout())
    L.gradLocal = toOwnTiles(body, L.gradT, "grad[t]");
  else
    L.gradLocal = toEveryTile(body, L.gradT, "grad[t]");
}

void LayerGraph::addTileListSlice(ComputeSet cs, BackwardLoop &L) {
  for (unsigned j = 0; j < tiles_.size(); ++j)
    for (unsigned b = 0; b < tiles_[j].samples; ++b) {
      auto v = graph_.addVertex(cs, "TileListSlice",
                                {{"ids", L.oIds[j][b]},
                                 {"membrane", L.oMem[j][b]},
                                 {"grad", L.gradLocal[j][b]},
                                 {"counts", L.oCnt[j][b]},
                                 {"outIds", L.listIds[j][b]},
                                 {"outMembrane", L.listMem[j][b]},
                                 {"outGrad", L.listGrad[j][b]},
                                 {"numSpikes", L.nums[j][b][0]},
                                 {"numListed", L.nums[j][b][1]}});
      graph_.setInitialValue(v["firstNeuron"], tiles_[j].first);
      graph_.setInitialValue(v["numNeurons"], tiles_[j].width);
      graph_.setInitialValue(v["spikesOnly"], 0u);
      graph_.setTileMapping(v, tiles_[j].index);
      estimate(v, plan::cost::listSliceWorkerCycles(tiles_[j].localCapacity));
      // Every spike of step t - 1 on the tile, dropped ones included.
      auto p = graph_.addVertex(cs, "SpikeBitsToList",
                                {{"bits", L.pBits[j][b]},
                                 {"ids", L.prevList[j][b]},
                                 {"count", L.prevNums[j][b][0]}});
      graph_.setInitialValue(p["firstNeuron"], tiles_[j].first);
      graph_.setInitialValue(p["numNeurons"], tiles_[j].width);
      graph_.setTileMapping(p, tiles_[j].index);
      estimate(p, plan::cost::spikeBitsWorkerCycles(tiles_[j].width));
    }
}

void LayerGraph::addStateGrad(ComputeSet cs, BackwardLoop &L) {
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  const char *gradVertex = readout()  ? "ReadoutStateGrad"
                           : synaptic ? "SynapticStateGrad"
                                      : "LifStateGrad";
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    for (unsigned b = 0; b < tile.samples; ++b) {
      auto v = graph_.addVertex(cs, gradVertex);
      graph_.connect(v["beta"], L.beta[j]);
      graph_.connect(v["prevMembrane"], L.denseU ? L.pU[j][b] : L.noFloat);
      graph_.connect(v["carry"], L.carry[j][b]);
      graph_.connect(v["currentGrad"], L.curGrad[j][b].slice(0, tile.width));
      graph_.connect(v["betaGrad"], L.gBeta[j][b]);
      graph_.setInitialValue(v["numNeurons"], tile.width);
      if (readout()) {
        graph_.connect(v["outputGrad"], L.gradLocal[j][b]);
      } else {
        graph_.connect(v["listIds"], L.listIds[j][b]);
        graph_.connect(v["listMembrane"], L.listMem[j][b]);
        graph_.connect(v["listGrad"], L.listGrad[j][b]);
        graph_.connect(v["numListed"], L.nums[j][b][1]);
        graph_.connect(v["prevSpikeIds"], L.prevList[j][b]);
        graph_.connect(v["numPrevSpikes"], L.prevNums[j][b][0]);
        graph_.connect(v["threshold"], L.thr[j]);
        graph_.connect(v["notSpiked"], L.notSpiked[j][b]);
        graph_.connect(v["thresholdGrad"], L.gThr[j][b]);
        graph_.setInitialValue(v["firstNeuron"], tile.first);
        graph_.setInitialValue(v["reset"], config_.reset);
        graph_.setInitialValue(v["surrogateKind"], config_.surrogateKind);
        graph_.setInitialValue(v["surrogateP0"], config_.surrogateP0);
        graph_.setInitialValue(v["surrogateP1"], config_.surrogateP1);
        if (synaptic) {
          graph_.connect(v["alpha"], L.alpha[j]);
          graph_.connect(v["prevSynaptic"], L.denseSyn ? L.pSyn[j][b] : L.noFloat);
          graph_.connect(v["carrySynaptic"], L.carrySyn[j][b]);
          graph_.connect(v["alphaGrad"], L.gAlpha[j][b]);
        }
      }
      graph_.setTileMapping(v, tile.index);
      estimate(v, plan::cost::stateGradWorkerCycles(plan_.spec.model, tile.width,
                                                    expectedListed(tile)));
    }
  }
}

void LayerGraph::addWeightGrad(ComputeSet cs, BackwardLoop &L, unsigned round) {
  // One round: a WeightGradRows per tile (and one for V) takes all of its
  // samples, the workers sharing out the block's rows; each element still adds
  // its samples in order (weightGradRounds() is 1).
  if (round != 0)
    return;
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const unsigned samples = tiles_[j].samples;
    auto v = graph_.addVertex(cs, "WeightGradRows",
                              {{"ids", L.idsT[j].flatten()},
                               {"counts", L.cntT[j].flatten()},
                               {"currentGrad", L.curGrad[j].flatten()},
                               {"weightGrad", L.gW[j]},
                               {"biasGrad", config_.hasBias ? L.gB[j] : L.noFloat}});
    graph_.setInitialValue(v["rowLength"], tiles_[j].rowLength);
    graph_.setInitialValue(v["idStride"], unsigned(L.idsT[j].dim(1)));
    graph_.setInitialValue(v["countStride"], unsigned(L.cntT[j].dim(1)));
    graph_.setTileMapping(v, tiles_[j].index);
    estimate(v, plan::cost::weightGradRowsCycles(
                    samples, std::min<double>(capacityIn_, plan_.spec.activity * inFeatures_),
                    tiles_[j].rowLength, config_.hasBias, 2, workers));
    if (config_.recurrent) {
      // V's gradient pairs dL/dI[t] with the spikes of step t-1.
      auto r = graph_.addVertex(cs, "WeightGradRows",
                                {{"ids", L.pIds[j].flatten()},
                                 {"counts", L.pCnt[j].flatten().reinterpret(UNSIGNED_INT)},
                                 {"currentGrad", L.curGrad[j].flatten()},
                                 {"weightGrad", L.gV[j]},
                                 {"biasGrad", L.noFloat}});
      graph_.setInitialValue(r["rowLength"], tiles_[j].rowLength);
      graph_.setInitialValue(r["idStride"], unsigned(L.pIds[j].dim(1)));
      graph_.setInitialValue(r["countStride"], unsigned(L.pCnt[j].dim(1)));
      graph_.setTileMapping(r, tiles_[j].index);
      estimate(r, plan::cost::weightGradRowsCycles(
                      samples, std::min<double>(capacityOut_, plan_.spec.activity * outFeatures_),
                      tiles_[j].rowLength, false, 2, workers));
    }
  }
}

// The input gradient's phases build nothing where the layer's input needs no
// gradient (config_.inputNeedsGrad: the network's data).
void LayerGraph::addInputGrad(ComputeSet cs, BackwardLoop &L) {
  // dL/d(input values) at every listed input entry: per-tile partial dot
  // products, summed in tile order on the sample's reducing tile.
  if (!config_.inputNeedsGrad)
    return;
  inputGradRanges(cs, L.idsT, L.cntT, L.W, L.curGrad, L.partials,
                  std::min<double>(capacityIn_, 2 * plan_.spec.activity * inFeatures_));
}

void LayerGraph::exchangeInputGradPartials(Sequence &ops, Sequence &copies, BackwardLoop &L) {
  if (!config_.inputNeedsGrad)
    return;
  popops::zero(graph_, L.stepGradIn, ops, {dnai_, "gradIn[t]=0"});
  L.gathered = gatherPartials(copies, L.partials, "inputGradPartials");
}

void LayerGraph::addInputGradReduce(ComputeSet cs, BackwardLoop &L) {
  if (!config_.inputNeedsGrad)
    return;
  std::vector<Tensor> numOut(batch_);
  for (unsigned b = 0; b < batch_; ++b)
    numOut[b] = L.cntT[reducer(b)][localSample(b)][1].reinterpret(UNSIGNED_INT);
  reducePartials(cs, L.gathered, capacityIn_, numOut, L.stepGradIn,
                 std::min<double>(capacityIn_, 2 * plan_.spec.activity * inFeatures_));
}

void LayerGraph::writeGradStep(Sequence &body, BackwardLoop &L, const Tensor &t) {
  if (config_.inputNeedsGrad)
    stepUpdate(body, L.out.gradInValues, L.stepGradIn, t, "gradIn[t]=");
}

BackwardOutputs LayerGraph::endBackward(Sequence &prog, BackwardLoop &L) {
  const bool synaptic = config_.model == snn::MODEL_SYNAPTIC;
  BackwardOutputs out = L.out;
  // Back to the torch layouts; tile j keeps the rows of its neurons.
  // With one sample group the gradient in torch's [out, in] layout is a view
  // of the tiles' blocks, not a copy: a copy would hold every weight gradient
  // twice on its tile. With several, the groups' views are summed, once per
  // training step (popops::reduce spreads the sum over the IPU).
  auto sumGroups = [&](const std::vector<Tensor> &perGroup, const std::string &name) {
    if (groups_ == 1)
      return perGroup[0];
    std::vector<Tensor> stacked;
    for (const Tensor &x : perGroup)
      stacked.push_back(x.expand({0}));
    return popops::reduce(graph_, concat(stacked, 0), FLOAT, {0},
                          popops::ReduceParams(popops::Operation::ADD), prog, {dnai_, name});
  };
  auto rowsToMatrix = [&](const std::vector<Tensor> &blocks, unsigned cols,
                          const std::string &name) {
    std::vector<Tensor> perGroup;
    for (unsigned g = 0; g < groups_; ++g) {
      std::vector<Tensor> parts;
      for (unsigned j = g * tilesPerGroup_; j < (g + 1) * tilesPerGroup_; ++j)
        parts.push_back(blocks[j]
                            .reshape({cols, tiles_[j].rowLength})
                            .slice(0, tiles_[j].width, 1)
                            .transpose());
      perGroup.push_back(concat(parts, 0));
    }
    return sumGroups(perGroup, name);
  };
  auto sumSamples = [&](const std::vector<Tensor> &perSampleGrads, const std::string &name) {
    return popops::reduce(graph_, assemble(perSampleGrads), FLOAT, {0},
                          popops::ReduceParams(popops::Operation::ADD), prog, {dnai_, name});
  };
  out.gradWeight = rowsToMatrix(L.gW, inFeatures_, "gradW");
  if (config_.recurrent)
    out.gradRecWeight = rowsToMatrix(L.gV, outFeatures_, "gradV");
  if (config_.hasBias) {
    std::vector<Tensor> perGroup;
    for (unsigned g = 0; g < groups_; ++g) {
      std::vector<Tensor> parts;
      for (unsigned j = g * tilesPerGroup_; j < (g + 1) * tilesPerGroup_; ++j)
        parts.push_back(L.gB[j].slice(0, tiles_[j].width));
      perGroup.push_back(concat(parts));
    }
    out.gradBias = groups_ == 1
                       ? poputil::duplicate(graph_, perGroup[0], prog, {dnai_, "gradBias"})
                       : sumGroups(perGroup, "gradBias");
  }
  out.gradBeta = sumSamples(L.gBeta, "gradBeta");
  if (!readout())
    out.gradThreshold = sumSamples(L.gThr, "gradThreshold");
  if (synaptic)
    out.gradAlpha = sumSamples(L.gAlpha, "gradAlpha");
  return out;
}

} // namespace ipu
} // namespace snn
