// A layer's graph: its tiles and the variables, slices and copies its phases
// use (the phase builders themselves are in ForwardPhases.cpp and
// BackwardPhases.cpp), and the layer on its own: forward and backward as one
// Repeat over the timesteps of those phases.
#include "LayerGraph.hpp"

#include <popops/Cast.hpp>
#include <popops/DynamicSlice.hpp>
#include <popops/ElementWise.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "Codes.hpp"

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;

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

bool LayerGraph::readout() const { return config_.model == snn::MODEL_READOUT; }

ComputeSet LayerGraph::computeSet(const std::string &name) {
  return graph_.addComputeSet({dnai_, name});
}

ForwardOutputs LayerGraph::forward(Sequence &prog, const ForwardInputs &in) {
  ForwardLoop L = beginForward(prog, in);
  Tensor t = graph_.addVariable(UNSIGNED_INT, {1}, {dnai_, "t"});
  graph_.setTileMapping(t, tiles_[0].index);
  Tensor one = graph_.addConstant(UNSIGNED_INT, {1}, 1u, {dnai_, "one"});
  graph_.setTileMapping(one, tiles_[0].index);
  popops::zero(graph_, t, prog, {dnai_, "t=0"});

  Sequence body;
  auto phase = [&](const std::string &name, auto &&add) {
    ComputeSet cs = computeSet(name);
    add(cs);
    body.add(Execute(cs, {dnai_, name}));
  };
  { // the step's input list, on every tile of the layer: the slices, then their
    // copies one after another (one exchange phase, as the planner costs it)
    Sequence slices, copies;
    exchangeInput(slices, copies, L, t);
    body.add(slices);
    body.add(copies);
  }
  phase("spikeMatmul", [&](ComputeSet cs) { addSpikeMatmul(cs, L); });
  if (config_.recurrent)
    phase("recurrentMatmul", [&](ComputeSet cs) { addRecurrentMatmul(cs, L); });
  phase("stateUpdate", [&](ComputeSet cs) { addNeuronUpdate(cs, L); });
  if (!readout()) {
    exchangeTileLists(body, L);
    phase("combine", [&](ComputeSet cs) {
      addListCombine(cs, L);
      addSpikeBits(cs, L);
    });
  }
  writeStep(body, L, t);
  popops::addInPlace(graph_, t, one, body, {dnai_, "t+=1"});
  prog.add(Repeat(steps_, body, {dnai_, "timeLoop"}));
  return endForward(prog, L);
}

BackwardOutputs LayerGraph::backward(Sequence &prog, const BackwardInputs &bin) {
  BackwardLoop L = beginBackward(prog, bin);
  Tensor t = graph_.addVariable(UNSIGNED_INT, {1}, {dnai_, "t"});
  graph_.setTileMapping(t, tiles_[0].index);
  Tensor last = graph_.addConstant(UNSIGNED_INT, {1}, steps_ - 1, {dnai_, "T-1"});
  Tensor one = graph_.addConstant(UNSIGNED_INT, {1}, 1u, {dnai_, "one"});
  graph_.setTileMapping(last, tiles_[0].index);
  graph_.setTileMapping(one, tiles_[0].index);
  prog.add(Copy(last, t, false, {dnai_, "t=T-1"}));

  Sequence body;
  auto phase = [&](const std::string &name, auto &&add) {
    ComputeSet cs = computeSet(name);
    add(cs);
    body.add(Execute(cs, {dnai_, name}));
  };
  { // what the tiles read of step t (and t - 1): the slices, then their copies
    Sequence slices, copies;
    exchangeGradInputs(slices, copies, L, t);
    body.add(slices);
    body.add(copies);
  }
  if (config_.recurrent) {
    phase("recurrentInputGrad", [&](ComputeSet cs) { addRecurrentInputGrad(cs, L); });
    exchangeRecurrentPartials(body, body, L);
    phase("recurrentReduce", [&](ComputeSet cs) { addRecurrentReduce(cs, L); });
    addRecurrentGrad(body, L);
  }
  exchangeStepGrad(body, L);
  if (!readout())
    phase("tileListSlice", [&](ComputeSet cs) { addTileListSlice(cs, L); });
  phase("stateGrad", [&](ComputeSet cs) { addStateGrad(cs, L); });
  for (unsigned b = 0; b < weightGradRounds(); ++b)
    phase("weightGrad", [&](ComputeSet cs) { addWeightGrad(cs, L, b); });
  if (config_.inputNeedsGrad) { // not for the network's data
    phase("inputGrad", [&](ComputeSet cs) { addInputGrad(cs, L); });
    exchangeInputGradPartials(body, body, L);
    phase("inputGradReduce", [&](ComputeSet cs) { addInputGradReduce(cs, L); });
    writeGradStep(body, L, t);
  }
  popops::subInPlace(graph_, t, one, body, {dnai_, "t-=1"});
  prog.add(Repeat(steps_, body, {dnai_, "timeLoopBack"}));
  return endBackward(prog, L);
}

} // namespace ipu
} // namespace snn
