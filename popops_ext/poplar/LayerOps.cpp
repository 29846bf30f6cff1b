#include "LayerOps.hpp"

#include <popops/Cast.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "Codes.hpp"
#include "ShapeString.hpp"

namespace snn {
namespace ipu {

using namespace poplar;
using namespace poplar::program;

namespace {

[[noreturn]] void fail(const std::string &what) {
  throw std::invalid_argument("snn_ipu op: " + what);
}

void checkRange(const char *name, std::int64_t value, std::int64_t lo, std::int64_t hi) {
  if (value < lo || value > hi)
    fail(std::string("attribute ") + name + "=" + std::to_string(value) + " is outside [" +
         std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The table's input names, for error messages.
const char *inputName(OpKind kind, int i) { return signature(kind).inputs[i].name; }

// The op's list inputs (in_ids, in_counts, in_values: the same in both signatures).
bool isListInput(int i) { return i <= ops::spiking::kInValues; }

// listFromNetwork: a layer after the first of a fused network, whose list comes
// from the layer before (its list inputs may be absent).
void checkInputs(OpKind kind, const std::vector<Tensor> &inputs, bool listFromNetwork = false) {
  const ops::OpSignature &sig = signature(kind);
  if (int(inputs.size()) != sig.numInputs)
    fail(std::string(sig.name) + " takes " + std::to_string(sig.numInputs) + " inputs, got " +
         std::to_string(inputs.size()));
  for (int i = 0; i < sig.numInputs; ++i) {
    if (listFromNetwork && isListInput(i) && !inputs[i].valid())
      continue;
    const Type t = inputs[i].elementType();
    const bool ok = sig.inputs[i].type == ops::DType::Int32 ? t == INT
                    : sig.inputs[i].type == ops::DType::Float ? t == FLOAT
                                                             : (t == FLOAT || t == HALF);
    if (!ok) {
      std::ostringstream os;
      os << sig.name << ": input " << sig.inputs[i].name << " has element type " << t;
      fail(os.str());
    }
  }
}

void checkShape(OpKind kind, const Tensor &t, int index, const Shape &want) {
  if (t.shape() != want)
    fail(std::string(signature(kind).name) + ": input " + inputName(kind, index) +
         " has shape " + shapeString(t.shape()) + ", expected " + shapeString(want));
}

// The input list's shapes ([T, B, K] given), against each other and the weight.
void checkList(OpKind kind, const std::vector<Tensor> &inputs, const Shape &idsShape, int ids,
               int counts, int values, int weight) {
  if (inputs[ids].valid() && inputs[ids].shape() != idsShape)
    checkShape(kind, inputs[ids], ids, idsShape);
  if (idsShape.size() != 3)
    fail(std::string(signature(kind).name) + ": in_ids must be [T, B, K], got " +
         shapeString(idsShape));
  if (inputs[counts].valid())
    checkShape(kind, inputs[counts], counts, {idsShape[0], idsShape[1], 2});
  if (inputs[values].valid())
    checkShape(kind, inputs[values], values, idsShape);
  if (inputs[weight].rank() != 2)
    fail(std::string(signature(kind).name) + ": weight must be [out, in], got " +
         shapeString(inputs[weight].shape()));
  const std::size_t in = inputs[weight].dim(1);
  if (idsShape[2] > in)
    fail("the input list's capacity K=" + std::to_string(idsShape[2]) + " exceeds in_features=" +
         std::to_string(in));
}

Tensor zeros(Graph &graph, Sequence &prog, const Type &type, const Shape &shape,
             const DebugNameAndId &dnai, const std::string &name) {
  // A variable, not a constant: PopART may update an op's outputs in place.
  Tensor t = graph.addVariable(type, shape, {dnai, name});
  poputil::mapTensorLinearly(graph, t);
  popops::zero(graph, t, prog, {dnai, name});
  return t;
}

Tensor castTo(Graph &graph, Sequence &prog, const Tensor &t, const TensorSpec &spec,
              const DebugNameAndId &dnai, const std::string &name) {
  if (t.shape() != spec.shape)
    fail("the gradient of " + name + " has shape " + shapeString(t.shape()) + ", its input " +
         shapeString(spec.shape));
  if (t.elementType() == spec.type)
    return t;
  return popops::cast(graph, t, spec.type, prog, {dnai, name});
}

} // namespace

AttributeMap AttributeMap::fromNumbers(const std::map<std::string, double> &numbers) {
  AttributeMap m;
  for (const auto &kv : numbers) {
    const ops::Attribute *attr = nullptr;
    for (const ops::Attribute &a : ops::kAttributes)
      if (kv.first == a.name)
        attr = &a;
    if (attr == nullptr)
      fail("unknown attribute " + kv.first);
    if (attr->kind == ops::AttributeKind::Float) {
      m.floats[kv.first] = float(kv.second);
    } else {
      if (!(std::floor(kv.second) == kv.second) || std::fabs(kv.second) > 9.0e15)
        fail("attribute " + kv.first + " must be a whole number");
      m.ints[kv.first] = std::int64_t(kv.second);
    }
  }
  return m;
}

std::vector<int> gradOutputInputs(OpKind kind, const LayerAttributes &a) {
  static_assert(int(ops::spiking::kInValues) == int(ops::readout::kInValues), "in_values index");
  const ops::OpSignature &sig = signature(kind);
  std::vector<int> out;
  for (int i = 0; i < sig.numGradOutputs; ++i)
    if (a.inputNeedsGrad || sig.gradOutputs[i] != ops::spiking::kInValues)
      out.push_back(sig.gradOutputs[i]);
  return out;
}

std::vector<TensorSpec> gradOutputSpecs(OpKind kind, const LayerAttributes &a,
                                        const std::vector<TensorSpec> &forwardInputs) {
  const ops::OpSignature &sig = signature(kind);
  if (int(forwardInputs.size()) != sig.numInputs)
    fail(std::string(sig.name) + " takes " + std::to_string(sig.numInputs) + " inputs");
  std::vector<TensorSpec> specs;
  for (int input : gradOutputInputs(kind, a))
    specs.push_back(forwardInputs[std::size_t(input)]);
  return specs;
}

const ops::OpSignature &signature(OpKind kind) {
  return kind == OpKind::Spiking ? ops::kSpikingLayer : ops::kReadoutLayer;
}

namespace {

// An attribute given as an int or a float must be one of the table's, of that kind.
void checkAttributeKind(const std::string &name, ops::AttributeKind given) {
  for (const ops::Attribute &attr : ops::kAttributes)
    if (name == attr.name) {
      if (attr.kind != given)
        fail("attribute " + name + " must be " +
             (attr.kind == ops::AttributeKind::Int ? "an int" : "a float"));
      return;
    }
  fail("unknown attribute " + name);
}

} // namespace

LayerAttributes LayerAttributes::parse(const AttributeMap &map) {
  for (const auto &kv : map.ints)
    checkAttributeKind(kv.first, ops::AttributeKind::Int);
  for (const auto &kv : map.floats)
    checkAttributeKind(kv.first, ops::AttributeKind::Float);
  auto getInt = [&](const char *name, std::int64_t fallback) {
    const auto it = map.ints.find(name);
    return it == map.ints.end() ? fallback : it->second;
  };
  auto getFloat = [&](const char *name, float fallback) {
    const auto it = map.floats.find(name);
    const float v = it == map.floats.end() ? fallback : it->second;
    if (std::isnan(v))
      fail(std::string("attribute ") + name + " is NaN");
    return v;
  };
  LayerAttributes r;
  r.model = getInt("model", r.model);
  r.reset = getInt("reset", r.reset);
  r.surrogateKind = getInt("surrogate_kind", r.surrogateKind);
  r.capacity = getInt("capacity", r.capacity);
  r.hasBias = getInt("has_bias", r.hasBias);
  r.recurrent = getInt("recurrent", r.recurrent);
  r.keepDenseState = getInt("keep_dense_state", r.keepDenseState);
  r.neuronsPerTile = getInt("neurons_per_tile", r.neuronsPerTile);
  r.firstTile = getInt("first_tile", r.firstTile);
  r.sampleGroups = getInt("sample_groups", r.sampleGroups);
  r.inputNeedsGrad = getInt("input_needs_grad", r.inputNeedsGrad);
  r.surrogateP0 = getFloat("surrogate_p0", r.surrogateP0);
  r.surrogateP1 = getFloat("surrogate_p1", r.surrogateP1);
  r.gradWindow = getFloat("grad_window", r.gradWindow);
  r.activity = getFloat("activity", r.activity);
  checkRange("model", r.model, 0, snn::kNumModels - 1);
  checkRange("reset", r.reset, 0, snn::kNumResets - 1);
  checkRange("surrogate_kind", r.surrogateKind, 0, snn::kNumSurrogates - 1);
  // A readout emits no list: ipu.py sends capacity 0 for it.
  checkRange("capacity", r.capacity, r.model == snn::MODEL_READOUT ? 0 : 1,
             std::numeric_limits<std::int32_t>::max());
  checkRange("has_bias", r.hasBias, 0, 1);
  checkRange("recurrent", r.recurrent, 0, r.model == snn::MODEL_READOUT ? 0 : 1);
  checkRange("keep_dense_state", r.keepDenseState, 0, 1);
  checkRange("neurons_per_tile", r.neuronsPerTile, 1, std::numeric_limits<std::int32_t>::max());
  checkRange("first_tile", r.firstTile, 0, std::numeric_limits<std::int32_t>::max());
  checkRange("sample_groups", r.sampleGroups, 1, std::numeric_limits<std::int32_t>::max());
  checkRange("input_needs_grad", r.inputNeedsGrad, 0, 1);
  if (!(r.activity >= 0.0f && r.activity <= 1.0f))
    fail("attribute activity must lie in [0, 1]");
  return r;
}

AttributeMap LayerAttributes::toMap() const {
  AttributeMap m;
  m.ints = {{"model", model},
            {"reset", reset},
            {"surrogate_kind", surrogateKind},
            {"capacity", capacity},
            {"has_bias", hasBias},
            {"recurrent", recurrent},
            {"keep_dense_state", keepDenseState},
            {"neurons_per_tile", neuronsPerTile},
            {"first_tile", firstTile},
            {"sample_groups", sampleGroups},
            {"input_needs_grad", inputNeedsGrad}};
  m.floats = {{"surrogate_p0", surrogateP0},
              {"surrogate_p1", surrogateP1},
              {"grad_window", gradWindow},
              {"activity", activity}};
  return m;
}

NeuronConfig LayerAttributes::neuronConfig() const {
  NeuronConfig c;
  c.model = unsigned(model);
  c.reset = unsigned(reset);
  c.surrogateKind = unsigned(surrogateKind);
  c.surrogateP0 = surrogateP0;
  c.surrogateP1 = surrogateP1;
  // A negative window stands for "every neuron eligible" (attributes carry no inf).
  c.gradWindow = gradWindow < 0 ? std::numeric_limits<float>::infinity() : gradWindow;
  c.hasBias = hasBias != 0;
  c.recurrent = recurrent != 0;
  c.keepDenseState = keepDenseState != 0;
  c.firstTile = unsigned(firstTile);
  c.inputNeedsGrad = inputNeedsGrad != 0;
  return c;
}

plan::LayerPlan layerPlan(const LayerAttributes &a, const Shape &inIds, const Shape &weight,
                          bool halfWeights) {
  plan::LayerSpec s;
  s.timesteps = unsigned(inIds.at(0));
  s.batch = unsigned(inIds.at(1));
  s.capacityIn = unsigned(inIds.at(2));
  s.outFeatures = unsigned(weight.at(0));
  s.inFeatures = unsigned(weight.at(1));
  s.recurrent = a.recurrent != 0;
  s.model = plan::NeuronModel(unsigned(a.model));
  s.capacityOut = a.model == snn::MODEL_READOUT ? 0 : unsigned(a.capacity);
  s.activity = a.activity;
  s.weightBytes = halfWeights ? 2 : 4;
  s.denseHistory = a.keepDenseState != 0;
  s.inputNeedsGrad = a.inputNeedsGrad != 0;
  if (std::uint64_t(a.sampleGroups) > s.batch)
    fail("attribute sample_groups=" + std::to_string(a.sampleGroups) + " exceeds the batch of " +
         std::to_string(s.batch));
  return plan::planWithTileSize(s, plan::ipu2Target(), unsigned(a.neuronsPerTile),
                                unsigned(a.sampleGroups));
}

std::vector<Shape> outputShapes(OpKind kind, const LayerAttributes &a, const Shape &inIds,
                                const Shape &weight) {
  const std::size_t T = inIds.at(0), B = inIds.at(1), N = weight.at(0);
  if (kind == OpKind::Readout)
    return {{T, B, N}};
  // The planner (and so the graph) holds a row to at most N entries.
  const std::size_t K = std::min<std::size_t>(std::size_t(a.capacity), N);
  const bool dense = a.keepDenseState != 0;
  const Shape denseShape = dense ? Shape{T, B, N} : Shape{1};
  const plan::LayerPlan p = layerPlan(a, inIds, weight, false);
  return {{T, B, K},
          {T, B, K},
          {T, B, 2},
          {T, B, K},
          {T, B, 2},
          denseShape,
          dense && a.model == snn::MODEL_SYNAPTIC ? Shape{T, B, N} : Shape{1},
          {T, B, std::size_t(p.numTiles) * spikeBitWords(p)}};
}

bool createsInput(OpKind kind, const LayerAttributes &a, int index) {
  static_assert(int(ops::spiking::kWeight) == int(ops::readout::kWeight), "weight index");
  return index == ops::spiking::kWeight ||
         (kind == OpKind::Spiking && a.recurrent != 0 && index == ops::spiking::kRecWeight);
}

Tensor createInput(Graph &graph, OpKind kind, const LayerAttributes &a, int index,
                   const std::vector<TensorSpec> &inputs, const DebugContext &dc) {
  const ops::OpSignature &sig = signature(kind);
  if (int(inputs.size()) != sig.numInputs)
    fail(std::string(sig.name) + " takes " + std::to_string(sig.numInputs) + " inputs");
  if (!createsInput(kind, a, index))
    fail(std::string(sig.name) + " does not create its input " +
         (index >= 0 && index < sig.numInputs ? sig.inputs[index].name : std::to_string(index)));
  const TensorSpec &weight = inputs[ops::spiking::kWeight];
  const TensorSpec &created = inputs[std::size_t(index)];
  if (created.shape.size() != 2 || weight.shape.size() != 2 ||
      created.shape[0] != weight.shape[0] || inputs[ops::spiking::kInIds].shape.size() != 3)
    fail(std::string(sig.name) + ": " + sig.inputs[index].name + " has shape " +
         shapeString(created.shape) + ", weight " + shapeString(weight.shape) + ", in_ids " +
         shapeString(inputs[ops::spiking::kInIds].shape) + ": expected [N, *], [N, in], [T, B, K]");
  DebugInfo info(dc, "snn_ipu");
  const DebugNameAndId dnai(info, sig.name);
  const LayerGraph layer(graph,
                         layerPlan(a, inputs[ops::spiking::kInIds].shape, weight.shape,
                                   weight.type == HALF),
                         a.neuronConfig(), created.type, {dnai, "layout"});
  return layer.createWeight(unsigned(created.shape[1]), {dnai, sig.inputs[index].name});
}

ForwardOp forwardOp(Graph &graph, OpKind kind, const LayerAttributes &a,
                    const std::vector<Tensor> &inputs, const Shape &listShape,
                    const DebugNameAndId &dnai) {
  const bool fromNetwork = !inputs.empty() && !inputs[0].valid();
  checkInputs(kind, inputs, fromNetwork);
  if (kind == OpKind::Readout) {
    using namespace ops::readout;
    if (a.model != snn::MODEL_READOUT)
      fail("SnnReadoutLayer needs model=2 (readout)");
    checkList(kind, inputs, listShape, kInIds, kInCounts, kInValues, kWeight);
    const Tensor &w = inputs[kWeight];
    const std::size_t N = w.dim(0);
    checkShape(kind, inputs[kBias], kBias, {N});
    checkShape(kind, inputs[kBeta], kBeta, {N});
    ForwardInputs fin;
    fin.inIds = inputs[kInIds];
    fin.inCounts = inputs[kInCounts];
    fin.weight = w;
    fin.bias = inputs[kBias];
    fin.beta = inputs[kBeta];
    return {LayerGraph(graph, layerPlan(a, listShape, w.shape(), w.elementType() == HALF),
                       a.neuronConfig(), w.elementType(), {dnai, "SnnReadoutLayer"}),
            fin};
  }
  using namespace ops::spiking;
  if (a.model == snn::MODEL_READOUT)
    fail("SnnSpikingLayer needs model=0 (leaky) or 1 (synaptic)");
  checkList(kind, inputs, listShape, kInIds, kInCounts, kInValues, kWeight);
  const Tensor &w = inputs[kWeight];
  const std::size_t N = w.dim(0);
  checkShape(kind, inputs[kBias], kBias, {N});
  checkShape(kind, inputs[kBeta], kBeta, {N});
  checkShape(kind, inputs[kThreshold], kThreshold, {N});
  if (a.recurrent)
    checkShape(kind, inputs[kRecWeight], kRecWeight, {N, N});
  if (a.model == snn::MODEL_SYNAPTIC)
    checkShape(kind, inputs[kAlpha], kAlpha, {N});
  const ForwardInputs fin{inputs[kInIds], inputs[kInCounts],  w,
                          inputs[kBias],  inputs[kRecWeight], inputs[kBeta],
                          inputs[kThreshold], inputs[kAlpha]};
  return {LayerGraph(graph, layerPlan(a, listShape, w.shape(), w.elementType() == HALF),
                     a.neuronConfig(), w.elementType(), {dnai, "SnnSpikingLayer"}),
          fin};
}

std::vector<Tensor> forwardOpOutputs(Graph &graph, Sequence &prog, OpKind kind,
                                     const LayerAttributes &a, const ForwardOutputs &fo,
                                     const Shape &listShape, const Shape &weightShape,
                                     const DebugNameAndId &dnai) {
  if (kind == OpKind::Readout)
    return {fo.denseMembrane};
  using namespace ops::spiking;
  const std::vector<Shape> shapes = outputShapes(kind, a, listShape, weightShape);
  std::vector<Tensor> out(kNumOutputs);
  out[kValues] = fo.values;
  out[kIds] = fo.ids;
  out[kCounts] = fo.counts;
  out[kMembrane] = fo.membrane;
  out[kNeeded] = fo.needed;
  // Without dense state the outputs are [1] stand-ins: an op's outputs are fixed.
  out[kDenseMembrane] = fo.denseMembrane.valid()
                            ? fo.denseMembrane
                            : zeros(graph, prog, FLOAT, shapes[kDenseMembrane], dnai, "noDenseU");
  out[kDenseSynaptic] = fo.denseSynaptic.valid()
                            ? fo.denseSynaptic
                            : zeros(graph, prog, FLOAT, shapes[kDenseSynaptic], dnai,
                                    "noDenseSyn");
  out[kSpikeBits] = fo.spikeBits;
  return out;
}

std::vector<Tensor> growForward(Graph &graph, Sequence &prog, OpKind kind,
                                const LayerAttributes &a, const std::vector<Tensor> &inputs,
                                const DebugContext &dc) {
  checkInputs(kind, inputs);
  DebugInfo info(dc, "snn_ipu");
  const DebugNameAndId dnai(info, signature(kind).name);
  const Shape listShape = inputs[ops::spiking::kInIds].shape();
  ForwardOp op = forwardOp(graph, kind, a, inputs, listShape, dnai);
  const ForwardOutputs fo = op.layer.forward(prog, op.inputs);
  return forwardOpOutputs(graph, prog, kind, a, fo, listShape,
                          op.inputs.weight.shape(), dnai);
}

BackwardOp backwardOp(Graph &graph, Sequence &prog, OpKind kind, const LayerAttributes &a,
                      const std::vector<Tensor> &gradInputs, const DebugNameAndId &dnai) {
  const ops::OpSignature &sig = signature(kind);
  if (int(gradInputs.size()) != sig.numGradInputs)
    fail(std::string(sig.gradName) + " takes " + std::to_string(sig.numGradInputs) + " inputs");
  for (int i = 0; i < sig.numGradInputs; ++i)
    if (!gradInputs[i].valid() && !ops::gradInputIsOptional(sig.gradInputs[i]))
      fail(std::string(sig.gradName) + ": grad input " + std::to_string(i) + " (" +
           (sig.gradInputs[i].source == ops::GradSource::In
                ? sig.inputs[sig.gradInputs[i].index].name
                : sig.outputs[sig.gradInputs[i].index].name) +
           ") is not connected, and only the gradients of outputs may be absent");
  // Both grad ops: the layer's graph from the forward's input list and weight, which
  // with beta are also the first of its backward inputs.
  auto layerGrad = [&](int inIds, int inCounts, int weight, int beta, const char *name,
                       BackwardInputs &bin) {
    const Tensor &w = gradInputs[weight];
    bin.forward.inIds = gradInputs[inIds];
    bin.forward.inCounts = gradInputs[inCounts];
    bin.forward.weight = w;
    bin.forward.beta = gradInputs[beta];
    return LayerGraph(graph,
                      layerPlan(a, gradInputs[inIds].shape(), w.shape(), w.elementType() == HALF),
                      a.neuronConfig(), w.elementType(), {dnai, name});
  };
  // No gradient reaches an output that nothing downstream used.
  auto gradOrZeros = [&](const Tensor &g, const Tensor &like, const char *name) {
    return g.valid() ? g : zeros(graph, prog, FLOAT, like.shape(), dnai, name);
  };

  if (kind == OpKind::Readout) {
    using namespace ops::readout;
    BackwardInputs bin;
    LayerGraph layer =
        layerGrad(kGradInIds, kGradInCounts, kGradWeight, kGradBeta, "SnnReadoutLayerGrad", bin);
    bin.outputs.denseMembrane = gradInputs[kGradOutMembrane];
    bin.gradValues =
        gradOrZeros(gradInputs[kGradMembrane], gradInputs[kGradOutMembrane], "noGradMembrane");
    return {std::move(layer), bin};
  }

  using namespace ops::spiking;
  BackwardInputs bin;
  LayerGraph layer =
      layerGrad(kGradInIds, kGradInCounts, kGradWeight, kGradBeta, "SnnSpikingLayerGrad", bin);
  bin.forward.recWeight = gradInputs[kGradRecWeight];
  bin.forward.threshold = gradInputs[kGradThreshold];
  bin.forward.alpha = gradInputs[kGradAlpha];
  bin.outputs.ids = gradInputs[kGradIds];
  bin.outputs.counts = gradInputs[kGradCounts];
  bin.outputs.membrane = gradInputs[kGradMembrane];
  bin.outputs.spikeBits = gradInputs[kGradSpikeBits];
  if (a.keepDenseState) {
    bin.outputs.denseMembrane = gradInputs[kGradDenseMembrane];
    if (a.model == snn::MODEL_SYNAPTIC)
      bin.outputs.denseSynaptic = gradInputs[kGradDenseSynaptic];
  }
  // where only the ids or counts are used on, no gradient reaches the values
  bin.gradValues = gradOrZeros(gradInputs[kGradValues], gradInputs[kGradMembrane], "noGradValues");
  return {std::move(layer), bin};
}

std::vector<Tensor> backwardOpOutputs(Graph &graph, Sequence &prog, OpKind kind,
                                      const LayerAttributes &a, const BackwardOutputs &bo,
                                      const std::vector<TensorSpec> &outputs,
                                      const DebugNameAndId &dnai) {
  const ops::OpSignature &sig = signature(kind);
  const std::vector<int> given = gradOutputInputs(kind, a);
  if (outputs.size() != given.size())
    fail(std::string(sig.gradName) + " makes " + std::to_string(given.size()) + " outputs");
  // Gradient i is that of forward input given[i] (none for an input not given one).
  std::vector<Tensor> grads(given.size());
  auto put = [&](int forwardInput, const Tensor &g) {
    for (std::size_t i = 0; i < given.size(); ++i)
      if (given[i] == forwardInput) {
        const char *name = sig.inputs[forwardInput].name;
        grads[i] = g.valid() ? castTo(graph, prog, g, outputs[i], dnai, name)
                             : zeros(graph, prog, outputs[i].type, outputs[i].shape, dnai, name);
      }
  };
  if (kind == OpKind::Readout) {
    using namespace ops::readout;
    put(kInIds, Tensor());
    put(kInCounts, Tensor());
    put(kInValues, bo.gradInValues);
    put(kWeight, bo.gradWeight);
    put(kBias, bo.gradBias);
    put(kBeta, bo.gradBeta);
    return grads;
  }
  using namespace ops::spiking;
  put(kInIds, Tensor());
  put(kInCounts, Tensor());
  put(kInValues, bo.gradInValues);
  put(kWeight, bo.gradWeight);
  put(kBias, bo.gradBias);
  put(kRecWeight, bo.gradRecWeight);
  put(kBeta, bo.gradBeta);
  put(kThreshold, bo.gradThreshold);
  put(kAlpha, bo.gradAlpha);
  return grads;
}

std::vector<Tensor> growBackward(Graph &graph, Sequence &prog, OpKind kind,
                                 const LayerAttributes &a, const std::vector<Tensor> &gradInputs,
                                 const std::vector<TensorSpec> &outputs, const DebugContext &dc) {
  const ops::OpSignature &sig = signature(kind);
  const std::size_t given = gradOutputInputs(kind, a).size();
  if (int(gradInputs.size()) != sig.numGradInputs || outputs.size() != given)
    fail(std::string(sig.gradName) + " takes " + std::to_string(sig.numGradInputs) +
         " inputs and makes " + std::to_string(given) + " outputs");
  DebugInfo info(dc, "snn_ipu");
  const DebugNameAndId dnai(info, sig.gradName);
  BackwardOp op = backwardOp(graph, prog, kind, a, gradInputs, dnai);
  const BackwardOutputs bo = op.layer.backward(prog, op.inputs);
  return backwardOpOutputs(graph, prog, kind, a, bo, outputs, dnai);
}

} // namespace ipu
} // namespace snn
