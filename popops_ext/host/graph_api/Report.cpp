#include "Report.hpp"

#include "Analysis.hpp"
#include "LayerOps.hpp"
#include "Model.hpp"
#include "NetworkOps.hpp"
#include "VertexRegistry.hpp"
#include "plan/PerformanceEstimation.hpp"
#include "plan/Target.hpp"

#include <poplar/exceptions.hpp>
#include <poputil/TileMapping.hpp>

#include <algorithm>
#include <functional>
#include <map>

namespace snn {
namespace hostgraph {

namespace {

poplar::Tensor input(poplar::Graph &g, const poplar::Type &type, std::vector<std::size_t> shape,
                     const std::string &name) {
  poplar::Tensor t = g.addVariable(type, shape, {name});
  poputil::mapTensorLinearly(g, t); // as PopART lays out a tensor no op created
  return t;
}

// Bytes each tile receives from other tiles in a Copy.
std::vector<std::uint64_t> copyReceived(const GraphModel &g, const ProgramNode &copy) {
  std::vector<std::uint64_t> received(g.target.getNumTiles(), 0);
  const std::vector<Chunk> src = chunksOf(copy.src), dst = chunksOf(copy.dst);
  forEachPairedRun(src, dst, [&](const Chunk &from, const Chunk &to) {
    const std::uint32_t s0 = from.begin, d0 = to.begin, n = from.bytes;
    // tiles of the source range, then of the destination range, pairwise
    std::vector<std::pair<std::uint32_t, unsigned>> srcTiles; // (end offset within n, tile)
    g.vars[from.var].tiles.forEach(s0, s0 + n, [&](std::uint32_t, std::uint32_t e, unsigned t) {
      srcTiles.push_back({e - s0, t});
    });
    std::size_t k = 0;
    std::uint32_t at = 0;
    g.vars[to.var].tiles.forEach(d0, d0 + n, [&](std::uint32_t, std::uint32_t e, unsigned t) {
      const std::uint32_t end = e - d0;
      while (at < end) {
        while (srcTiles[k].first <= at)
          ++k;
        const std::uint32_t stop = std::min(end, srcTiles[k].first);
        if (srcTiles[k].second != t && t != kUnmapped)
          received[t] += stop - at;
        at = stop;
      }
    });
  });
  return received;
}

std::uint64_t exchangeCycles(std::uint64_t maxReceived) {
  const plan::Target t = plan::ipu2Target();
  if (maxReceived == 0)
    return 0;
  return plan::cost::exchangeCycles(maxReceived, t.exchangeBytesPerCycle, t.syncCycles,
                                    t.exchangeOverheadCycles);
}

// A popops operation: a sync, then one cycle per 4 bytes on the busiest tile
// it touches, each element counted once however often a broadcast view
// repeats it (rough: its vertices' own estimates are poplibs', not ours).
std::uint64_t popopsCycles(const GraphModel &g, const HostOp &op) {
  std::vector<Chunk> chunks;
  for (const poplar::Tensor &t : op.costTensors())
    for (const Chunk &c : chunksOf(t))
      chunks.push_back(c);
  std::sort(chunks.begin(), chunks.end(), [](const Chunk &a, const Chunk &b) {
    return a.var != b.var ? a.var < b.var : a.begin < b.begin;
  });
  std::map<unsigned, std::uint64_t> bytes;
  std::uint32_t var = ~0u, covered = 0; // bytes of `var` already counted: [0, covered)
  for (const Chunk &c : chunks) {
    if (c.var != var) {
      var = c.var;
      covered = 0;
    }
    const std::uint32_t from = std::max(c.begin, covered), to = c.begin + c.bytes;
    if (from < to)
      g.vars[c.var].tiles.forEach(from, to, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
        bytes[tile] += e - b;
      });
    covered = std::max(covered, to);
  }
  std::uint64_t most = 0;
  for (const auto &kv : bytes)
    most = std::max(most, kv.second);
  return plan::ipu2Target().syncCycles + (most + 3) / 4;
}

// One compute set on the busiest tile, as Poplar runs it: the supervisor
// hands the tile's worker vertices out to its worker contexts (each to the
// least loaded, in order), a worker issuing once every numWorkers cycles; a
// MultiVertex takes all of them for its own estimate (which counts that).
std::uint64_t computeSetCycles(const GraphModel &g, unsigned cs) {
  const unsigned workers = g.target.getNumWorkerContexts();
  struct TileLoad {
    std::vector<std::uint64_t> worker;
    std::uint64_t multi = 0;
  };
  std::map<unsigned, TileLoad> tiles;
  for (unsigned v : g.computeSets[cs].vertices) {
    const VertexInstance &vi = g.vertices[v];
    TileLoad &t = tiles[vi.tile];
    if (vi.cls->multiVertex) {
      t.multi += vi.cycles;
    } else {
      if (t.worker.empty())
        t.worker.assign(workers, 0);
      *std::min_element(t.worker.begin(), t.worker.end()) += vi.cycles;
    }
  }
  std::uint64_t most = 0;
  for (const auto &kv : tiles) {
    const TileLoad &t = kv.second;
    std::uint64_t c = t.multi;
    if (!t.worker.empty())
      c += plan::cost::kSupervisorCycles +
           workers * *std::max_element(t.worker.begin(), t.worker.end());
    most = std::max(most, c);
  }
  return most;
}

void measure(const GraphModel &g, const ProgramNode &op, OpReport &r) {
  const std::uint64_t sync = plan::ipu2Target().syncCycles;
  // Copy programs with nothing between them are one exchange phase: one sync,
  // and the busiest receiver's bytes of all of them.
  std::vector<std::uint64_t> phase(g.target.getNumTiles(), 0);
  bool open = false, phaseInLoop = false;
  auto close = [&]() {
    if (!open)
      return;
    const std::uint64_t most = *std::max_element(phase.begin(), phase.end());
    std::uint64_t total = 0;
    for (std::uint64_t b : phase)
      total += b;
    if (phaseInLoop) {
      r.stepExchangeCycles += exchangeCycles(most);
      r.stepExchangeBytes += total;
      r.stepExchangeBytesMaxTile += most;
    } else {
      r.onceCycles += exchangeCycles(most);
    }
    std::fill(phase.begin(), phase.end(), 0);
    open = false;
  };
  std::map<std::string, std::uint64_t> sets;
  std::vector<std::string> order;
  std::function<void(const ProgramNode &, bool)> visit = [&](const ProgramNode &n, bool inLoop) {
    if (n.kind != ProgramNode::Kind::Copy && n.kind != ProgramNode::Kind::Sequence)
      close();
    if (n.kind == ProgramNode::Kind::Repeat) {
      if (inLoop || r.steps != 0)
        throw poplar::poplar_error("graph report: an op with more than one time loop");
      r.steps = n.count;
      inLoop = true;
    } else if (n.kind == ProgramNode::Kind::Execute) {
      const std::uint64_t c = computeSetCycles(g, n.computeSet);
      if (inLoop) {
        r.stepComputeCycles += c;
        r.stepSyncCycles += sync;
        const std::string &name = g.computeSets[n.computeSet].name;
        if (!sets.count(name))
          order.push_back(name);
        sets[name] += c;
      } else {
        r.onceCycles += c + sync;
      }
    } else if (n.kind == ProgramNode::Kind::Copy) {
      if (open && phaseInLoop != inLoop)
        close();
      const auto rec = copyReceived(g, n);
      for (std::size_t t = 0; t < rec.size(); ++t)
        phase[t] += rec[t];
      open = true;
      phaseInLoop = inLoop;
    } else if (n.kind == ProgramNode::Kind::HostOp) {
      (inLoop ? r.stepPopopsCycles : r.onceCycles) += popopsCycles(g, *n.op);
    }
    for (const auto &child : n.children)
      visit(*child.hostNode(), inLoop);
    if (n.kind == ProgramNode::Kind::Repeat)
      close(); // a loop's last copies do not merge with what follows it
  };
  visit(op, false);
  close();
  for (const auto &name : order)
    r.stepComputeSets.push_back({name, sets[name]});
}

// The layers' parameters as op inputs after the list (signature order), laid out
// as PopART lays out tensors no op created.
std::vector<poplar::Tensor> layerParams(poplar::Graph &graph, const LayerSpecification &s) {
  const std::string p = s.name + "/";
  const std::size_t N = s.outFeatures;
  const bool readout = s.attributes.at("model") == 2;
  const bool recurrent = s.attributes.count("recurrent") && s.attributes.at("recurrent") != 0;
  const bool synaptic = s.attributes.at("model") == 1;
  const poplar::Type wt = s.weightType == "half" ? poplar::HALF : poplar::FLOAT;
  std::vector<poplar::Tensor> in = {input(graph, wt, {N, s.inFeatures}, p + "weight"),
                                    input(graph, poplar::FLOAT, {N}, p + "bias")};
  if (!readout) {
    in.push_back(input(graph, wt, recurrent ? std::vector<std::size_t>{N, N}
                                            : std::vector<std::size_t>{1, 1},
                       p + "rec_weight"));
    in.push_back(input(graph, poplar::FLOAT, {N}, p + "beta"));
    in.push_back(input(graph, poplar::FLOAT, {N}, p + "threshold"));
    in.push_back(input(graph, poplar::FLOAT, {synaptic ? N : 1}, p + "alpha"));
  } else {
    in.push_back(input(graph, poplar::FLOAT, {N}, p + "beta"));
  }
  return in;
}

// The pipelined network's training step as one program (NetworkOps.hpp), on a
// graph of its own: its forward and backward time loops, measured.
std::vector<OpReport> fusedOps(const std::vector<LayerSpecification> &layers, unsigned batch,
                               unsigned steps, unsigned inputCapacity) {
  poplar::Graph graph(poplar::Target::createIPUTarget(1, "ipu2"));
  const std::size_t T = steps, B = batch;
  std::vector<ipu::NetworkLayer> net;
  std::vector<std::vector<poplar::Tensor>> inputs;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const bool readout = layers[l].attributes.at("model") == 2;
    net.push_back({readout ? ipu::OpKind::Readout : ipu::OpKind::Spiking,
                   ipu::LayerAttributes::parse(ipu::AttributeMap::fromNumbers(
                       layers[l].attributes))});
    std::vector<poplar::Tensor> in(3); // a later layer's list comes from the layer before
    if (l == 0)
      in = {input(graph, poplar::INT, {T, B, inputCapacity}, "input/ids"),
            input(graph, poplar::INT, {T, B, 2}, "input/counts"),
            input(graph, poplar::FLOAT, {T, B, inputCapacity}, "input/values")};
    for (const poplar::Tensor &t : layerParams(graph, layers[l]))
      in.push_back(t);
    inputs.push_back(std::move(in));
  }
  poplar::program::Sequence forward, backward;
  const auto out = ipu::growNetworkForward(graph, forward, net, inputs, {"network"});
  std::vector<std::vector<poplar::Tensor>> gradInputs;
  std::vector<std::vector<ipu::TensorSpec>> specs;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const ipu::OpKind kind = net[l].kind;
    const ops::OpSignature &sig = ipu::signature(kind);
    // the forward op's inputs as the layer saw them (a later one's: the list before's)
    std::vector<poplar::Tensor> seen = inputs[l];
    if (l > 0) {
      seen[ops::spiking::kInIds] = out[l - 1][ops::spiking::kIds];
      seen[ops::spiking::kInCounts] = out[l - 1][ops::spiking::kCounts];
      seen[ops::spiking::kInValues] = out[l - 1][ops::spiking::kValues];
    }
    std::vector<ipu::TensorSpec> forwardSpecs;
    for (const poplar::Tensor &t : seen)
      forwardSpecs.push_back({t.elementType(), t.shape()});
    specs.push_back(ipu::gradOutputSpecs(kind, net[l].attributes, forwardSpecs));
    std::vector<poplar::Tensor> gin;
    for (int i = 0; i < sig.numGradInputs; ++i) {
      const ops::GradInput &w = sig.gradInputs[i];
      if (w.source == ops::GradSource::GradOut) // the loss reads the last layer's output
        gin.push_back(l + 1 == layers.size() ? input(graph, poplar::FLOAT,
                                                     out[l][std::size_t(w.index)].shape(),
                                                     "loss/grad")
                                             : poplar::Tensor());
      else if (w.source == ops::GradSource::In)
        gin.push_back(inputs[l][std::size_t(w.index)]);
      else
        gin.push_back(out[l][std::size_t(w.index)]);
    }
    gradInputs.push_back(std::move(gin));
  }
  ipu::growNetworkBackward(graph, backward, net, gradInputs, specs, {"network"});
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (std::size_t k = 3; k < inputs[l].size(); ++k)
      graph.createHostWrite(layers[l].name + "/in" + std::to_string(k), inputs[l][k]);
  const GraphModel &g = graph.hostModel();
  std::vector<OpReport> ops(2);
  ops[0].op = "SnnNetwork";
  ops[1].op = "SnnNetworkGrad";
  measure(g, *forward.hostNode(), ops[0]);
  measure(g, *backward.hostNode(), ops[1]);
  return ops;
}

} // namespace

GraphReport graphReport(const std::vector<LayerSpecification> &layers, unsigned batch,
                        unsigned steps, unsigned inputCapacity, bool fused) {
  if (layers.empty())
    throw poplar::poplar_error("graph report of no layers");
  // first, so that its graph is gone before the layers' ops' is built
  std::vector<OpReport> fusedReport;
  if (fused)
    fusedReport = fusedOps(layers, batch, steps, inputCapacity);
  poplar::Graph graph(poplar::Target::createIPUTarget(1, "ipu2"));
  const std::size_t T = steps, B = batch;
  struct Layer {
    std::vector<poplar::Tensor> in, out;
    poplar::program::Sequence forward, backward;
  };
  std::vector<Layer> net(layers.size());
  poplar::Tensor ids = input(graph, poplar::INT, {T, B, inputCapacity}, "input/ids");
  poplar::Tensor counts = input(graph, poplar::INT, {T, B, 2}, "input/counts");
  poplar::Tensor values = input(graph, poplar::FLOAT, {T, B, inputCapacity}, "input/values");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const LayerSpecification &s = layers[l];
    const bool readout = s.attributes.at("model") == 2;
    Layer &L = net[l];
    L.in = {ids, counts, values};
    for (const poplar::Tensor &t : layerParams(graph, s))
      L.in.push_back(t);
    L.out = growOp(readout ? "SnnReadoutLayer" : "SnnSpikingLayer", graph, L.forward, s.attributes,
                   L.in, {}, s.name);
    if (!readout) {
      values = L.out[0];
      ids = L.out[1];
      counts = L.out[2];
    }
  }
  // Backward from the loss's gradient of the last layer's output.
  poplar::Tensor grad = input(graph, poplar::FLOAT, net.back().out[0].shape(), "loss/grad");
  for (std::size_t l = layers.size(); l-- > 0;) {
    const LayerSpecification &s = layers[l];
    Layer &L = net[l];
    const bool readout = s.attributes.at("model") == 2;
    // The grad op's inputs as its table wires them (OpSignatures.hpp).
    const ops::OpSignature &sig =
        ipu::signature(readout ? ipu::OpKind::Readout : ipu::OpKind::Spiking);
    std::vector<poplar::Tensor> gin;
    for (int i = 0; i < sig.numGradInputs; ++i) {
      const ops::GradInput &w = sig.gradInputs[i];
      gin.push_back(w.source == ops::GradSource::GradOut ? grad
                    : w.source == ops::GradSource::In    ? L.in[std::size_t(w.index)]
                                                         : L.out[std::size_t(w.index)]);
    }
    ForwardSpecs specs;
    for (const poplar::Tensor &t : L.in)
      specs.push_back({t.elementType(), t.shape()});
    const auto grads = growOp(sig.gradName, graph, L.backward, s.attributes, gin, specs, s.name);
    // dL/d(in_values) feeds the layer before (the first layer's data gets none)
    const std::vector<int> given = ipu::gradOutputInputs(
        readout ? ipu::OpKind::Readout : ipu::OpKind::Spiking,
        ipu::LayerAttributes::parse(ipu::AttributeMap::fromNumbers(s.attributes)));
    for (std::size_t i = 0; i < given.size(); ++i)
      if (std::string(sig.inputs[given[i]].name) == "in_values")
        grad = grads[i];
  }
  poplar::program::Sequence all;
  for (auto &L : net)
    all.add(L.forward);
  for (std::size_t l = net.size(); l-- > 0;)
    all.add(net[l].backward);
  // The step's inputs come from the host, its gradients go back to it.
  for (std::size_t i = 0; i < layers.size(); ++i)
    for (std::size_t k = 3; k < net[i].in.size(); ++k)
      graph.createHostWrite(layers[i].name + "/in" + std::to_string(k), net[i].in[k]);

  const GraphModel &g = graph.hostModel();
  GraphReport r;
  r.bytesPerTile = g.target.getBytesPerTile();
  r.reservedBytesPerTile = reservedBytesPerTile();
  const auto usage = tileUsage(g, *all.hostNode());
  for (const TileUsage &u : usage) {
    r.variableBytes.push_back(u.variableBytes);
    r.vertexStateBytes.push_back(u.vertexStateBytes);
    r.vertices.push_back(u.vertices);
  }
  r.maxTile = unsigned(std::max_element(usage.begin(), usage.end(),
                                        [](const TileUsage &a, const TileUsage &b) {
                                          return a.total() < b.total();
                                        }) -
                       usage.begin());
  // Bytes per layer (variables named under the layer's ops, at the layer's
  // own peak) and the busiest tile's largest variables.
  auto layerOf = [&](const std::string &name) {
    for (std::size_t l = 0; l < layers.size(); ++l)
      if (name.compare(0, layers[l].name.size() + 1, layers[l].name + "/") == 0)
        return int(l);
    return -1;
  };
  for (std::size_t l = 0; l < layers.size(); ++l) {
    r.layerBytes.emplace_back();
    for (const TileUsage &u : tileUsage(g, *all.hostNode(), [&](std::uint32_t v) {
           return layerOf(g.vars[v].name) == int(l);
         }))
      r.layerBytes.back().push_back(u.variableBytes);
  }
  std::map<std::string, std::uint64_t> onMax;
  for (const Variable &v : g.vars)
    v.tiles.forEach(0, v.bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
      if (tile == r.maxTile)
        onMax[v.name] += e - b;
    });
  for (const auto &kv : onMax)
    r.maxTileVariables.push_back(kv);
  std::sort(r.maxTileVariables.begin(), r.maxTileVariables.end(),
            [](const auto &a, const auto &b) { return a.second > b.second; });
  r.numVariables = g.vars.size();
  r.numVertices = g.vertices.size();
  r.numComputeSets = g.computeSets.size();
  for (const auto &L : net)
    for (const auto *seq : {&L.forward, &L.backward})
      walkProgram(*seq->hostNode(), [&](const ProgramNode &n, std::uint64_t) {
        if (n.kind == ProgramNode::Kind::Copy)
          r.numRegions += n.src.hostView().regions.size() + n.dst.hostView().regions.size();
      });
  for (std::size_t l = 0; l < net.size(); ++l)
    for (int phase = 0; phase < 2; ++phase) {
      OpReport op;
      op.layer = unsigned(l);
      const bool readout = layers[l].attributes.at("model") == 2;
      op.op = std::string(readout ? "SnnReadoutLayer" : "SnnSpikingLayer") + (phase ? "Grad" : "");
      measure(g, *(phase ? net[l].backward : net[l].forward).hostNode(), op);
      r.ops.push_back(std::move(op));
    }
  r.fusedOps = std::move(fusedReport);
  return r;
}

} // namespace hostgraph
} // namespace snn
