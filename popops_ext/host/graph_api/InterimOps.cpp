// STAND-IN until popops_ext/poplar's PopART-free op unit lands (issue 22):
// the grow() of CustomOps.cpp's four Opx classes, attributes read from a map.
#include "OpRunner.hpp"

#include "LayerGraph.hpp"
#include "plan/Planner.hpp"

#include <poplar/exceptions.hpp>
#include <popops/Cast.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include <limits>

namespace snn {
namespace hostgraph {

namespace {

double attr(const Attributes &a, const char *name, double def) {
  auto it = a.find(name);
  return it == a.end() ? def : it->second;
}

ipu::NeuronConfig neuronConfig(const Attributes &a) {
  ipu::NeuronConfig c;
  c.model = unsigned(attr(a, "model", 0));
  c.reset = unsigned(attr(a, "reset", 0));
  c.surrogateKind = unsigned(attr(a, "surrogate_kind", 0));
  c.surrogateP0 = float(attr(a, "surrogate_p0", 2.0));
  c.surrogateP1 = float(attr(a, "surrogate_p1", 0.0));
  const double w = attr(a, "grad_window", -1.0);
  c.gradWindow = w < 0 ? std::numeric_limits<float>::infinity() : float(w);
  c.hasBias = attr(a, "has_bias", 1) != 0;
  c.recurrent = attr(a, "recurrent", 0) != 0;
  c.keepDenseState = attr(a, "keep_dense_state", 0) != 0;
  c.firstTile = unsigned(attr(a, "first_tile", 0));
  return c;
}

plan::LayerPlan layerPlan(const Attributes &a, const poplar::Tensor &inIds,
                          const poplar::Tensor &weight) {
  plan::LayerSpec s;
  s.timesteps = unsigned(inIds.dim(0));
  s.batch = unsigned(inIds.dim(1));
  s.capacityIn = unsigned(inIds.dim(2));
  s.outFeatures = unsigned(weight.dim(0));
  s.inFeatures = unsigned(weight.dim(1));
  s.recurrent = attr(a, "recurrent", 0) != 0;
  s.model = plan::NeuronModel(unsigned(attr(a, "model", 0)));
  s.capacityOut = s.model == plan::NeuronModel::Readout ? 0 : unsigned(attr(a, "capacity", 1));
  s.activity = attr(a, "activity", 0.05);
  s.weightBytes = weight.elementType() == poplar::HALF ? 2 : 4;
  s.denseHistory = attr(a, "keep_dense_state", 0) != 0;
  return plan::planWithTileSize(s, plan::ipu2Target(), unsigned(attr(a, "neurons_per_tile", 8)));
}

poplar::Tensor zerosOf(poplar::Graph &g, poplar::program::Sequence &prog, const poplar::Type &type,
                       std::vector<std::size_t> shape, const std::string &name) {
  poplar::Tensor t = g.addVariable(type, shape, {name});
  poputil::mapTensorLinearly(g, t);
  popops::zero(g, t, prog, {name});
  return t;
}

poplar::Tensor as(poplar::Graph &g, poplar::program::Sequence &prog, const poplar::Tensor &t,
                  const poplar::Type &type, const std::string &name) {
  return t.elementType() == type ? t : popops::cast(g, t, type, prog, {name});
}

void expectInputs(const std::string &op, const std::vector<poplar::Tensor> &in, std::size_t n) {
  if (in.size() != n)
    throw poplar::poplar_error(op + " takes " + std::to_string(n) + " inputs, got " +
                               std::to_string(in.size()));
}

} // namespace

const std::vector<OpSignature> &opSignatures() {
  using K = GradInput::Kind;
  static const std::vector<OpSignature> table = {
      {"SnnSpikingLayer",
       {"in_ids", "in_counts", "in_values", "weight", "bias", "rec_weight", "beta", "threshold",
        "alpha"},
       {"values", "ids", "counts", "membrane", "needed", "dense_membrane", "dense_synaptic",
        "spike_bits"},
       "SnnSpikingLayerGrad",
       {{K::GradOut, 0}, {K::In, 0}, {K::In, 1}, {K::In, 3}, {K::In, 5}, {K::In, 6}, {K::In, 7},
        {K::In, 8}, {K::Out, 1}, {K::Out, 2}, {K::Out, 3}, {K::Out, 5}, {K::Out, 6},
        {K::Out, 7}},
       {{0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}, {6, 8}, {7, 0}, {8, 1}}},
      {"SnnReadoutLayer",
       {"in_ids", "in_counts", "in_values", "weight", "bias", "beta"},
       {"membrane"},
       "SnnReadoutLayerGrad",
       {{K::GradOut, 0}, {K::In, 0}, {K::In, 1}, {K::In, 3}, {K::In, 5}, {K::Out, 0}},
       {{0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 0}, {5, 1}}},
  };
  return table;
}

std::vector<poplar::Tensor> growOp(const std::string &op, poplar::Graph &graph,
                                   poplar::program::Sequence &prog, const Attributes &a,
                                   const std::vector<poplar::Tensor> &in,
                                   const std::string &name) {
  const ipu::NeuronConfig config = neuronConfig(a);
  const std::string path = name.empty() ? op : name + "/" + op;
  auto zeros = [&](const poplar::Type &type, std::vector<std::size_t> shape,
                   const std::string &what) {
    return zerosOf(graph, prog, type, std::move(shape), path + "/" + what);
  };
  if (op == "SnnSpikingLayer") {
    expectInputs(op, in, 9);
    ipu::LayerGraph layer(graph, layerPlan(a, in[0], in[3]), config, in[3].elementType(), {path});
    ipu::ForwardInputs fin{in[0], in[1], in[3], in[4], in[5], in[6], in[7], in[8]};
    const ipu::ForwardOutputs fo = layer.forward(prog, fin);
    const std::size_t T = in[0].dim(0), B = in[0].dim(1), N = in[3].dim(0);
    const bool dense = config.keepDenseState;
    return {fo.values,
            fo.ids,
            fo.counts,
            fo.membrane,
            fo.needed,
            fo.denseMembrane.valid()
                ? fo.denseMembrane
                : zeros(poplar::FLOAT,
                        dense ? std::vector<std::size_t>{T, B, N} : std::vector<std::size_t>{1},
                        "noDenseU"),
            fo.denseSynaptic.valid() ? fo.denseSynaptic
                                     : zeros(poplar::FLOAT, {1}, "noDenseSyn"),
            fo.spikeBits};
  }
  if (op == "SnnSpikingLayerGrad") {
    expectInputs(op, in, 14); // as the grad op's gradInputInfo
    ipu::LayerGraph layer(graph, layerPlan(a, in[1], in[3]), config, in[3].elementType(), {path});
    ipu::BackwardInputs bin;
    bin.forward.inIds = in[1];
    bin.forward.inCounts = in[2];
    bin.forward.weight = in[3];
    bin.forward.recWeight = in[4];
    bin.forward.beta = in[5];
    bin.forward.threshold = in[6];
    bin.forward.alpha = in[7];
    bin.outputs.ids = in[8];
    bin.outputs.counts = in[9];
    bin.outputs.membrane = in[10];
    bin.outputs.spikeBits = in[13];
    if (config.keepDenseState) {
      bin.outputs.denseMembrane = in[11];
      if (config.model == 1)
        bin.outputs.denseSynaptic = in[12];
    }
    bin.gradValues = in[0];
    const ipu::BackwardOutputs g = layer.backward(prog, bin);
    return {g.gradInValues,
            as(graph, prog, g.gradWeight, in[3].elementType(), path + "/gradWeight"),
            g.gradBias.valid() ? g.gradBias : zeros(poplar::FLOAT, {in[3].dim(0)}, "noBias"),
            g.gradRecWeight.valid() ? as(graph, prog, g.gradRecWeight, in[4].elementType(), path + "/gradRecWeight")
                                    : zeros(in[4].elementType(), in[4].shape(), "noRec"),
            g.gradBeta,
            g.gradThreshold,
            g.gradAlpha.valid() ? g.gradAlpha : zeros(poplar::FLOAT, in[7].shape(), "noAlpha"),
            zeros(in[1].elementType(), in[1].shape(), "gradInIds"),
            zeros(in[2].elementType(), in[2].shape(), "gradInCounts")};
  }
  if (op == "SnnReadoutLayer") {
    expectInputs(op, in, 6);
    ipu::LayerGraph layer(graph, layerPlan(a, in[0], in[3]), config, in[3].elementType(), {path});
    ipu::ForwardInputs fin;
    fin.inIds = in[0];
    fin.inCounts = in[1];
    fin.weight = in[3];
    fin.bias = in[4];
    fin.beta = in[5];
    return {layer.forward(prog, fin).denseMembrane};
  }
  if (op == "SnnReadoutLayerGrad") {
    expectInputs(op, in, 6); // as the grad op's gradInputInfo
    ipu::LayerGraph layer(graph, layerPlan(a, in[1], in[3]), config, in[3].elementType(), {path});
    ipu::BackwardInputs bin;
    bin.forward.inIds = in[1];
    bin.forward.inCounts = in[2];
    bin.forward.weight = in[3];
    bin.forward.beta = in[4];
    bin.outputs.denseMembrane = in[5];
    bin.gradValues = in[0];
    const ipu::BackwardOutputs g = layer.backward(prog, bin);
    return {g.gradInValues, as(graph, prog, g.gradWeight, in[3].elementType(), path + "/gradWeight"),
            g.gradBias.valid() ? g.gradBias : zeros(poplar::FLOAT, {in[3].dim(0)}, "noBias"),
            g.gradBeta,
            zeros(in[1].elementType(), in[1].shape(), "gradInIds"),
            zeros(in[2].elementType(), in[2].shape(), "gradInCounts")};
  }
  throw poplar::poplar_error("unknown op '" + op + "'");
}

} // namespace hostgraph
} // namespace snn
