// PopART custom ops (SDK only): SnnSpikingLayer / SnnReadoutLayer and their
// grad ops in the "ai.snn_ipu" domain, version 1. PopTorch reaches them with
// poptorch.custom_op(..., "SnnSpikingLayer", "ai.snn_ipu", 1, ...) once
// libsnn_ipu_popart.so is loaded (its static creators register the ops).
//
// Inputs and outputs mirror the emulator's layer_forward / layer_backward;
// the extra float input `in_values` ([T, B, Kin], 1 at input spikes) is what
// makes the input list differentiable in PopART's autodiff: its gradient is
// dL/d(input values), which the upstream layer's grad op consumes.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <popart/op.hpp>
#include <popart/opmanager.hpp>
#include <popart/opserialiser.hpp>
#include <popart/popx/opx.hpp>
#include <popart/popx/opxmanager.hpp>
#include <popops/Cast.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>

#include "LayerGraph.hpp"
#include "plan/Planner.hpp"

namespace snn {
namespace popart_ops {

using popart::DataType;
using popart::GradInOutMapper;
using popart::GradOpInType;
using popart::TensorInfo;

const popart::OperatorIdentifier kSpiking{"ai.snn_ipu", "SnnSpikingLayer", 1, {9, 9}, 8};
const popart::OperatorIdentifier kSpikingGrad{"ai.snn_ipu", "SnnSpikingLayerGrad", 1, {14, 14}, 7};
const popart::OperatorIdentifier kReadout{"ai.snn_ipu", "SnnReadoutLayer", 1, {6, 6}, 1};
const popart::OperatorIdentifier kReadoutGrad{"ai.snn_ipu", "SnnReadoutLayerGrad", 1, {6, 6}, 4};

// Input indices of the forward ops.
namespace in {
constexpr int kIds = 0, kCounts = 1, kValues = 2, kWeight = 3, kBias = 4;
constexpr int kRecWeight = 5, kBeta = 6, kThreshold = 7, kAlpha = 8; // spiking
constexpr int kReadoutBeta = 5;                                      // readout
} // namespace in
// Output indices of SnnSpikingLayer.
namespace out {
constexpr int kValues = 0, kIds = 1, kCounts = 2, kMembrane = 3, kNeeded = 4, kDenseU = 5,
              kDenseSyn = 6, kSpikeBits = 7;
}

// The op's attributes; names match snn_ipu/backends/ipu.py.
struct LayerAttributes {
  int64_t model = 0, reset = 0, surrogateKind = 0, capacity = 1, hasBias = 1, recurrent = 0;
  int64_t keepDenseState = 0, neuronsPerTile = 8, firstTile = 0;
  float surrogateP0 = 2.0f, surrogateP1 = 0.0f, gradWindow = -1.0f, activity = 0.05f;

  static LayerAttributes from(const popart::Attributes &a) {
    LayerAttributes r;
    using Int = popart::Attributes::Int;
    using Float = popart::Attributes::Float;
    r.model = a.getAttribute<Int>("model", r.model);
    r.reset = a.getAttribute<Int>("reset", r.reset);
    r.surrogateKind = a.getAttribute<Int>("surrogate_kind", r.surrogateKind);
    r.capacity = a.getAttribute<Int>("capacity", r.capacity);
    r.hasBias = a.getAttribute<Int>("has_bias", r.hasBias);
    r.recurrent = a.getAttribute<Int>("recurrent", r.recurrent);
    r.keepDenseState = a.getAttribute<Int>("keep_dense_state", r.keepDenseState);
    r.neuronsPerTile = a.getAttribute<Int>("neurons_per_tile", r.neuronsPerTile);
    r.firstTile = a.getAttribute<Int>("first_tile", r.firstTile);
    r.surrogateP0 = a.getAttribute<Float>("surrogate_p0", r.surrogateP0);
    r.surrogateP1 = a.getAttribute<Float>("surrogate_p1", r.surrogateP1);
    r.gradWindow = a.getAttribute<Float>("grad_window", r.gradWindow);
    r.activity = a.getAttribute<Float>("activity", r.activity);
    return r;
  }

  void append(popart::OpSerialiserBase &os) const {
    os.appendAttribute("model", model);
    os.appendAttribute("reset", reset);
    os.appendAttribute("surrogate_kind", surrogateKind);
    os.appendAttribute("capacity", capacity);
    os.appendAttribute("has_bias", hasBias);
    os.appendAttribute("recurrent", recurrent);
    os.appendAttribute("keep_dense_state", keepDenseState);
    os.appendAttribute("neurons_per_tile", neuronsPerTile);
    os.appendAttribute("first_tile", firstTile);
    os.appendAttribute("surrogate_p0", surrogateP0);
    os.appendAttribute("surrogate_p1", surrogateP1);
    os.appendAttribute("grad_window", gradWindow);
    os.appendAttribute("activity", activity);
  }

  ipu::NeuronConfig neuronConfig() const {
    ipu::NeuronConfig c;
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
    return c;
  }
};

// The same plan that snn_ipu.planning reports, rebuilt from the shapes.
plan::LayerPlan layerPlan(const LayerAttributes &a, const TensorInfo &inIds,
                          const TensorInfo &weight) {
  plan::LayerSpec s;
  s.timesteps = unsigned(inIds.dim(0));
  s.batch = unsigned(inIds.dim(1));
  s.capacityIn = unsigned(inIds.dim(2));
  s.outFeatures = unsigned(weight.dim(0));
  s.inFeatures = unsigned(weight.dim(1));
  s.recurrent = a.recurrent != 0;
  s.model = plan::NeuronModel(unsigned(a.model));
  s.capacityOut = a.model == 2 ? 0 : unsigned(a.capacity);
  s.activity = a.activity;
  s.weightBytes = weight.dataType() == DataType::FLOAT16 ? 2 : 4;
  s.denseHistory = a.keepDenseState != 0;
  return plan::planWithTileSize(s, plan::ipu2Target(), unsigned(a.neuronsPerTile));
}

// codelets.gp sits next to this library unless SNN_IPU_CODELETS says otherwise.
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
                 const LayerAttributes &attributes)
      : popart::Op(id, settings), attributes_(attributes) {}
  const LayerAttributes &attributes() const { return attributes_; }
  void appendOutlineAttributes(popart::OpSerialiserBase &os) const override {
    popart::Op::appendOutlineAttributes(os);
    attributes_.append(os);
  }
  // A whole time loop: never worth recomputing or outlining with other ops.
  float getSubgraphValue() const override { return getHighSubgraphValue(); }

protected:
  LayerAttributes attributes_;
};

class SnnSpikingLayerGradOp;
class SnnReadoutLayerGradOp;

class SnnSpikingLayerOp : public SnnLayerOpBase {
public:
  using SnnLayerOpBase::SnnLayerOpBase;
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnSpikingLayerOp>(*this);
  }
  void setup() override {
    const auto &ids = inInfo(in::kIds);
    const int64_t N = inInfo(in::kWeight).dim(0);
    // The planner (and so the graph) holds a row to at most N entries.
    const int64_t T = ids.dim(0), B = ids.dim(1), K = std::min<int64_t>(attributes_.capacity, N);
    outInfo(out::kValues) = TensorInfo(DataType::FLOAT, {T, B, K});
    outInfo(out::kIds) = TensorInfo(DataType::INT32, {T, B, K});
    outInfo(out::kCounts) = TensorInfo(DataType::INT32, {T, B, 2});
    outInfo(out::kMembrane) = TensorInfo(DataType::FLOAT, {T, B, K});
    outInfo(out::kNeeded) = TensorInfo(DataType::INT32, {T, B, 2});
    const bool dense = attributes_.keepDenseState != 0;
    outInfo(out::kDenseU) =
        TensorInfo(DataType::FLOAT, dense ? popart::Shape{T, B, N} : popart::Shape{1});
    outInfo(out::kDenseSyn) =
        TensorInfo(DataType::FLOAT,
                   dense && attributes_.model == 1 ? popart::Shape{T, B, N} : popart::Shape{1});
    const plan::LayerPlan p = layerPlan(attributes_, ids, inInfo(in::kWeight));
    outInfo(out::kSpikeBits) = TensorInfo(
        DataType::INT32, {T, B, int64_t(p.numTiles) * int64_t(ipu::spikeBitWords(p))});
  }
  std::vector<std::unique_ptr<popart::Op>> getGradOps() override;
};

class SnnSpikingLayerGradOp : public SnnLayerOpBase {
public:
  explicit SnnSpikingLayerGradOp(const SnnSpikingLayerOp &fwd)
      : SnnLayerOpBase(kSpikingGrad, fwd.getSettings(), fwd.attributes()) {
    for (int i : {in::kValues, in::kWeight, in::kBias, in::kRecWeight, in::kBeta, in::kThreshold,
                  in::kAlpha})
      fwdInInfo_[i] = fwd.inInfo(i);
  }
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnSpikingLayerGradOp>(*this);
  }
  void setup() override {
    for (const auto &kv : gradOutToNonGradIn())
      outInfo(kv.first) = fwdInInfo_.at(kv.second);
  }
  const std::vector<GradInOutMapper> &gradInputInfo() const override {
    static const std::vector<GradInOutMapper> info = {
        {0, out::kValues, GradOpInType::GradOut}, {1, in::kIds, GradOpInType::In},
        {2, in::kCounts, GradOpInType::In},       {3, in::kWeight, GradOpInType::In},
        {4, in::kRecWeight, GradOpInType::In},    {5, in::kBeta, GradOpInType::In},
        {6, in::kThreshold, GradOpInType::In},    {7, in::kAlpha, GradOpInType::In},
        {8, out::kIds, GradOpInType::Out},        {9, out::kCounts, GradOpInType::Out},
        {10, out::kMembrane, GradOpInType::Out},  {11, out::kDenseU, GradOpInType::Out},
        {12, out::kDenseSyn, GradOpInType::Out},  {13, out::kSpikeBits, GradOpInType::Out}};
    return info;
  }
  const std::map<int, int> &gradOutToNonGradIn() const override {
    static const std::map<int, int> m = {{0, in::kValues},    {1, in::kWeight}, {2, in::kBias},
                                         {3, in::kRecWeight}, {4, in::kBeta},   {5, in::kThreshold},
                                         {6, in::kAlpha}};
    return m;
  }

private:
  std::map<int, TensorInfo> fwdInInfo_;
};

std::vector<std::unique_ptr<popart::Op>> SnnSpikingLayerOp::getGradOps() {
  std::vector<std::unique_ptr<popart::Op>> ops;
  ops.push_back(std::make_unique<SnnSpikingLayerGradOp>(*this));
  return ops;
}

class SnnReadoutLayerOp : public SnnLayerOpBase {
public:
  using SnnLayerOpBase::SnnLayerOpBase;
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnReadoutLayerOp>(*this);
  }
  void setup() override {
    const auto &ids = inInfo(in::kIds);
    outInfo(0) = TensorInfo(DataType::FLOAT, {ids.dim(0), ids.dim(1), inInfo(in::kWeight).dim(0)});
  }
  std::vector<std::unique_ptr<popart::Op>> getGradOps() override;
};

class SnnReadoutLayerGradOp : public SnnLayerOpBase {
public:
  explicit SnnReadoutLayerGradOp(const SnnReadoutLayerOp &fwd)
      : SnnLayerOpBase(kReadoutGrad, fwd.getSettings(), fwd.attributes()) {
    for (int i : {in::kValues, in::kWeight, in::kBias, in::kReadoutBeta})
      fwdInInfo_[i] = fwd.inInfo(i);
  }
  std::unique_ptr<popart::Op> clone() const override {
    return std::make_unique<SnnReadoutLayerGradOp>(*this);
  }
  void setup() override {
    for (const auto &kv : gradOutToNonGradIn())
      outInfo(kv.first) = fwdInInfo_.at(kv.second);
  }
  const std::vector<GradInOutMapper> &gradInputInfo() const override {
    static const std::vector<GradInOutMapper> info = {
        {0, 0, GradOpInType::GradOut},           {1, in::kIds, GradOpInType::In},
        {2, in::kCounts, GradOpInType::In},      {3, in::kWeight, GradOpInType::In},
        {4, in::kReadoutBeta, GradOpInType::In}, {5, 0, GradOpInType::Out}};
    return info;
  }
  const std::map<int, int> &gradOutToNonGradIn() const override {
    static const std::map<int, int> m = {
        {0, in::kValues}, {1, in::kWeight}, {2, in::kBias}, {3, in::kReadoutBeta}};
    return m;
  }

private:
  std::map<int, TensorInfo> fwdInInfo_;
};

std::vector<std::unique_ptr<popart::Op>> SnnReadoutLayerOp::getGradOps() {
  std::vector<std::unique_ptr<popart::Op>> ops;
  ops.push_back(std::make_unique<SnnReadoutLayerGradOp>(*this));
  return ops;
}

// ---------------------------------------------------------------- Opx

class SnnOpxBase : public popart::popx::Opx {
public:
  SnnOpxBase(popart::Op *op, popart::popx::Devicex *devicex) : popart::popx::Opx(op, devicex) {
    ipu::addSnnCodelets(graph(), codeletsPath());
  }

protected:
  // Gradients leave in the dtype of the tensor they belong to.
  poplar::Tensor as(const poplar::Tensor &t, const TensorInfo &info,
                    poplar::program::Sequence &prog) const {
    const poplar::Type type = info.dataType() == DataType::FLOAT16 ? poplar::HALF : poplar::FLOAT;
    if (t.elementType() == type)
      return t;
    return popops::cast(graph(), t, type, prog, debugContext("cast"));
  }
  poplar::Tensor zeros(const TensorInfo &info, poplar::program::Sequence &prog,
                       const std::string &name) const {
    const poplar::Type type = info.dataType() == DataType::FLOAT16 ? poplar::HALF : poplar::FLOAT;
    std::vector<std::size_t> shape(info.shape().begin(), info.shape().end());
    poplar::Tensor t = graph().addVariable(type, shape, debugContext(name));
    poputil::mapTensorLinearly(graph(), t);
    popops::zero(graph(), t, prog, debugContext(name));
    return t;
  }
};

class SnnSpikingLayerOpx : public SnnOpxBase {
public:
  SnnSpikingLayerOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnSpikingLayerOp>(op, {kSpiking});
  }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnSpikingLayerOp>();
    const LayerAttributes &a = op.attributes();
    ipu::LayerGraph layer(graph(), layerPlan(a, op.inInfo(in::kIds), op.inInfo(in::kWeight)),
                          a.neuronConfig(), getInTensor(in::kWeight).elementType(),
                          debugContext("SnnSpikingLayer"));
    ipu::ForwardInputs fin{getInTensor(in::kIds),       getInTensor(in::kCounts),
                           getInTensor(in::kWeight),    getInTensor(in::kBias),
                           getInTensor(in::kRecWeight), getInTensor(in::kBeta),
                           getInTensor(in::kThreshold), getInTensor(in::kAlpha)};
    const ipu::ForwardOutputs fo = layer.forward(prog, fin);
    setOutTensor(out::kValues, fo.values);
    setOutTensor(out::kIds, fo.ids);
    setOutTensor(out::kCounts, fo.counts);
    setOutTensor(out::kMembrane, fo.membrane);
    setOutTensor(out::kNeeded, fo.needed);
    setOutTensor(out::kSpikeBits, fo.spikeBits);
    setOutTensor(out::kDenseU, fo.denseMembrane.valid()
                                   ? fo.denseMembrane
                                   : zeros(op.outInfo(out::kDenseU), prog, "noDenseU"));
    setOutTensor(out::kDenseSyn, fo.denseSynaptic.valid()
                                     ? fo.denseSynaptic
                                     : zeros(op.outInfo(out::kDenseSyn), prog, "noDenseSyn"));
  }
};

class SnnSpikingLayerGradOpx : public SnnOpxBase {
public:
  SnnSpikingLayerGradOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnSpikingLayerGradOp>(op, {kSpikingGrad});
  }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnSpikingLayerGradOp>();
    const LayerAttributes &a = op.attributes();
    const TensorInfo &weightInfo = op.outInfo(1);
    ipu::LayerGraph layer(graph(), layerPlan(a, op.inInfo(1), weightInfo), a.neuronConfig(),
                          getInTensor(3).elementType(), debugContext("SnnSpikingLayerGrad"));
    ipu::BackwardInputs bin;
    bin.forward.inIds = getInTensor(1);
    bin.forward.inCounts = getInTensor(2);
    bin.forward.weight = getInTensor(3);
    bin.forward.recWeight = getInTensor(4);
    bin.forward.beta = getInTensor(5);
    bin.forward.threshold = getInTensor(6);
    bin.forward.alpha = getInTensor(7);
    bin.outputs.ids = getInTensor(8);
    bin.outputs.counts = getInTensor(9);
    bin.outputs.membrane = getInTensor(10);
    bin.outputs.spikeBits = getInTensor(13);
    if (a.keepDenseState) {
      bin.outputs.denseMembrane = getInTensor(11);
      if (a.model == 1)
        bin.outputs.denseSynaptic = getInTensor(12);
    }
    bin.gradValues = getInTensor(0);
    const ipu::BackwardOutputs g = layer.backward(prog, bin);
    setOutTensor(0, g.gradInValues);
    setOutTensor(1, as(g.gradWeight, op.outInfo(1), prog));
    setOutTensor(2, g.gradBias.valid() ? g.gradBias : zeros(op.outInfo(2), prog, "noBias"));
    setOutTensor(3, g.gradRecWeight.valid() ? as(g.gradRecWeight, op.outInfo(3), prog)
                                            : zeros(op.outInfo(3), prog, "noRecWeight"));
    setOutTensor(4, g.gradBeta);
    setOutTensor(5, g.gradThreshold);
    setOutTensor(6, g.gradAlpha.valid() ? g.gradAlpha : zeros(op.outInfo(6), prog, "noAlpha"));
  }
};

class SnnReadoutLayerOpx : public SnnOpxBase {
public:
  SnnReadoutLayerOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnReadoutLayerOp>(op, {kReadout});
  }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnReadoutLayerOp>();
    const LayerAttributes &a = op.attributes();
    ipu::LayerGraph layer(graph(), layerPlan(a, op.inInfo(in::kIds), op.inInfo(in::kWeight)),
                          a.neuronConfig(), getInTensor(in::kWeight).elementType(),
                          debugContext("SnnReadoutLayer"));
    ipu::ForwardInputs fin;
    fin.inIds = getInTensor(in::kIds);
    fin.inCounts = getInTensor(in::kCounts);
    fin.weight = getInTensor(in::kWeight);
    fin.bias = getInTensor(in::kBias);
    fin.beta = getInTensor(in::kReadoutBeta);
    setOutTensor(0, layer.forward(prog, fin).denseMembrane);
  }
};

class SnnReadoutLayerGradOpx : public SnnOpxBase {
public:
  SnnReadoutLayerGradOpx(popart::Op *op, popart::popx::Devicex *devicex) : SnnOpxBase(op, devicex) {
    verifyOp<SnnReadoutLayerGradOp>(op, {kReadoutGrad});
  }
  void grow(poplar::program::Sequence &prog) const override {
    const auto &op = getOp<SnnReadoutLayerGradOp>();
    const LayerAttributes &a = op.attributes();
    ipu::LayerGraph layer(graph(), layerPlan(a, op.inInfo(1), op.outInfo(1)), a.neuronConfig(),
                          getInTensor(3).elementType(), debugContext("SnnReadoutLayerGrad"));
    ipu::BackwardInputs bin;
    bin.forward.inIds = getInTensor(1);
    bin.forward.inCounts = getInTensor(2);
    bin.forward.weight = getInTensor(3);
    bin.forward.beta = getInTensor(4);
    bin.outputs.denseMembrane = getInTensor(5);
    bin.gradValues = getInTensor(0);
    const ipu::BackwardOutputs g = layer.backward(prog, bin);
    setOutTensor(0, g.gradInValues);
    setOutTensor(1, as(g.gradWeight, op.outInfo(1), prog));
    setOutTensor(2, g.gradBias.valid() ? g.gradBias : zeros(op.outInfo(2), prog, "noBias"));
    setOutTensor(3, g.gradBeta);
  }
};

// ---------------------------------------------------------------- registration

namespace {

const popart::OpDefinition::DataTypes kFloatTypes = {DataType::FLOAT16, DataType::FLOAT};
const popart::OpDefinition::DataTypes kFloat = {DataType::FLOAT};
const popart::OpDefinition::DataTypes kInt = {DataType::INT32};

const popart::OpDefinition::Attributes kAttributes = {{"model", {"*"}},
                                                      {"reset", {"*"}},
                                                      {"surrogate_kind", {"*"}},
                                                      {"surrogate_p0", {"*"}},
                                                      {"surrogate_p1", {"*"}},
                                                      {"grad_window", {"*"}},
                                                      {"capacity", {"*"}},
                                                      {"has_bias", {"*"}},
                                                      {"recurrent", {"*"}},
                                                      {"keep_dense_state", {"*"}},
                                                      {"neurons_per_tile", {"*"}},
                                                      {"first_tile", {"*"}},
                                                      {"activity", {"*"}}};

const popart::OpDefinition kSpikingDef({popart::OpDefinition::Inputs({{"in_ids", kInt},
                                                                      {"in_counts", kInt},
                                                                      {"in_values", kFloat},
                                                                      {"weight", kFloatTypes},
                                                                      {"bias", kFloat},
                                                                      {"rec_weight", kFloatTypes},
                                                                      {"beta", kFloat},
                                                                      {"threshold", kFloat},
                                                                      {"alpha", kFloat}}),
                                        popart::OpDefinition::Outputs({{"values", kFloat},
                                                                       {"ids", kInt},
                                                                       {"counts", kInt},
                                                                       {"membrane", kFloat},
                                                                       {"needed", kInt},
                                                                       {"dense_membrane", kFloat},
                                                                       {"dense_synaptic", kFloat},
                                                                       {"spike_bits", kInt}}),
                                        popart::OpDefinition::Attributes(kAttributes)});

const popart::OpDefinition kReadoutDef({popart::OpDefinition::Inputs({{"in_ids", kInt},
                                                                      {"in_counts", kInt},
                                                                      {"in_values", kFloat},
                                                                      {"weight", kFloatTypes},
                                                                      {"bias", kFloat},
                                                                      {"beta", kFloat}}),
                                        popart::OpDefinition::Outputs({{"membrane", kFloat}}),
                                        popart::OpDefinition::Attributes(kAttributes)});

popart::OpCreator<SnnSpikingLayerOp> spikingCreator(
    popart::OpDefinitions({{kSpiking, kSpikingDef}}),
    [](const popart::OpCreatorInfo &info) -> std::unique_ptr<popart::Op> {
      return std::make_unique<SnnSpikingLayerOp>(info.opid, info.settings,
                                                 LayerAttributes::from(info.attributes));
    },
    true);

popart::OpCreator<SnnReadoutLayerOp> readoutCreator(
    popart::OpDefinitions({{kReadout, kReadoutDef}}),
    [](const popart::OpCreatorInfo &info) -> std::unique_ptr<popart::Op> {
      return std::make_unique<SnnReadoutLayerOp>(info.opid, info.settings,
                                                 LayerAttributes::from(info.attributes));
    },
    true);

popart::popx::OpxCreator<SnnSpikingLayerOpx> spikingOpx(kSpiking);
popart::popx::OpxCreator<SnnSpikingLayerGradOpx> spikingGradOpx(kSpikingGrad);
popart::popx::OpxCreator<SnnReadoutLayerOpx> readoutOpx(kReadout);
popart::popx::OpxCreator<SnnReadoutLayerGradOpx> readoutGradOpx(kReadoutGrad);

} // namespace

} // namespace popart_ops
} // namespace snn
