#include "LayerGraph.hpp"

#include <popops/Cast.hpp>
#include <popops/DynamicSlice.hpp>
#include <popops/ElementWise.hpp>
#include <popops/Expr.hpp>
#include <popops/Reduce.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>
#include <poputil/Util.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "Codes.hpp"
#include "plan/PerformanceEstimation.hpp"

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;
namespace pe = popops::expr;

namespace {


// SpikeBitsPack / SpikeBitsToList, one worker's loop (plan/PerformanceEstimation.hpp).
std::uint64_t spikeBitsCycles(unsigned neurons) {
  return plan::cost::spikeBitsWorkerCycles(neurons);
}

} // namespace

unsigned spikeBitWords(const plan::LayerPlan &plan) {
  return plan.spec.model == plan::NeuronModel::Readout ? 0 : (plan.neuronsPerTileMax + 15) / 16;
}

void addSnnCodelets(Graph &graph, const std::string &gpPath) {
  // Once per op, as PopTorch's own custom ops do (FastGatherLastDim.cpp): a
  // process-wide set of graphs seen would skip a new graph built where a
  // destroyed one was, and key virtual graphs apart from their IPU's graph.
  graph.addCodelets(gpPath);
}

LayerGraph::LayerGraph(Graph &graph, const plan::LayerPlan &plan, const NeuronConfig &config,
                       const Type &weightType, const DebugContext &dc)
    : graph_(graph), plan_(plan), config_(config), weightType_(weightType),
      debugInfo_(std::make_unique<DebugInfo>(dc, "snn_ipu")), dnai_(*debugInfo_, "SnnLayer"),
      batch_(plan.spec.batch), steps_(plan.spec.timesteps), inFeatures_(plan.spec.inFeatures),
      outFeatures_(plan.spec.outFeatures), capacityIn_(plan.spec.capacityIn),
      capacityOut_(plan.spec.capacityOut) {
  if (std::uint64_t(config.firstTile) + std::uint64_t(plan.numTiles) * plan.sampleGroups >
      graph.getTarget().getNumTiles())
    throw std::invalid_argument("SnnLayer: the plan's tiles do not fit on this IPU target");
  // The batch in sampleGroups groups, larger ones first (the planner costs the first).
  groups_ = plan.sampleGroups;
  tilesPerGroup_ = plan.numTiles;
  if (groups_ == 0 || groups_ > batch_)
    throw std::invalid_argument("SnnLayer: the plan's sample groups must lie in [1, batch]");
  groupStart_.assign(groups_ + 1, 0);
  for (unsigned g = 0; g < groups_; ++g)
    groupStart_[g + 1] = groupStart_[g] + batch_ / groups_ + (g < batch_ % groups_ ? 1 : 0);
  for (unsigned g = 0; g < groups_; ++g)
    for (unsigned j = 0; j < plan.numTiles; ++j) {
      const unsigned first = plan.tileStarts[j], width = plan.tileStarts[j + 1] - first;
      tiles_.push_back({config.firstTile + g * plan.numTiles + j, first, width,
                        plan::paddedRow(width), plan::localCapacity(plan.spec, width), g,
                        groupStart_[g], groupStart_[g + 1] - groupStart_[g]});
    }
  wordsPerTile_ = spikeBitWords(plan);
}

void LayerGraph::connectEach(VertexRef v, const std::string &field,
                             const std::vector<Tensor> &tensors) {
  graph_.setFieldSize(v[field], tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    graph_.connect(v[field][i], tensors[i]);
}

double LayerGraph::expectedListed() const {
  // As the planner: spikes and eligible entries, no more than the capacity.
  return std::min<double>(capacityOut_, 2 * plan_.spec.activity * outFeatures_);
}

double LayerGraph::expectedListed(const Tile &tile) const {
  return std::min<double>(tile.localCapacity, expectedListed() * tile.width / outFeatures_);
}

void LayerGraph::estimate(const VertexRef &v, std::uint64_t cycles) {
  graph_.setPerfEstimate(v, cycles);
}

Tensor LayerGraph::empty(const Type &type) {
  Tensor t = graph_.addVariable(type, {0}, {dnai_, "empty"});
  graph_.setTileMapping(t, tiles_[0].index); // mapped, as poplibs maps its empty tensors
  return t;
}

std::vector<Tensor> LayerGraph::perTile(const Type &type, bool padded, const std::string &name) {
  std::vector<Tensor> out;
  for (const Tile &tile : tiles_) {
    const unsigned cols = padded ? tile.rowLength : tile.width;
    Tensor t = graph_.addVariable(type, {tile.samples, cols}, {dnai_, name});
    graph_.setTileMapping(t, tile.index);
    out.push_back(t);
  }
  return out;
}

std::vector<Tensor> LayerGraph::perTileFixed(const Type &type, unsigned columns,
                                             const std::string &name) {
  std::vector<Tensor> out;
  for (const Tile &tile : tiles_) {
    Tensor t = graph_.addVariable(type, {tile.samples, columns}, {dnai_, name});
    graph_.setTileMapping(t, tile.index);
    out.push_back(t);
  }
  return out;
}

Tensor LayerGraph::perSample(const Type &type, unsigned columns, const std::string &name) {
  Tensor t = graph_.addVariable(type, {batch_, columns}, {dnai_, name});
  for (unsigned b = 0; b < batch_; ++b)
    graph_.setTileMapping(t[b], combineTile(b));
  return t;
}

Tensor LayerGraph::assemble(const std::vector<Tensor> &pieces) const {
  std::vector<Tensor> rows;
  for (unsigned g = 0; g < groups_; ++g) {
    const auto first = pieces.begin() + std::ptrdiff_t(g) * tilesPerGroup_;
    rows.push_back(concat(std::vector<Tensor>(first, first + tilesPerGroup_), 1));
  }
  return concat(rows, 0);
}

Tensor LayerGraph::unpadded(const std::vector<Tensor> &perTilePadded) const {
  std::vector<Tensor> parts;
  for (std::size_t j = 0; j < tiles_.size(); ++j)
    parts.push_back(perTilePadded[j].slice(0, tiles_[j].width, 1));
  return assemble(parts);
}

Tensor LayerGraph::flatAll(const std::vector<Tensor> &pieces) {
  std::vector<Tensor> flat;
  for (const Tensor &t : pieces)
    flat.push_back(t.flatten());
  return concat(flat);
}

unsigned LayerGraph::groupOf(unsigned b) const {
  return unsigned(std::upper_bound(groupStart_.begin(), groupStart_.end(), b) -
                  groupStart_.begin()) - 1;
}

std::vector<unsigned> LayerGraph::groupTiles(unsigned b) const {
  std::vector<unsigned> out(tilesPerGroup_);
  std::iota(out.begin(), out.end(), groupOf(b) * tilesPerGroup_);
  return out;
}

Tensor LayerGraph::sliceable(const Type &type, std::vector<std::size_t> shape,
                             const std::string &name) {
  // Spread over the whole IPU, one step per slice: the planner's io share.
  return popops::createSliceableTensor(graph_, type, shape, {0}, {1}, 0, {dnai_, name});
}

Tensor LayerGraph::stepSlice(Sequence &prog, const Tensor &t, const Tensor &index,
                             const std::string &name) {
  return popops::dynamicSlice(graph_, t, index, {0}, {1}, prog, {dnai_, name}).squeeze({0});
}

void LayerGraph::stepUpdate(Sequence &prog, const Tensor &t, const Tensor &step,
                            const Tensor &index, const std::string &name) {
  popops::dynamicUpdate(graph_, t, step.expand({0}), index, {0}, {1}, prog, {dnai_, name});
}

Tensor LayerGraph::createWeight(unsigned cols, const DebugContext &dc) const {
  Tensor w = graph_.addVariable(weightType_, {outFeatures_, cols}, dc);
  for (unsigned j = 0; j < tilesPerGroup_; ++j) // the first sample group's tiles
    graph_.setTileMapping(w.slice(tiles_[j].first, tiles_[j].first + tiles_[j].width, 0),
                          tiles_[j].index);
  return w;
}

std::vector<Tensor> LayerGraph::weightBlocks(Sequence &prog, const Tensor &w, unsigned rows,
                                             const std::string &name) {
  // Block j is [rows x rowLength] with block[i][n] = W[first + n][i]: a spike
  // of input i reads one contiguous row (see codelets/SpikeMatmul.hpp).
  // Flattened pieces: the tiles' widths differ where the last tile is narrower,
  // so [rows x width] pieces cannot be concatenated along rows.
  std::vector<Tensor> blocks, padding, sources, targets;
  for (const Tile &tile : tiles_) {
    Tensor block = graph_.addVariable(w.elementType(), {rows, tile.rowLength}, {dnai_, name});
    graph_.setTileMapping(block, tile.index);
    sources.push_back(w.slice(tile.first, tile.first + tile.width, 0).transpose().flatten());
    targets.push_back(block.slice(0, tile.width, 1).flatten());
    if (tile.rowLength > tile.width)
      padding.push_back(block.slice(tile.width, tile.rowLength, 1).flatten());
    blocks.push_back(block.flatten());
  }
  if (!padding.empty())
    popops::zero(graph_, concat(padding), prog, {dnai_, name + "/pad"});
  prog.add(Copy(concat(sources), concat(targets), false, {dnai_, name + "/blocks"}));
  return blocks;
}

std::vector<Tensor> LayerGraph::paramSlices(Sequence &prog, const Tensor &p,
                                            const std::string &name) {
  // Half parameters (a model.half()) are widened once: state and its updates
  // stay float32, as on the CPU backends.
  const Tensor src =
      p.elementType() == FLOAT ? p : popops::cast(graph_, p, FLOAT, prog, {dnai_, name + "/float"});
  std::vector<Tensor> out;
  for (const Tile &tile : tiles_) {
    Tensor t = graph_.addVariable(FLOAT, {tile.width}, {dnai_, name});
    graph_.setTileMapping(t, tile.index);
    out.push_back(t);
  }
  prog.add(Copy(concat(std::vector<Tensor>(groups_, src)), concat(out), false, {dnai_, name}));
  return out;
}

std::vector<Tensor> LayerGraph::toEveryTile(Sequence &prog, const Tensor &t,
                                            const std::string &name) {
  std::vector<Tensor> out, src, flat;
  for (const Tile &tile : tiles_) {
    const Tensor part = t.slice(tile.sampleBegin, tile.sampleBegin + tile.samples, 0);
    Tensor c = graph_.addVariable(t.elementType(), part.shape(), {dnai_, name});
    graph_.setTileMapping(c, tile.index);
    out.push_back(c);
    src.push_back(part.flatten());
    flat.push_back(c.flatten());
  }
  prog.add(Copy(concat(src), concat(flat), false, {dnai_, name}));
  return out;
}

std::vector<Tensor> LayerGraph::toOwnTiles(Sequence &prog, const Tensor &t,
                                           const std::string &name, unsigned perTile) {
  std::vector<Tensor> out, src, dst;
  const unsigned last = t.rank() - 1;
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    const unsigned k = j % tilesPerGroup_; // the tile's place in its group
    const Tensor part = (perTile ? t.slice(k * perTile, (k + 1) * perTile, last)
                                 : t.slice(tile.first, tile.first + tile.width, last))
                            .slice(tile.sampleBegin, tile.sampleBegin + tile.samples, 0);
    Tensor c = graph_.addVariable(t.elementType(), part.shape(), {dnai_, name});
    graph_.setTileMapping(c, tile.index);
    out.push_back(c);
    src.push_back(part.flatten());
    dst.push_back(c.flatten());
  }
  prog.add(Copy(concat(src), concat(dst), false, {dnai_, name}));
  return out;
}

std::vector<Tensor> LayerGraph::gatherSamples(Sequence &prog,
                                              const std::vector<std::vector<Tensor>> &pieces,
                                              const std::string &name) {
  std::vector<Tensor> out, src;
  for (unsigned b = 0; b < batch_; ++b) {
    std::vector<Tensor> flat;
    for (const Tensor &piece : pieces[b])
      flat.push_back(piece.flatten());
    const Tensor all = concat(flat);
    Tensor g = graph_.addVariable(all.elementType(), {all.numElements()}, {dnai_, name});
    graph_.setTileMapping(g, combineTile(b));
    out.push_back(g);
    src.push_back(all);
  }
  prog.add(Copy(concat(src), concat(out), false, {dnai_, name}));
  return out;
}

void LayerGraph::addSpikeMatmul(ComputeSet &cs, const std::vector<Tensor> &ids,
                             const std::vector<Tensor> &counts, unsigned countStride,
                             const std::vector<Tensor> &weights, const std::vector<Tensor> &currents,
                             bool accumulate, double expectedSpikes) {
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const bool floatW = weightType_ == FLOAT;
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    auto v = graph_.addVertex(cs, std::string("SpikeMatmulParts<") + (floatW ? "float" : "half") + ">",
                              {{"ids", ids[j].flatten()},
                               {"counts", counts[j].flatten()},
                               {"weights", weights[j]},
                               {"currents", currents[j].flatten()}});
    graph_.setInitialValue(v["rowLength"], tile.rowLength);
    graph_.setInitialValue(v["idStride"], unsigned(ids[j].dim(1)));
    graph_.setInitialValue(v["countStride"], countStride);
    graph_.setInitialValue(v["parts"],
                           plan::cost::workerParts(tile.samples, tile.rowLength / 8, workers));
    graph_.setInitialValue(v["accumulate"], accumulate ? 1u : 0u);
    graph_.setTileMapping(v, tile.index);
    estimate(v, plan::cost::spikeMatmulPartsCycles(tile.samples, expectedSpikes, tile.rowLength,
                                                   floatW, floatW ? 2 : 4, workers));
  }
}

void LayerGraph::addInputGrad(ComputeSet &cs, const std::vector<Tensor> &ids,
                           const std::vector<Tensor> &counts, const std::vector<Tensor> &weights,
                           const std::vector<Tensor> &curGrad, const std::vector<Tensor> &partials,
                           double expectedListed) {
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

void LayerGraph::reducePartials(Sequence &prog, const std::vector<Tensor> &partials, unsigned K,
                                const std::vector<Tensor> &numOut, const Tensor &out,
                                double expected, const std::string &name) {
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const unsigned length = plan::cost::reduceRangeLength(K, workers);
  const unsigned ranges = plan::cost::reduceRanges(K, workers);
  // Sample b's gathered partials, range by range: [range][tile][entries of the range].
  std::vector<std::vector<Tensor>> pieces(batch_);
  for (unsigned b = 0; b < batch_; ++b)
    for (unsigned r = 0; r < ranges; ++r)
      for (unsigned j : groupTiles(b))
        pieces[b].push_back(partials[j][localSample(b)].slice(r * length,
                                                              std::min(K, (r + 1) * length)));
  const auto gathered = gatherSamples(prog, pieces, name);
  ComputeSet cs = graph_.addComputeSet({dnai_, name});
  for (unsigned b = 0; b < batch_; ++b) {
    std::size_t at = 0;
    for (unsigned r = 0; r < ranges; ++r) {
      const unsigned first = r * length, size = std::min(length, K - first);
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
  prog.add(Execute(cs, {dnai_, name}));
}

ForwardOutputs LayerGraph::forward(Sequence &prog, const ForwardInputs &in) {
  const unsigned B = batch_, T = steps_, K = capacityOut_, N = outFeatures_;
  const bool readout = config_.model == snn::MODEL_READOUT, synaptic = config_.model == snn::MODEL_SYNAPTIC;
  const bool floatW = weightType_ == FLOAT;
  const std::string wt = floatW ? "float" : "half";
  // Per-sample Vertex instances run one per worker context, in parallel with
  // the tile's other samples: each estimate is one worker's loop
  // (plan/PerformanceEstimation.hpp says how the compute sets add up).

  const auto W = weightBlocks(prog, in.weight, inFeatures_, "W");
  std::vector<Tensor> V;
  if (config_.recurrent)
    V = weightBlocks(prog, in.recWeight, N, "V");
  const auto beta = paramSlices(prog, in.beta, "beta");
  std::vector<Tensor> thr, alpha, bias;
  if (!readout)
    thr = paramSlices(prog, in.threshold, "threshold");
  if (synaptic)
    alpha = paramSlices(prog, in.alpha, "alpha");
  if (config_.hasBias)
    bias = paramSlices(prog, in.bias, "bias");
  const Tensor noBias = empty(FLOAT);

  // Tile state, [B, ...] per tile.
  const auto cur = perTile(FLOAT, true, "currents");
  // Membrane and spikes padded per sample like the currents, so that every
  // sample's row starts on the 8-byte boundary the emission's vector loads need.
  const auto U = perTile(FLOAT, true, "membrane");
  std::vector<Tensor> syn, spiked, spikeIds, spikeMem, eligIds, eligMem, tileCounts, outStep;
  std::vector<Tensor> toZero = {flatAll(cur), flatAll(U)};
  if (synaptic) {
    syn = perTile(FLOAT, false, "synaptic");
    toZero.push_back(flatAll(syn));
  }
  if (readout) {
    outStep = perTile(FLOAT, false, "membraneOut");
  } else {
    spiked = perTile(FLOAT, true, "spiked");
    spikeIds = perTile(INT, false, "spikeIds");
    spikeMem = perTile(FLOAT, false, "spikeMembrane");
    eligIds = perTile(INT, false, "eligibleIds");
    eligMem = perTile(FLOAT, false, "eligibleMembrane");
    tileCounts = perTileFixed(UNSIGNED_INT, 2, "tileCounts");
    toZero.push_back(flatAll(spiked));
  }
  std::vector<Tensor> bits; // S[t] of the tile's neurons, 16 to a word
  if (!readout)
    bits = perTileFixed(FLOAT, wordsPerTile_, "spikeBits[t]");

  ForwardOutputs out;
  Tensor stepIds, stepMem, stepCounts, counts4;
  if (!readout) {
    out.ids = sliceable(INT, {T, B, K}, "ids");
    out.membrane = sliceable(FLOAT, {T, B, K}, "listMembrane");
    counts4 = sliceable(INT, {T, B, 4}, "counts4");
    out.spikeBits = sliceable(FLOAT, {T, B, tilesPerGroup_ * wordsPerTile_}, "spikeBits");
    stepIds = perSample(INT, K, "stepIds");
    stepMem = perSample(FLOAT, K, "stepMembrane");
    stepCounts = perSample(UNSIGNED_INT, 4, "stepCounts");
  }
  if (readout || config_.keepDenseState)
    out.denseMembrane = sliceable(FLOAT, {T, B, N}, "denseMembrane");
  if (synaptic && config_.keepDenseState)
    out.denseSynaptic = sliceable(FLOAT, {T, B, N}, "denseSynaptic");
  popops::zero(graph_, concat(toZero), prog, {dnai_, "initState"});
  if (!readout) // a tensor has one element type: the counts are zeroed apart
    popops::zero(graph_, stepCounts, prog, {dnai_, "initCounts"}); // no list before step 0

  Tensor t = graph_.addVariable(UNSIGNED_INT, {1}, {dnai_, "t"});
  graph_.setTileMapping(t, tiles_[0].index);
  Tensor one = graph_.addConstant(UNSIGNED_INT, {1}, 1u, {dnai_, "one"});
  graph_.setTileMapping(one, tiles_[0].index);
  popops::zero(graph_, t, prog, {dnai_, "t=0"});

  Sequence body;
  // The step's input list, on every tile of the layer.
  const auto idsT = toEveryTile(body, stepSlice(body, in.inIds, t, "inIds[t]"), "inIds[t]");
  const auto cntT = toEveryTile(
      body, stepSlice(body, in.inCounts, t, "inCounts[t]").reinterpret(UNSIGNED_INT), "inCounts[t]");
  std::vector<Tensor> prevIds, prevCounts;
  if (config_.recurrent) {
    // The previous step's own list (stepIds still holds it here), on every tile.
    prevIds = toEveryTile(body, stepIds, "ids[t-1]");
    prevCounts = toEveryTile(body, stepCounts, "counts[t-1]");
  }

  // I[t] = W x[t]: rows of the input spikes.
  ComputeSet mm = graph_.addComputeSet({dnai_, "spikeMatmul"});
  const double spikesIn = std::min<double>(capacityIn_, plan_.spec.activity * inFeatures_);
  addSpikeMatmul(mm, idsT, cntT, 2, W, cur, false, spikesIn); // sets I[t]
  body.add(Execute(mm, {dnai_, "spikeMatmul"}));
  if (config_.recurrent) {
    // I[t] += V S[t-1].
    ComputeSet rm = graph_.addComputeSet({dnai_, "recurrentMatmul"});
    addSpikeMatmul(rm, prevIds, prevCounts, 4, V, cur, true,
                std::min<double>(K, plan_.spec.activity * N));
    body.add(Execute(rm, {dnai_, "recurrentMatmul"}));
  }

  // Neuron state; the spiking models emit the tile's lists.
  ComputeSet up = graph_.addComputeSet({dnai_, "stateUpdate"});
  const char *updateVertex = readout ? "ReadoutUpdate" : synaptic ? "SynapticUpdate" : "LifUpdate";
  for (unsigned j = 0; j < tiles_.size(); ++j) {
    const Tile &tile = tiles_[j];
    for (unsigned b = 0; b < tile.samples; ++b) {
      auto v = graph_.addVertex(up, updateVertex);
      graph_.connect(v["currents"], cur[j][b]);
      graph_.connect(v["bias"], config_.hasBias ? bias[j] : noBias);
      graph_.connect(v["beta"], beta[j]);
      graph_.connect(v["membrane"], U[j][b].slice(0, tile.width));
      graph_.setInitialValue(v["numNeurons"], tile.width);
      if (readout) {
        graph_.connect(v["membraneOut"], outStep[j][b]);
      } else {
        graph_.connect(v["threshold"], thr[j]);
        graph_.connect(v["spiked"], spiked[j][b].slice(0, tile.width));
        graph_.connect(v["spikeIds"], spikeIds[j][b]);
        graph_.connect(v["spikeMembrane"], spikeMem[j][b]);
        graph_.connect(v["eligibleIds"], eligIds[j][b]);
        graph_.connect(v["eligibleMembrane"], eligMem[j][b]);
        graph_.connect(v["counts"], tileCounts[j][b]);
        graph_.setInitialValue(v["firstNeuron"], tile.first);
        graph_.setInitialValue(v["reset"], config_.reset);
        graph_.setInitialValue(v["gradWindow"], config_.gradWindow);
        if (synaptic) {
          graph_.connect(v["alpha"], alpha[j]);
          graph_.connect(v["synaptic"], syn[j][b]);
        }
      }
      graph_.setTileMapping(v, tile.index);
      // a readout lists nothing
      estimate(v, plan::cost::stateUpdateWorkerCycles(
                      plan_.spec.model, tile.width,
                      readout ? 0.0 : expectedListed(tile)));
    }
  }
  body.add(Execute(up, {dnai_, "stateUpdate"}));

  if (!readout) {
    // Sample b's partial lists (from its group's tiles) meet on combineTile(b);
    // only the first localCapacity entries of each can reach the combined list.
    std::vector<std::vector<Tensor>> sIds(B), sMem(B), eIds(B), eMem(B), counts(B);
    for (unsigned b = 0; b < B; ++b)
      for (unsigned j : groupTiles(b)) {
        const unsigned L = tiles_[j].localCapacity, lb = localSample(b);
        sIds[b].push_back(spikeIds[j][lb].slice(0, L));
        sMem[b].push_back(spikeMem[j][lb].slice(0, L));
        eIds[b].push_back(eligIds[j][lb].slice(0, L));
        eMem[b].push_back(eligMem[j][lb].slice(0, L));
        counts[b].push_back(tileCounts[j][lb]);
      }
    const auto gIds = gatherSamples(body, sIds, "gatheredSpikeIds");
    const auto gMem = gatherSamples(body, sMem, "gatheredSpikeMembrane");
    const auto gEIds = gatherSamples(body, eIds, "gatheredEligibleIds");
    const auto gEMem = gatherSamples(body, eMem, "gatheredEligibleMembrane");
    const auto gCounts = gatherSamples(body, counts, "gatheredCounts");
    ComputeSet cb = graph_.addComputeSet({dnai_, "combine"});
    // With fewer samples per combining tile than workers, each sample's combine is
    // a SpikeListCombineParts whose workers share out the tiles' lists (the
    // planner's choice too: plan::cost::listCombineUsesParts).
    const unsigned workers = graph_.getTarget().getNumWorkerContexts();
    const unsigned combineSamples = (tiles_[0].samples + tilesPerGroup_ - 1) / tilesPerGroup_;
    const bool parts = plan::cost::listCombineUsesParts(combineSamples, tilesPerGroup_,
                                                        expectedListed(), workers);
    for (unsigned b = 0; b < B; ++b) {
      std::vector<Tensor> pIds, pMem, qIds, qMem;
      unsigned at = 0;
      for (unsigned j : groupTiles(b)) {
        const unsigned L = tiles_[j].localCapacity;
        pIds.push_back(gIds[b].slice(at, at + L));
        pMem.push_back(gMem[b].slice(at, at + L));
        qIds.push_back(gEIds[b].slice(at, at + L));
        qMem.push_back(gEMem[b].slice(at, at + L));
        at += L;
      }
      auto v = graph_.addVertex(cb, parts ? "SpikeListCombineParts" : "SpikeListCombine");
      connectEach(v, "spikeIds", pIds);
      connectEach(v, "spikeMembrane", pMem);
      connectEach(v, "eligibleIds", qIds);
      connectEach(v, "eligibleMembrane", qMem);
      graph_.connect(v["tileCounts"], gCounts[b]);
      graph_.connect(v["ids"], stepIds[b]);
      graph_.connect(v["membrane"], stepMem[b]);
      graph_.connect(v["counts"], stepCounts[b]);
      graph_.setTileMapping(v, combineTile(b));
      estimate(v, parts ? plan::cost::vertexCycles(plan::cost::listCombinePartsWorkerCycles(
                                                       tilesPerGroup_, expectedListed(), workers),
                                                   workers)
                        : plan::cost::listCombineWorkerCycles(tilesPerGroup_, expectedListed()));
    }
    // Every spike of the step as bits, dropped ones included: the backward
    // pass needs them for the resets.
    for (unsigned j = 0; j < tiles_.size(); ++j)
      for (unsigned b = 0; b < tiles_[j].samples; ++b) {
        auto v = graph_.addVertex(cb, "SpikeBitsPack",
                                  {{"spiked", spiked[j][b]}, {"bits", bits[j][b]}});
        graph_.setInitialValue(v["numNeurons"], tiles_[j].width);
        graph_.setTileMapping(v, tiles_[j].index);
        estimate(v, spikeBitsCycles(tiles_[j].width));
      }
    body.add(Execute(cb, {dnai_, "combine"}));
    stepUpdate(body, out.ids, stepIds, t, "ids[t]=");
    stepUpdate(body, out.membrane, stepMem, t, "membrane[t]=");
    stepUpdate(body, counts4, stepCounts.reinterpret(INT), t, "counts[t]=");
    stepUpdate(body, out.spikeBits, assemble(bits), t, "spikeBits[t]=");
  }
  if (readout)
    stepUpdate(body, out.denseMembrane, assemble(outStep), t, "U[t]=");
  else if (config_.keepDenseState)
    stepUpdate(body, out.denseMembrane, unpadded(U), t, "U[t]=");
  if (synaptic && config_.keepDenseState)
    stepUpdate(body, out.denseSynaptic, assemble(syn), t, "syn[t]=");
  popops::addInPlace(graph_, t, one, body, {dnai_, "t+=1"});
  prog.add(Repeat(T, body, {dnai_, "timeLoop"}));

  if (!readout) {
    out.counts = poputil::duplicate(graph_, counts4.slice(0, 2, 2), prog, {dnai_, "counts"});
    out.needed = popops::cast(graph_, counts4.slice(2, 4, 2), FLOAT, prog, {dnai_, "needed"});
    // values[t, b, k] = k < spikes listed: the differentiable part of the list.
    std::vector<int> iota(K);
    std::iota(iota.begin(), iota.end(), 0);
    Tensor k = graph_.addConstant<int>(INT, {1, 1, K}, iota, {dnai_, "k"});
    graph_.setTileMapping(k, tiles_[0].index);
    const Tensor spikes = out.counts.slice(0, 1, 2).broadcast(K, 2);
    out.values = popops::map(graph_, pe::Cast(pe::Lt(pe::_1, pe::_2), FLOAT),
                             {k.broadcast(T, 0).broadcast(B, 1), spikes}, prog, {dnai_, "values"});
  }
  return out;
}

BackwardOutputs LayerGraph::backward(Sequence &prog, const BackwardInputs &bin) {
  const ForwardInputs &in = bin.forward;
  const ForwardOutputs &fo = bin.outputs;
  const unsigned B = batch_, T = steps_, K = capacityOut_, Kin = capacityIn_, N = outFeatures_;
  const unsigned numTiles = unsigned(tiles_.size()); // of all sample groups
  const bool readout = config_.model == snn::MODEL_READOUT, synaptic = config_.model == snn::MODEL_SYNAPTIC;
  const bool floatW = weightType_ == FLOAT;
  const std::string wt = floatW ? "float" : "half";
  // The tile of sample b's group that reduces it (combineTile(b)).
  auto reducer = [&](unsigned b) { return groupTiles(b)[localSample(b) % tilesPerGroup_]; };
  // WeightGradRows is a MultiVertex over the tile's worker contexts.
  const unsigned workers = graph_.getTarget().getNumWorkerContexts();
  const bool denseU = readout || (config_.keepDenseState && fo.denseMembrane.valid());
  const bool denseSyn = synaptic && config_.keepDenseState && fo.denseSynaptic.valid();

  // The weight's blocks serve the input gradient only (dW needs no W).
  const auto W = config_.inputNeedsGrad ? weightBlocks(prog, in.weight, inFeatures_, "W")
                                        : std::vector<Tensor>();
  std::vector<Tensor> V;
  if (config_.recurrent)
    V = weightBlocks(prog, in.recWeight, N, "V");
  const auto beta = paramSlices(prog, in.beta, "beta");
  std::vector<Tensor> thr, alpha;
  if (!readout)
    thr = paramSlices(prog, in.threshold, "threshold");
  if (synaptic)
    alpha = paramSlices(prog, in.alpha, "alpha");
  const Tensor noFloat = empty(FLOAT);

  // Dense carries and the per-sample parameter-gradient accumulators (the
  // per-sample vertices of a compute set must not share an InOut).
  const auto carry = perTile(FLOAT, false, "carry");
  const auto curGrad = perTile(FLOAT, true, "currentGrad"); // padding stays zero
  const auto gBeta = perTile(FLOAT, false, "gradBeta");
  std::vector<Tensor> toZero = {flatAll(carry), flatAll(curGrad),
                                flatAll(gBeta)};
  std::vector<Tensor> carrySyn, notSpiked, gThr, gAlpha, listIds, listMem, listGrad, nums, prevList,
      prevNums;
  if (!readout) {
    notSpiked = perTile(FLOAT, false, "notSpiked");
    gThr = perTile(FLOAT, false, "gradThreshold");
    toZero.push_back(flatAll(gThr));
    std::vector<Tensor> sizes2L, sizesL;
    for (const Tile &tile : tiles_) {
      const unsigned Bt = tile.samples;
      Tensor ids = graph_.addVariable(INT, {Bt, 2 * tile.localCapacity}, {dnai_, "listIds"});
      Tensor mem = graph_.addVariable(FLOAT, {Bt, 2 * tile.localCapacity}, {dnai_, "listMembrane"});
      Tensor grd = graph_.addVariable(FLOAT, {Bt, 2 * tile.localCapacity}, {dnai_, "listGrad"});
      Tensor prv = graph_.addVariable(INT, {Bt, tile.width}, {dnai_, "prevSpikeIds"});
      for (const Tensor &x : {ids, mem, grd, prv})
        graph_.setTileMapping(x, tile.index);
      listIds.push_back(ids);
      listMem.push_back(mem);
      listGrad.push_back(grd);
      prevList.push_back(prv);
    }
    nums = perTileFixed(UNSIGNED_INT, 2, "numListed");
    prevNums = perTileFixed(UNSIGNED_INT, 1, "numPrevSpikes");
  }
  if (synaptic) {
    carrySyn = perTile(FLOAT, false, "carrySynaptic");
    gAlpha = perTile(FLOAT, false, "gradAlpha");
    toZero.push_back(flatAll(carrySyn));
    toZero.push_back(flatAll(gAlpha));
  }
  // Float weight gradients in the blocks' layout.
  std::vector<Tensor> gW, gV, gB;
  for (const Tile &tile : tiles_) {
    Tensor g = graph_.addVariable(FLOAT, {inFeatures_ * tile.rowLength}, {dnai_, "gradW"});
    graph_.setTileMapping(g, tile.index);
    gW.push_back(g);
    toZero.push_back(g);
    if (config_.recurrent) {
      Tensor gv = graph_.addVariable(FLOAT, {N * tile.rowLength}, {dnai_, "gradV"});
      graph_.setTileMapping(gv, tile.index);
      gV.push_back(gv);
      toZero.push_back(gv);
    }
    if (config_.hasBias) {
      Tensor gb = graph_.addVariable(FLOAT, {tile.rowLength}, {dnai_, "gradBias"});
      graph_.setTileMapping(gb, tile.index);
      gB.push_back(gb);
      toZero.push_back(gb);
    }
  }
  // The input gradient only where something upstream differentiates the input.
  const bool inputGrad = config_.inputNeedsGrad;
  const auto partials = inputGrad ? perTileFixed(FLOAT, Kin, "inputGradPartials")
                                  : std::vector<Tensor>();
  std::vector<Tensor> recPartials;
  Tensor stepRecGrad;
  if (config_.recurrent) {
    recPartials = perTileFixed(FLOAT, K, "recurrentGradPartials");
    stepRecGrad = perSample(FLOAT, K, "recurrentGrad");
  }
  const Tensor stepGradIn = inputGrad ? perSample(FLOAT, Kin, "gradIn[t]") : Tensor();
  BackwardOutputs out;
  if (inputGrad)
    out.gradInValues = sliceable(FLOAT, {T, B, Kin}, "gradInValues");
  popops::zero(graph_, concat(toZero), prog, {dnai_, "initGrad"});
  if (!readout) {
    Tensor ones = graph_.addConstant(FLOAT, {1}, 1.0f, {dnai_, "1"});
    graph_.setTileMapping(ones, tiles_[0].index);
    prog.add(Copy(ones.broadcast(unsigned(flatAll(notSpiked).numElements()), 0),
                  flatAll(notSpiked), false, {dnai_, "notSpiked=1"}));
  }

  // Step t - 1 of a [T, ...] tensor is row t of [zeros; tensor].
  auto shiftedByOne = [&](const Tensor &x, const std::string &name) {
    std::vector<std::size_t> shape = x.shape();
    shape[0] = 1;
    Tensor z = graph_.addConstant(x.elementType(), shape, 0, {dnai_, name + "[-1]"});
    poputil::mapTensorLinearly(graph_, z);
    return concat(z, x, 0);
  };
  Tensor prevIdsAll, prevCountsAll, prevBitsAll, prevDenseU, prevDenseSyn;
  if (!readout) {
    prevBitsAll = shiftedByOne(fo.spikeBits, "spikeBits");
    if (config_.recurrent) {
      prevIdsAll = shiftedByOne(fo.ids, "ids");
      prevCountsAll = shiftedByOne(fo.counts, "counts");
    }
  }
  if (denseU)
    prevDenseU = shiftedByOne(fo.denseMembrane, "U");
  if (denseSyn)
    prevDenseSyn = shiftedByOne(fo.denseSynaptic, "syn");

  Tensor t = graph_.addVariable(UNSIGNED_INT, {1}, {dnai_, "t"});
  graph_.setTileMapping(t, tiles_[0].index);
  Tensor last = graph_.addConstant(UNSIGNED_INT, {1}, T - 1, {dnai_, "T-1"});
  Tensor one = graph_.addConstant(UNSIGNED_INT, {1}, 1u, {dnai_, "one"});
  graph_.setTileMapping(last, tiles_[0].index);
  graph_.setTileMapping(one, tiles_[0].index);
  prog.add(Copy(last, t, false, {dnai_, "t=T-1"}));

  Sequence body;
  // What the tiles read of step t (and t - 1), copied onto them.
  const auto idsT = toEveryTile(body, stepSlice(body, in.inIds, t, "inIds[t]"), "inIds[t]");
  const auto cntT = toEveryTile(
      body, stepSlice(body, in.inCounts, t, "inCounts[t]").reinterpret(UNSIGNED_INT), "inCounts[t]");
  Tensor gradT = stepSlice(body, bin.gradValues, t, "grad[t]"); // [B, K] or readout [B, N]
  std::vector<Tensor> oIds, oCnt, oMem, pIds, pCnt, pBits, pU, pSyn;
  if (!readout) {
    oIds = toEveryTile(body, stepSlice(body, fo.ids, t, "ids[t]"), "ids[t]");
    oCnt = toEveryTile(body, stepSlice(body, fo.counts, t, "counts[t]"), "counts[t]");
    oMem = toEveryTile(body, stepSlice(body, fo.membrane, t, "membrane[t]"), "membrane[t]");
    pBits = toOwnTiles(body, stepSlice(body, prevBitsAll, t, "spikeBits[t-1]"), "spikeBits[t-1]",
                       wordsPerTile_);
    if (config_.recurrent) { // V's gradient pairs dL/dI[t] with the listed spikes of t - 1
      pIds = toEveryTile(body, stepSlice(body, prevIdsAll, t, "ids[t-1]"), "ids[t-1]");
      pCnt = toEveryTile(body, stepSlice(body, prevCountsAll, t, "counts[t-1]"), "counts[t-1]");
    }
  }
  if (denseU)
    pU = toOwnTiles(body, stepSlice(body, prevDenseU, t, "U[t-1]"), "U[t-1]");
  if (denseSyn)
    pSyn = toOwnTiles(body, stepSlice(body, prevDenseSyn, t, "syn[t-1]"), "syn[t-1]");

  if (config_.recurrent) {
    // dL/dS[t] += V^T dL/dI[t+1]; curGrad still holds step t+1 (zero at T-1).
    ComputeSet dot = graph_.addComputeSet({dnai_, "recurrentInputGrad"});
    addInputGrad(dot, oIds, oCnt, V, curGrad, recPartials,
                 std::min<double>(K, 2 * plan_.spec.activity * N));
    body.add(Execute(dot, {dnai_, "recurrentInputGrad"}));
    popops::zero(graph_, stepRecGrad, body, {dnai_, "recurrentGrad=0"});
    std::vector<Tensor> recCounts(B);
    for (unsigned b = 0; b < B; ++b)
      recCounts[b] = oCnt[reducer(b)][localSample(b)][1].reinterpret(UNSIGNED_INT);
    // as the planner: the expected listed entries, not the capacity
    reducePartials(body, recPartials, K, recCounts, stepRecGrad,
                   std::min<double>(K, 2 * plan_.spec.activity * N), "recurrentReduce");
    popops::addInPlace(graph_, gradT, stepRecGrad, body, {dnai_, "grad[t]+=recurrent"});
  }

  std::vector<Tensor> gradLocal; // readout: the tile's neurons of dL/dU[t]; else the list's grads
  if (readout)
    gradLocal = toOwnTiles(body, gradT, "grad[t]");
  else
    gradLocal = toEveryTile(body, gradT, "grad[t]");
  if (!readout) {
    ComputeSet sl = graph_.addComputeSet({dnai_, "tileListSlice"});
    for (unsigned j = 0; j < numTiles; ++j)
      for (unsigned b = 0; b < tiles_[j].samples; ++b) {
        auto v = graph_.addVertex(sl, "TileListSlice",
                                  {{"ids", oIds[j][b]},
                                   {"membrane", oMem[j][b]},
                                   {"grad", gradLocal[j][b]},
                                   {"counts", oCnt[j][b]},
                                   {"outIds", listIds[j][b]},
                                   {"outMembrane", listMem[j][b]},
                                   {"outGrad", listGrad[j][b]},
                                   {"numSpikes", nums[j][b][0]},
                                   {"numListed", nums[j][b][1]}});
        graph_.setInitialValue(v["firstNeuron"], tiles_[j].first);
        graph_.setInitialValue(v["numNeurons"], tiles_[j].width);
        graph_.setInitialValue(v["spikesOnly"], 0u);
        graph_.setTileMapping(v, tiles_[j].index);
        estimate(v, plan::cost::listSliceWorkerCycles(tiles_[j].localCapacity));
        // Every spike of step t - 1 on the tile, dropped ones included.
        auto p = graph_.addVertex(sl, "SpikeBitsToList",
                                  {{"bits", pBits[j][b]},
                                   {"ids", prevList[j][b]},
                                   {"count", prevNums[j][b][0]}});
        graph_.setInitialValue(p["firstNeuron"], tiles_[j].first);
        graph_.setInitialValue(p["numNeurons"], tiles_[j].width);
        graph_.setTileMapping(p, tiles_[j].index);
        estimate(p, spikeBitsCycles(tiles_[j].width));
      }
    body.add(Execute(sl, {dnai_, "tileListSlice"}));
  }

  ComputeSet sg = graph_.addComputeSet({dnai_, "stateGrad"});
  const char *gradVertex = readout    ? "ReadoutStateGrad"
                           : synaptic ? "SynapticStateGrad"
                                      : "LifStateGrad";
  for (unsigned j = 0; j < numTiles; ++j) {
    const Tile &tile = tiles_[j];
    for (unsigned b = 0; b < tile.samples; ++b) {
      auto v = graph_.addVertex(sg, gradVertex);
      graph_.connect(v["beta"], beta[j]);
      graph_.connect(v["prevMembrane"], denseU ? pU[j][b] : noFloat);
      graph_.connect(v["carry"], carry[j][b]);
      graph_.connect(v["currentGrad"], curGrad[j][b].slice(0, tile.width));
      graph_.connect(v["betaGrad"], gBeta[j][b]);
      graph_.setInitialValue(v["numNeurons"], tile.width);
      if (readout) {
        graph_.connect(v["outputGrad"], gradLocal[j][b]);
      } else {
        graph_.connect(v["listIds"], listIds[j][b]);
        graph_.connect(v["listMembrane"], listMem[j][b]);
        graph_.connect(v["listGrad"], listGrad[j][b]);
        graph_.connect(v["numListed"], nums[j][b][1]);
        graph_.connect(v["prevSpikeIds"], prevList[j][b]);
        graph_.connect(v["numPrevSpikes"], prevNums[j][b][0]);
        graph_.connect(v["threshold"], thr[j]);
        graph_.connect(v["notSpiked"], notSpiked[j][b]);
        graph_.connect(v["thresholdGrad"], gThr[j][b]);
        graph_.setInitialValue(v["firstNeuron"], tile.first);
        graph_.setInitialValue(v["reset"], config_.reset);
        graph_.setInitialValue(v["surrogateKind"], config_.surrogateKind);
        graph_.setInitialValue(v["surrogateP0"], config_.surrogateP0);
        graph_.setInitialValue(v["surrogateP1"], config_.surrogateP1);
        if (synaptic) {
          graph_.connect(v["alpha"], alpha[j]);
          graph_.connect(v["prevSynaptic"], denseSyn ? pSyn[j][b] : noFloat);
          graph_.connect(v["carrySynaptic"], carrySyn[j][b]);
          graph_.connect(v["alphaGrad"], gAlpha[j][b]);
        }
      }
      graph_.setTileMapping(v, tile.index);
      estimate(v, plan::cost::stateGradWorkerCycles(plan_.spec.model, tile.width,
                                                    expectedListed(tile)));
    }
  }
  body.add(Execute(sg, {dnai_, "stateGrad"}));

  // Weight gradients: one WeightGradRows per tile (and one for V) takes all of
  // its group's samples in one compute set, the workers sharing out the block's
  // rows (each element still adds its samples in order).
  {
    ComputeSet ws = graph_.addComputeSet({dnai_, "weightGrad"});
    for (unsigned j = 0; j < numTiles; ++j) {
      const unsigned samples = tiles_[j].samples;
      auto v = graph_.addVertex(ws, "WeightGradRows",
                                {{"ids", idsT[j].flatten()},
                                 {"counts", cntT[j].flatten()},
                                 {"currentGrad", curGrad[j].flatten()},
                                 {"weightGrad", gW[j]},
                                 {"biasGrad", config_.hasBias ? gB[j] : noFloat}});
      graph_.setInitialValue(v["rowLength"], tiles_[j].rowLength);
      graph_.setInitialValue(v["idStride"], Kin);
      graph_.setInitialValue(v["countStride"], 2u);
      graph_.setTileMapping(v, tiles_[j].index);
      estimate(v, plan::cost::weightGradRowsCycles(
                      samples, std::min<double>(Kin, plan_.spec.activity * inFeatures_),
                      tiles_[j].rowLength, config_.hasBias, 2, workers));
      if (config_.recurrent) {
        // V's gradient pairs dL/dI[t] with the spikes of step t-1.
        auto r = graph_.addVertex(ws, "WeightGradRows",
                                  {{"ids", pIds[j].flatten()},
                                   {"counts", pCnt[j].flatten().reinterpret(UNSIGNED_INT)},
                                   {"currentGrad", curGrad[j].flatten()},
                                   {"weightGrad", gV[j]},
                                   {"biasGrad", noFloat}});
        graph_.setInitialValue(r["rowLength"], tiles_[j].rowLength);
        graph_.setInitialValue(r["idStride"], K);
        graph_.setInitialValue(r["countStride"], 2u);
        graph_.setTileMapping(r, tiles_[j].index);
        estimate(r, plan::cost::weightGradRowsCycles(
                        samples, std::min<double>(K, plan_.spec.activity * N),
                        tiles_[j].rowLength, false, 2, workers));
      }
    }
    body.add(Execute(ws, {dnai_, "weightGrad"}));
  }

  // dL/d(input values) at every listed input entry: per-tile partial dot
  // products, summed in tile order on the sample's reducing tile.
  if (inputGrad) {
    ComputeSet ig = graph_.addComputeSet({dnai_, "inputGrad"});
    addInputGrad(ig, idsT, cntT, W, curGrad, partials,
                 std::min<double>(Kin, 2 * plan_.spec.activity * inFeatures_));
    body.add(Execute(ig, {dnai_, "inputGrad"}));
    popops::zero(graph_, stepGradIn, body, {dnai_, "gradIn[t]=0"});
    std::vector<Tensor> inCounts(B);
    for (unsigned b = 0; b < B; ++b)
      inCounts[b] = cntT[reducer(b)][localSample(b)][1];
    reducePartials(body, partials, Kin, inCounts, stepGradIn,
                   std::min<double>(Kin, 2 * plan_.spec.activity * inFeatures_), "inputGradReduce");
    stepUpdate(body, out.gradInValues, stepGradIn, t, "gradIn[t]=");
  }
  popops::subInPlace(graph_, t, one, body, {dnai_, "t-=1"});
  prog.add(Repeat(T, body, {dnai_, "timeLoopBack"}));

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
  out.gradWeight = rowsToMatrix(gW, inFeatures_, "gradW");
  if (config_.recurrent)
    out.gradRecWeight = rowsToMatrix(gV, N, "gradV");
  if (config_.hasBias) {
    std::vector<Tensor> perGroup;
    for (unsigned g = 0; g < groups_; ++g) {
      std::vector<Tensor> parts;
      for (unsigned j = g * tilesPerGroup_; j < (g + 1) * tilesPerGroup_; ++j)
        parts.push_back(gB[j].slice(0, tiles_[j].width));
      perGroup.push_back(concat(parts));
    }
    out.gradBias = groups_ == 1
                       ? poputil::duplicate(graph_, perGroup[0], prog, {dnai_, "gradBias"})
                       : sumGroups(perGroup, "gradBias");
  }
  out.gradBeta = sumSamples(gBeta, "gradBeta");
  if (!readout)
    out.gradThreshold = sumSamples(gThr, "gradThreshold");
  if (synaptic)
    out.gradAlpha = sumSamples(gAlpha, "gradAlpha");
  return out;
}

} // namespace ipu
} // namespace snn
