// The custom ops' graph code, free of PopART: attributes parsed from a plain
// map, the output shapes, and the forward and grad programs of SnnSpikingLayer
// and SnnReadoutLayer as functions of a poplar::Graph, a Sequence and the op's
// input tensors in the order of OpSignatures.hpp. CustomOps.cpp is a thin
// PopART adapter over it; a host implementation of the Poplar graph API can run
// it (and LayerGraph.cpp) as they are.
#pragma once

#include <poplar/DebugContext.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/Tensor.hpp>
#include <poplar/Type.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "LayerGraph.hpp"
#include "OpSignatures.hpp"
#include "plan/Planner.hpp"

namespace snn {
namespace ipu {

// An op's attributes as PopART (or any other caller) holds them: ints and floats.
struct AttributeMap {
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, float> floats;
  // From plain numbers (Python's ints and floats), sorted by ops::kAttributes'
  // kinds; an int attribute must be a whole number.
  static AttributeMap fromNumbers(const std::map<std::string, double> &numbers);
};

enum class OpKind { Spiking, Readout };

const ops::OpSignature &signature(OpKind kind);

// The attributes of ops::kAttributes, checked; absent ones take their defaults.
struct LayerAttributes {
  std::int64_t model = 0, reset = 0, surrogateKind = 0, capacity = 1, hasBias = 1;
  std::int64_t recurrent = 0, keepDenseState = 0, neuronsPerTile = 8, firstTile = 0,
                                 sampleGroups = 1, inputNeedsGrad = 1;
  float surrogateP0 = 2.0f, surrogateP1 = 0.0f, gradWindow = -1.0f, activity = 0.05f;

  // Throws std::invalid_argument naming the attribute that is unknown, of the
  // wrong kind or out of range.
  static LayerAttributes parse(const AttributeMap &map);
  AttributeMap toMap() const;
  NeuronConfig neuronConfig() const;
};

using Shape = std::vector<std::size_t>;

// The plan that snn_ipu.planning reports for this layer, rebuilt from the
// shapes of the input list ([T, B, Kin]) and the weight ([N, in]).
plan::LayerPlan layerPlan(const LayerAttributes &a, const Shape &inIds, const Shape &weight,
                          bool halfWeights);

// What the forward op outputs, in OpSignatures order (element types: the table's).
std::vector<Shape> outputShapes(OpKind kind, const LayerAttributes &a, const Shape &inIds,
                                const Shape &weight);

// The element type and shape of a tensor the grad op must produce.
struct TensorSpec {
  poplar::Type type;
  Shape shape;
};

// The forward inputs the grad op gives a gradient, in the order of its outputs
// (PopART's gradOutToNonGradIn): the signature's gradOutputs, less in_values
// where the attribute input_needs_grad is 0 (nothing upstream differentiates it).
std::vector<int> gradOutputInputs(OpKind kind, const LayerAttributes &a);

// The grad op's outputs: per grad output, the spec of the forward input it is
// the gradient of (`forwardInputs` in the order of the signature's inputs).
std::vector<TensorSpec> gradOutputSpecs(OpKind kind, const LayerAttributes &a,
                                        const std::vector<TensorSpec> &forwardInputs);

// The forward op's inputs that it lays out itself when PopART asks (an Opx's
// getInputCreatorType / createInput): the weight, and a recurrent spiking layer's
// rec_weight, laid out as the layer's tiles read them (LayerGraph::createWeight), so
// that the per-call copy into each tile's transposed blocks stays on the tile.
bool createsInput(OpKind kind, const LayerAttributes &a, int index);
// That input, from the specs of all the op's inputs (signature order): element
// type and shape are those of inputs[index]. Throws for an input it does not create.
poplar::Tensor createInput(poplar::Graph &graph, OpKind kind, const LayerAttributes &a, int index,
                           const std::vector<TensorSpec> &inputs, const poplar::DebugContext &dc);

// The pieces of growForward / growBackward, for a network of layers grown as
// one program (NetworkOps.hpp): a forward op's layer graph and inputs, checked
// (`listShape`: its input list's [T, B, K]; a layer whose list comes from the
// layer before may leave its list inputs invalid), and the op's outputs in
// signature order from the layer's; a grad op's layer graph and inputs
// (gradInputs in grad-input order), and its outputs.
struct ForwardOp {
  LayerGraph layer;
  ForwardInputs inputs;
};
ForwardOp forwardOp(poplar::Graph &graph, OpKind kind, const LayerAttributes &a,
                    const std::vector<poplar::Tensor> &inputs, const Shape &listShape,
                    const poplar::DebugNameAndId &dnai);
std::vector<poplar::Tensor> forwardOpOutputs(poplar::Graph &graph, poplar::program::Sequence &prog,
                                             OpKind kind, const LayerAttributes &a,
                                             const ForwardOutputs &fo, const Shape &listShape,
                                             const Shape &weightShape,
                                             const poplar::DebugNameAndId &dnai);
struct BackwardOp {
  LayerGraph layer;
  BackwardInputs inputs;
};
BackwardOp backwardOp(poplar::Graph &graph, poplar::program::Sequence &prog, OpKind kind,
                      const LayerAttributes &a, const std::vector<poplar::Tensor> &gradInputs,
                      const poplar::DebugNameAndId &dnai);
std::vector<poplar::Tensor> backwardOpOutputs(poplar::Graph &graph,
                                              poplar::program::Sequence &prog, OpKind kind,
                                              const LayerAttributes &a,
                                              const BackwardOutputs &bo,
                                              const std::vector<TensorSpec> &outputs,
                                              const poplar::DebugNameAndId &dnai);

// The forward op: `inputs` in the order of the signature's inputs; returns its
// outputs in order. Neuron parameters may be FLOAT or HALF (LayerGraph keeps
// them, and all state, in float32).
std::vector<poplar::Tensor> growForward(poplar::Graph &graph, poplar::program::Sequence &prog,
                                        OpKind kind, const LayerAttributes &a,
                                        const std::vector<poplar::Tensor> &inputs,
                                        const poplar::DebugContext &dc);

// The grad op: `gradInputs` in the order of the signature's grad inputs (the
// GradOut entry may be an invalid Tensor where no gradient reaches that
// output: it is taken as zero); `outputs` gives, per grad output, the dtype
// and shape of the forward input it is the gradient of. Returns one tensor per
// grad output: every forward input gets a gradient (zeros for the integer list
// inputs and for the stand-ins of absent bias, recurrent weight and alpha),
// accumulated in float32 and cast to that input's dtype.
std::vector<poplar::Tensor> growBackward(poplar::Graph &graph, poplar::program::Sequence &prog,
                                         OpKind kind, const LayerAttributes &a,
                                         const std::vector<poplar::Tensor> &gradInputs,
                                         const std::vector<TensorSpec> &outputs,
                                         const poplar::DebugContext &dc);

} // namespace ipu
} // namespace snn
