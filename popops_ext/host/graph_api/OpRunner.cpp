#include "OpRunner.hpp"

#include "LayerOps.hpp"
#include "Model.hpp"
#include "NetworkOps.hpp"

#include <poplar/exceptions.hpp>
#include <poputil/TileMapping.hpp>

#include <sstream>
#include <stdexcept>

namespace snn {
namespace hostgraph {

namespace {
constexpr std::size_t kCachedGraphs = 16;

std::string key(const std::string &op, const Attributes &attributes,
                const std::vector<HostArray> &inputs, const ForwardSpecs &forwardInputs) {
  std::ostringstream os;
  os.precision(17);
  os << op;
  for (const auto &kv : attributes)
    os << ';' << kv.first << '=' << kv.second;
  for (const auto &in : inputs) {
    if (in.absent) {
      os << ";absent";
      continue;
    }
    os << ';' << in.type.toString();
    for (std::size_t d : in.shape)
      os << ',' << d;
  }
  os << ";forward";
  for (const auto &spec : forwardInputs) {
    os << ';' << spec.first.toString();
    for (std::size_t d : spec.second)
      os << ',' << d;
  }
  return os.str();
}

bool findOp(const std::string &op, ipu::OpKind &kind, bool &grad) {
  for (ipu::OpKind k : {ipu::OpKind::Spiking, ipu::OpKind::Readout}) {
    const ops::OpSignature &s = ipu::signature(k);
    if (op == s.name || op == s.gradName) {
      kind = k;
      grad = op == s.gradName;
      return true;
    }
  }
  return false;
}
} // namespace

std::vector<poplar::Tensor> growOp(const std::string &op, poplar::Graph &graph,
                                   poplar::program::Sequence &prog, const Attributes &attributes,
                                   const std::vector<poplar::Tensor> &inputs,
                                   const ForwardSpecs &forwardInputs, const std::string &name) {
  ipu::OpKind kind;
  bool grad;
  if (!findOp(op, kind, grad))
    throw poplar::poplar_error("unknown op '" + op + "'");
  const ipu::LayerAttributes a =
      ipu::LayerAttributes::parse(ipu::AttributeMap::fromNumbers(attributes));
  const poplar::DebugContext dc(name);
  if (!grad)
    return ipu::growForward(graph, prog, kind, a, inputs, dc);
  std::vector<ipu::TensorSpec> specs;
  for (const auto &spec : forwardInputs)
    specs.push_back({spec.first, spec.second});
  return ipu::growBackward(graph, prog, kind, a, inputs, ipu::gradOutputSpecs(kind, a, specs),
                           dc);
}

poplar::Tensor createOpInput(const std::string &op, poplar::Graph &graph,
                             const Attributes &attributes, const ForwardSpecs &inputs, int index,
                             const std::string &name) {
  ipu::OpKind kind;
  bool grad;
  if (!findOp(op, kind, grad))
    throw poplar::poplar_error("unknown op '" + op + "'");
  if (index < 0 || std::size_t(index) >= inputs.size())
    throw poplar::index_error(op + " has no input " + std::to_string(index));
  const ipu::LayerAttributes a =
      ipu::LayerAttributes::parse(ipu::AttributeMap::fromNumbers(attributes));
  if (!grad && inputs.size() == std::size_t(ipu::signature(kind).numInputs) &&
      ipu::createsInput(kind, a, index)) {
    std::vector<ipu::TensorSpec> specs;
    for (const auto &spec : inputs)
      specs.push_back({spec.first, spec.second});
    try {
      return ipu::createInput(graph, kind, a, index, specs, {name});
    } catch (const std::invalid_argument &) {
      // shapes the op refuses: growing it names the problem
    }
  }
  poplar::Tensor t = graph.addVariable(inputs[std::size_t(index)].first,
                                       inputs[std::size_t(index)].second, {name});
  poputil::mapTensorLinearly(graph, t);
  return t;
}

OpRunner::Built &OpRunner::built(const std::string &op, const Attributes &attributes,
                                 const std::vector<HostArray> &inputs,
                                 const ForwardSpecs &forwardInputs) {
  const std::string k = key(op, attributes, inputs, forwardInputs);
  auto it = cache_.find(k);
  if (it != cache_.end())
    return it->second;
  Built b;
  b.graph = std::make_unique<poplar::Graph>(poplar::Target::createIPUTarget(1, "ipu2"));
  poplar::Graph &g = *b.graph;
  ForwardSpecs specs;
  for (const HostArray &h : inputs)
    specs.push_back({h.type, h.shape});
  std::vector<poplar::Tensor> in;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].absent) {
      in.push_back(poplar::Tensor());
      continue;
    }
    // as PopART lays out an op input that no other op laid out
    poplar::Tensor t = createOpInput(op, g, attributes, specs, int(i), "input" + std::to_string(i));
    g.createHostWrite("in" + std::to_string(i), t);
    in.push_back(t);
  }
  poplar::program::Sequence prog;
  b.outputs = growOp(op, g, prog, attributes, in, forwardInputs);
  for (std::size_t i = 0; i < b.outputs.size(); ++i)
    g.createHostRead("out" + std::to_string(i), b.outputs[i]);
  b.engine = std::make_unique<poplar::Engine>(
      g, prog, poplar::OptionFlags{{"debug.checkOutputReads", checkOutputReads_ ? "true" : "false"}});
  if (cache_.size() >= kCachedGraphs) {
    cache_.erase(order_.front());
    order_.erase(order_.begin());
  }
  order_.push_back(k);
  return cache_.emplace(k, std::move(b)).first->second;
}

std::vector<HostArray> OpRunner::run(const std::string &op, const Attributes &attributes,
                                     const std::vector<HostArray> &inputs,
                                     const ForwardSpecs &forwardInputs) {
  Built &b = built(op, attributes, inputs, forwardInputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].absent)
      b.engine->writeTensor("in" + std::to_string(i), inputs[i].data.data(),
                          inputs[i].data.data() + inputs[i].data.size());
  b.engine->run();
  std::vector<HostArray> out;
  for (std::size_t i = 0; i < b.outputs.size(); ++i) {
    HostArray a;
    a.type = b.outputs[i].elementType();
    a.shape = b.outputs[i].shape();
    a.data.resize(b.outputs[i].numElements() * typeSize(a.type));
    b.engine->readTensor("out" + std::to_string(i), a.data.data(), a.data.data() + a.data.size());
    out.push_back(std::move(a));
  }
  return out;
}

namespace {

ipu::OpKind forwardKind(const std::string &op) {
  ipu::OpKind kind;
  bool grad;
  if (!findOp(op, kind, grad) || grad)
    throw poplar::poplar_error("a network layer's op must be SnnSpikingLayer or SnnReadoutLayer, "
                               "not '" + op + "'");
  return kind;
}

std::vector<ipu::NetworkLayer> networkLayers(const NetworkCall &call) {
  if (call.ops.size() != call.attributes.size() || call.ops.size() != call.inputs.size())
    throw poplar::poplar_error("a network call needs ops, attributes and inputs per layer");
  std::vector<ipu::NetworkLayer> layers;
  for (std::size_t l = 0; l < call.ops.size(); ++l)
    layers.push_back({forwardKind(call.ops[l]), ipu::LayerAttributes::parse(
                                                    ipu::AttributeMap::fromNumbers(
                                                        call.attributes[l]))});
  return layers;
}

} // namespace

std::vector<ForwardSpecs> networkInputSpecs(const NetworkCall &call) {
  const auto layers = networkLayers(call);
  std::vector<ForwardSpecs> specs;
  std::vector<std::size_t> list;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    ForwardSpecs s;
    for (const HostArray &h : call.inputs[l])
      s.push_back({h.type, h.shape});
    if (s.size() <= ops::spiking::kWeight)
      throw poplar::poplar_error("layer " + std::to_string(l) + " has too few inputs");
    if (l > 0) {
      s[ops::spiking::kInIds] = {poplar::INT, list};
      s[ops::spiking::kInCounts] = {poplar::INT, {list[0], list[1], 2}};
      s[ops::spiking::kInValues] = {poplar::FLOAT, list};
    }
    if (layers[l].kind == ipu::OpKind::Spiking)
      list = ipu::outputShapes(layers[l].kind, layers[l].attributes,
                               s[ops::spiking::kInIds].second,
                               s[ops::spiking::kWeight].second)[ops::spiking::kIds];
    specs.push_back(std::move(s));
  }
  return specs;
}

std::vector<std::vector<poplar::Tensor>>
growNetwork(const NetworkCall &call, poplar::Graph &graph, poplar::program::Sequence &prog,
            const std::vector<std::vector<poplar::Tensor>> &inputs, const std::string &name) {
  const auto layers = networkLayers(call);
  const poplar::DebugContext dc(name);
  if (!call.grad)
    return ipu::growNetworkForward(graph, prog, layers, inputs, dc);
  if (call.forwardInputs.size() != layers.size())
    throw poplar::poplar_error("a network's backward needs the forward inputs' specs per layer");
  std::vector<std::vector<ipu::TensorSpec>> outputs;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    std::vector<ipu::TensorSpec> specs;
    for (const auto &spec : call.forwardInputs[l])
      specs.push_back({spec.first, spec.second});
    outputs.push_back(ipu::gradOutputSpecs(layers[l].kind, layers[l].attributes, specs));
  }
  return ipu::growNetworkBackward(graph, prog, layers, inputs, outputs, dc);
}

std::vector<std::vector<HostArray>> OpRunner::runNetwork(const NetworkCall &call) {
  std::ostringstream os;
  os << (call.grad ? "network-grad" : "network");
  for (std::size_t l = 0; l < call.ops.size(); ++l)
    os << '|' << key(call.ops[l], call.attributes.at(l), call.inputs.at(l),
                     call.grad ? call.forwardInputs.at(l) : ForwardSpecs{});
  const std::string k = os.str();
  auto it = networks_.find(k);
  if (it == networks_.end()) {
    BuiltNetwork b;
    b.graph = std::make_unique<poplar::Graph>(poplar::Target::createIPUTarget(1, "ipu2"));
    poplar::Graph &g = *b.graph;
    // as PopART lays out inputs no other op laid out (the weights: by their op)
    const std::vector<ForwardSpecs> specs =
        call.grad ? std::vector<ForwardSpecs>{} : networkInputSpecs(call);
    std::vector<std::vector<poplar::Tensor>> in(call.inputs.size());
    for (std::size_t l = 0; l < call.inputs.size(); ++l)
      for (std::size_t i = 0; i < call.inputs[l].size(); ++i) {
        const HostArray &h = call.inputs[l][i];
        if (h.absent) {
          in[l].push_back(poplar::Tensor());
          continue;
        }
        const std::string n = "in" + std::to_string(l) + "_" + std::to_string(i);
        poplar::Tensor t;
        if (call.grad) {
          t = g.addVariable(h.type, h.shape, {n});
          poputil::mapTensorLinearly(g, t);
        } else {
          t = createOpInput(call.ops[l], g, call.attributes[l], specs[l], int(i), n);
        }
        g.createHostWrite(n, t);
        in[l].push_back(t);
      }
    poplar::program::Sequence prog;
    b.outputs = growNetwork(call, g, prog, in);
    for (std::size_t l = 0; l < b.outputs.size(); ++l)
      for (std::size_t i = 0; i < b.outputs[l].size(); ++i)
        g.createHostRead("out" + std::to_string(l) + "_" + std::to_string(i), b.outputs[l][i]);
    b.engine = std::make_unique<poplar::Engine>(
        g, prog,
        poplar::OptionFlags{{"debug.checkOutputReads", checkOutputReads_ ? "true" : "false"}});
    if (networks_.size() >= 2)
      networks_.clear();
    it = networks_.emplace(k, std::move(b)).first;
  }
  BuiltNetwork &b = it->second;
  for (std::size_t l = 0; l < call.inputs.size(); ++l)
    for (std::size_t i = 0; i < call.inputs[l].size(); ++i) {
      const HostArray &h = call.inputs[l][i];
      if (!h.absent)
        b.engine->writeTensor("in" + std::to_string(l) + "_" + std::to_string(i), h.data.data(),
                              h.data.data() + h.data.size());
    }
  b.engine->run();
  std::vector<std::vector<HostArray>> out(b.outputs.size());
  for (std::size_t l = 0; l < b.outputs.size(); ++l)
    for (std::size_t i = 0; i < b.outputs[l].size(); ++i) {
      HostArray a;
      a.type = b.outputs[l][i].elementType();
      a.shape = b.outputs[l][i].shape();
      a.data.resize(b.outputs[l][i].numElements() * typeSize(a.type));
      b.engine->readTensor("out" + std::to_string(l) + "_" + std::to_string(i), a.data.data(),
                           a.data.data() + a.data.size());
      out[l].push_back(std::move(a));
    }
  return out;
}

} // namespace hostgraph
} // namespace snn
