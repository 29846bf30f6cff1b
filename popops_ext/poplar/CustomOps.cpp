// PopART custom ops (SDK only): SnnSpikingLayer / SnnReadoutLayer and their
// grad ops in the "ai.snn_ipu" domain, version 1. PopTorch reaches them with
// poptorch.custom_op(..., "SnnSpikingLayer", "ai.snn_ipu", 1, ...) once
// libsnn_ipu_popart.so is loaded (its static creators register the ops).
//
// A thin adapter: the signatures (inputs, outputs, what each grad op reads and
// produces) come from OpSignatures.hpp, the graph code from LayerOps.cpp. The
// float input `in_values` ([T, B, Kin], 1 at input spikes) is what makes the
// input list differentiable in PopART's autodiff: its gradient is dL/d(input
// values), which the layer before consumes. Every forward input gets a
// gradient (see OpSignatures.hpp and tests/test_op_signatures.py for why).
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <popart/op.hpp>
#include <popart/opmanager.hpp>
#include <popart/opserialiser.hpp>
#include <popart/popx/opx.hpp>
#include <popart/popx/opxmanager.hpp>

#include "LayerGraph.hpp"
#include "LayerOps.hpp"
#include "OpSignatures.hpp"

namespace snn {
namespace popart_ops {

using ipu::OpKind;
using popart::DataType;
using popart::TensorInfo;

popart::OperatorIdentifier identifier(const char *name, int numInputs, int numOutputs) {
  return {ops::kDomain, name, ops::kDomainVersion, {numInputs, numInputs}, numOutputs};
}

popart::OperatorIdentifier forwardId(OpKind kind) {
  const ops::OpSignature &s = ipu::signature(kind);
  return identifier(s.name, s.numInputs, s.numOutputs);
}

popart::OperatorIdentifier gradId(OpKind kind) {
  const ops::OpSignature &s = ipu::signature(kind);
  return identifier(s.gradName, s.numGradInputs, s.numGradOutputs);
}

DataType dataType(ops::DType t) { return t == ops::DType::Int32 ? DataType::INT32 : DataType::FLOAT; }

poplar::Type poplarType(DataType t) {
  switch (t) {
  case DataType::FLOAT16:
    return poplar::HALF;
  case DataType::INT32:
    return poplar::INT;
  default:
    return poplar::FLOAT;
  }
}

ipu::Shape shapeOf(const TensorInfo &info) {
  return ipu::Shape(info.shape().begin(), info.shape().end());
}

ipu::AttributeMap attributeMap(const popart::Attributes &a) {
  ipu::AttributeMap m;
  for (const ops::Attribute &attr : ops::kAttributes) {
    if (!a.hasAttribute(attr.name))
      continue;
    if (attr.kind == ops::AttributeKind::Int)
      m.ints[attr.name] = a.getAttribute<popart::Attributes::Int>(attr.name);
    else
      m.floats[attr.name] = a.getAttribute<popart::Attributes::Float>(attr.name);
  }
  return m;
}

// snn_codelets.gp sits next to this library unless SNN_IPU_CODELETS says otherwise.
std::string codeletsPath() {
  if (const char *env = std::getenv("SNN_IPU_CODELETS"))
    return env;
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&codeletsPath), &info) && info.dli_fname) {
    std::string so = info.dli_fname;
    return so.substr(0, so.find_last_of('/') + 1) + "snn_codelets.gp";
  }
  return "snn_codelets.gp";
}

// ---------------------------------------------------------------- IR ops

class SnnLayerOpBase : public popart::Op {
public:
  SnnLayerOpBase(const popart::OperatorIdentifier &id, const popart::Op::Settings &settings,
                 OpKind kind, const ipu::LayerAttributes &attributes)
      : popart::Op(id, settings), kind_(kind), attributes_(attributes) {}
  OpKind kind() const { return kind_; }
  const ipu::LayerAttributes &attributes() const { return attributes_; }
  void appendOutlineAttributes(popart::OpSerialiserBase &os) const override {
    popart::Op::appendOutlineAttributes(os);
    const ipu::AttributeMap m = attributes_.toMap();
    for (const auto &kv : m.ints)
      os.appendAttribute(kv.first, kv.second);
    for (const auto &kv : m.floats)
      os.appendAttribute(kv.first, kv.second);
  }
  // A whole time loop, as costly as PopART's convolutions, which take the same
  // value: a high value makes PopART's outliner MORE likely to put the op into a
  // subgraph that identical calls share (op.hpp: getSubgraphValue), which saves the
  // code of a whole layer per repeat. Only identical ops share one: the outline
  // attributes above include every attribute (first_tile too), and shapes must match.
  float getSubgraphValue() const override { return getHighSubgraphValue(); }

protected:
  OpKind kind_;
  ipu::LayerAttributes attributes_;
};

class SnnLayerGradOp : public SnnLayerOpBase {
public:
  explicit SnnLayerGradOp(const SnnLayerOpBase &fwd)
      : SnnLayerOpBase(gradId(fwd.kind()), fwd.getSettings(), fwd.kind(), fwd.attributes()) {
    const ops::OpSignature &s = ipu::signature(kind_);
    for (int i = 0; i < s.numInputs; ++i)
      fwdInInfo_.push_back(fwd.inInfo(i));
    for (int i = 0; i < s.numGradInputs; ++i) {
      const ops::GradInput &g = s.gradInputs[i];
      const popart::GradOpInType type = g.source == ops::GradSource::GradOut
                                            ? popart::GradOpInType::GradOut
                                        : g.source == ops::GradSource::In
                                            ? popart::GradOpInType::In
                                            : popart::GradOpInType::Out;
      gradInputInfo_.push_back({i, g.index, type});
      if (ops::gradInputIsOptional(g))
        optionalInputs_.insert(i);
    }
    // in_values gets a gradient only where something upstream differentiates it
    // (input_needs_grad); PopART's autodiff then counts this op out of its edges.
    const std::vector<int> given = ipu::gradOutputInputs(kind_, attributes_);
    for (std::size_t i = 0; i < given.size(); ++i)
      gradOutToNonGradIn_[int(i)] = given[i];
  }
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnLayerGradOp>(*this);
  }
  // Every gradient has the dtype and shape of its forward input.
  void setup() override {
    for (const auto &kv : gradOutToNonGradIn_)
      outInfo(kv.first) = fwdInInfo_.at(std::size_t(kv.second));
  }
  const std::vector<popart::GradInOutMapper> &gradInputInfo() const override {
    return gradInputInfo_;
  }
  const std::map<int, int> &gradOutToNonGradIn() const override { return gradOutToNonGradIn_; }
  // The gradients of outputs off the loss path: PopART connects nothing there.
  std::set<popart::InIndex> optionalInputs() const override { return optionalInputs_; }

private:
  std::vector<TensorInfo> fwdInInfo_;
  std::vector<popart::GradInOutMapper> gradInputInfo_;
  std::map<int, int> gradOutToNonGradIn_;
  std::set<popart::InIndex> optionalInputs_;
};

class SnnLayerOp : public SnnLayerOpBase {
public:
  using SnnLayerOpBase::SnnLayerOpBase;
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnLayerOp>(*this);
  }
  void setup() override {
    const ops::OpSignature &s = ipu::signature(kind_);
    const auto shapes = ipu::outputShapes(kind_, attributes_, shapeOf(inInfo(0)),
                                          shapeOf(inInfo(ops::spiking::kWeight)));
    for (int i = 0; i < s.numOutputs; ++i)
      outInfo(i) = TensorInfo(dataType(s.outputs[i].type),
                              popart::Shape(shapes[i].begin(), shapes[i].end()));
  }
  std::vector<std::unique_ptr<popart::Op>> getGradOps() override {
    std::vector<std::unique_ptr<popart::Op>> gradOps;
    gradOps.push_back(std::make_unique<SnnLayerGradOp>(*this));
    return gradOps;
  }
};
static_assert(int(ops::spiking::kWeight) == int(ops::readout::kWeight), "weight index");

// ---------------------------------------------------------------- Opx

class SnnOpxBase : public popart::popx::Opx {
public:
  SnnOpxBase(popart::Op *op, popart::popx::Devicex *devicex) : popart::popx::Opx(op, devicex) {
    // Once per op, as PopTorch's own custom ops do (FastGatherLastDim.cpp).
    ipu::addSnnCodelets(graph(), codeletsPath());
  }
};

class SnnLayerOpx : public SnnOpxBase {
public:
  SnnLayerOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnLayerOp>(op, {forwardId(OpKind::Spiking), forwardId(OpKind::Readout)});
  }
  // PopART lays out an input with the first consumer that can create it: the op
  // creates its weights as its tiles read them (LayerOps.hpp: createsInput).
  popart::popx::InputCreatorType getInputCreatorType(popart::InIndex index) const override {
    const auto &op = getOp<SnnLayerOp>();
    return ipu::createsInput(op.kind(), op.attributes(), index)
               ? popart::popx::InputCreatorType::CanCreate
               : popart::popx::Opx::getInputCreatorType(index);
  }
  // As PopART's own Opxs (MatMulOpx): Opx::createInputTensor calls createInput.
  poplar::Tensor createInput(popart::InIndex index,
                             const poplar::DebugNameAndId &dnai) const override {
    const auto &op = getOp<SnnLayerOp>();
    std::vector<ipu::TensorSpec> specs;
    for (int i = 0; i < ipu::signature(op.kind()).numInputs; ++i)
      specs.push_back({poplarType(op.inInfo(i).dataType()), shapeOf(op.inInfo(i))});
    return ipu::createInput(graph(), op.kind(), op.attributes(), index, specs, {dnai, "create"});
  }
  // The layout follows from the op's attributes and input shapes alone.
  std::set<popart::TensorId> mustExistBeforeCreate(popart::InIndex) const override { return {}; }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnLayerOp>();
    std::vector<poplar::Tensor> inputs;
    for (int i = 0; i < ipu::signature(op.kind()).numInputs; ++i)
      inputs.push_back(getInTensor(i));
    const auto outputs = ipu::growForward(graph(), prog, op.kind(), op.attributes(), inputs,
                                          debugContext(ipu::signature(op.kind()).name));
    for (std::size_t i = 0; i < outputs.size(); ++i)
      setOutTensor(int(i), outputs[i]);
  }
};

class SnnLayerGradOpx : public SnnOpxBase {
public:
  SnnLayerGradOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnLayerGradOp>(op, {gradId(OpKind::Spiking), gradId(OpKind::Readout)});
  }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnLayerGradOp>();
    const ops::OpSignature &s = ipu::signature(op.kind());
    std::vector<poplar::Tensor> inputs;
    for (int i = 0; i < s.numGradInputs; ++i) // an absent GradOut: no gradient reached it
      inputs.push_back(hasInput(i) ? getInTensor(i) : poplar::Tensor());
    std::vector<ipu::TensorSpec> outputs;
    for (int i = 0; i < int(op.gradOutToNonGradIn().size()); ++i)
      outputs.push_back({poplarType(op.outInfo(i).dataType()), shapeOf(op.outInfo(i))});
    const auto grads = ipu::growBackward(graph(), prog, op.kind(), op.attributes(), inputs,
                                         outputs, debugContext(s.gradName));
    for (std::size_t i = 0; i < grads.size(); ++i)
      setOutTensor(int(i), grads[i]);
  }
};

// ---------------------------------------------------------------- registration

namespace {

popart::OpDefinition::DataTypes typesOf(ops::DType t) {
  switch (t) {
  case ops::DType::Int32:
    return {DataType::INT32};
  case ops::DType::Float:
    return {DataType::FLOAT};
  default:
    return {DataType::FLOAT16, DataType::FLOAT};
  }
}

popart::OpDefinition definition(OpKind kind) {
  const ops::OpSignature &s = ipu::signature(kind);
  popart::OpDefinition::Inputs inputs;
  for (int i = 0; i < s.numInputs; ++i)
    inputs.push_back({s.inputs[i].name, typesOf(s.inputs[i].type)});
  popart::OpDefinition::Outputs outputs;
  for (int i = 0; i < s.numOutputs; ++i)
    outputs.push_back({s.outputs[i].name, typesOf(s.outputs[i].type)});
  popart::OpDefinition::Attributes attributes;
  // Attribute has no default constructor (opmanager.hpp): insert, not operator[].
  for (const ops::Attribute &attr : ops::kAttributes)
    attributes.emplace(attr.name, popart::OpDefinition::Attribute("*"));
  return popart::OpDefinition(inputs, outputs, attributes);
}

std::unique_ptr<popart::Op> create(OpKind kind, const popart::OpCreatorInfo &info) {
  return std::make_unique<SnnLayerOp>(info.opid, info.settings, kind,
                                      ipu::LayerAttributes::parse(attributeMap(info.attributes)));
}

popart::OpCreator<SnnLayerOp> spikingCreator(
    popart::OpDefinitions({{forwardId(OpKind::Spiking), definition(OpKind::Spiking)}}),
    [](const popart::OpCreatorInfo &info) { return create(OpKind::Spiking, info); }, true);
popart::OpCreator<SnnLayerOp> readoutCreator(
    popart::OpDefinitions({{forwardId(OpKind::Readout), definition(OpKind::Readout)}}),
    [](const popart::OpCreatorInfo &info) { return create(OpKind::Readout, info); }, true);

popart::popx::OpxCreator<SnnLayerOpx> spikingOpx(forwardId(OpKind::Spiking));
popart::popx::OpxCreator<SnnLayerOpx> readoutOpx(forwardId(OpKind::Readout));
popart::popx::OpxCreator<SnnLayerGradOpx> spikingGradOpx(gradId(OpKind::Spiking));
popart::popx::OpxCreator<SnnLayerGradOpx> readoutGradOpx(gradId(OpKind::Readout));

} // namespace

} // namespace popart_ops
} // namespace snn
