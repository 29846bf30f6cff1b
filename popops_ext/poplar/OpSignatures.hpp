// The custom ops' signatures as plain data, free of PopART and Poplar: each
// op's inputs and outputs (names, element types), its grad op's inputs (the
// gradient of a forward output, or a forward input or output, by index) and
// outputs (the gradient of which forward input), and the attributes both take.
// CustomOps.cpp builds PopART's OpDefinitions, gradInputInfo and
// gradOutToNonGradIn from these tables; LayerOps.cpp reads its tensors by the
// same indices; tests/test_op_signatures.py checks PopART's autodiff rules on
// them; snn_ipu/backends/ipu.py passes its tensors in this order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snn {
namespace ops {

enum class DType : unsigned {
  Int32,
  Float,      // FLOAT only
  FloatOrHalf // FLOAT or FLOAT16: the tensor's own dtype is kept (weights, parameters)
};

struct Port {
  const char *name;
  DType type;
};

// What feeds a grad op's input (PopART's GradOpInType).
enum class GradSource : unsigned { GradOut, In, Out };

struct GradInput {
  GradSource source;
  int index; // of the forward op's output (GradOut, Out) or input (In)
};

// Which grad inputs PopART may leave unconnected, so the grad op must list them in
// Op::optionalInputs(): the gradient of a forward output that is not on the loss
// path (PopART 3.4 transforms/autodiff/gradgrowerop.cpp connects an empty TensorId
// for it, and Graph::connectInputs throws unless the index is optional). Forward
// inputs and outputs (In, Out) are always there. LayerOps.cpp takes an absent one as zeros.
constexpr bool gradInputIsOptional(const GradInput &g) { return g.source == GradSource::GradOut; }

enum class AttributeKind : unsigned { Int, Float };

struct Attribute {
  const char *name;
  AttributeKind kind;
  double defaultValue;
};

struct OpSignature {
  const char *name;
  const char *gradName;
  const Port *inputs;
  int numInputs;
  const Port *outputs;
  int numOutputs;
  const GradInput *gradInputs;
  int numGradInputs;
  // gradOutputs[i]: the forward input whose gradient is the grad op's output i.
  const int *gradOutputs;
  int numGradOutputs;
};

constexpr const char *kDomain = "ai.snn_ipu";
constexpr int kDomainVersion = 1;

// Attributes of both ops (ints and floats only, as poptorch.custom_op takes).
// grad_window < 0 stands for an infinite window (every neuron eligible).
inline constexpr Attribute kAttributes[] = {
    {"model", AttributeKind::Int, 0},           // snn::Model (codelets/Codes.hpp)
    {"reset", AttributeKind::Int, 0},           // snn::ResetKind
    {"surrogate_kind", AttributeKind::Int, 0},  // codelets/SurrogateDerivative.hpp
    {"surrogate_p0", AttributeKind::Float, 2.0},
    {"surrogate_p1", AttributeKind::Float, 0.0},
    {"grad_window", AttributeKind::Float, -1.0},
    {"capacity", AttributeKind::Int, 1},        // K of the output lists (spiking ops)
    {"has_bias", AttributeKind::Int, 1},
    {"recurrent", AttributeKind::Int, 0},
    {"keep_dense_state", AttributeKind::Int, 0}, // dense U (, syn) over T: learned decays
    {"neurons_per_tile", AttributeKind::Int, 8},
    {"first_tile", AttributeKind::Int, 0},
    {"sample_groups", AttributeKind::Int, 1},   // the batch split over groups of tiles
    // 0: nothing differentiates the input list's values (the network's data): the grad
    // op gives in_values no gradient and builds no input gradient (gradOutputInputs)
    {"input_needs_grad", AttributeKind::Int, 1},
    {"activity", AttributeKind::Float, 0.05},
};
constexpr int kNumAttributes = int(sizeof(kAttributes) / sizeof(kAttributes[0]));

// ---------------------------------------------------------------- SnnSpikingLayer
namespace spiking {
enum Input : int {
  kInIds,     // [T, B, Kin] the input list
  kInCounts,  // [T, B, 2]
  kInValues,  // [T, B, Kin] 1 at input spikes: carries dL/dS to the layer before
  kWeight,    // [N, in]
  kBias,      // [N] (a zero stand-in without bias)
  kRecWeight, // [N, N] (a [1, 1] stand-in unless recurrent)
  kBeta,      // [N]
  kThreshold, // [N]
  kAlpha,     // [N] (a [1] stand-in unless synaptic)
  kNumInputs
};
enum Output : int {
  kValues,        // [T, B, K] 1 at spikes, 0 at eligible-only entries
  kIds,           // [T, B, K]
  kCounts,        // [T, B, 2] spikes listed, entries listed
  kMembrane,      // [T, B, K] U at the listed entries
  kNeeded,        // [T, B, 2] spikes and entries before the capacity cut, as floats
                  // (exact below 2^24): a float output can be kept on the loss path
                  // (snn_ipu/backends/ipu.py), an integer one cannot (PopART's Cast
                  // has no gradient for integer sources)
  kDenseMembrane, // [T, B, N] with keep_dense_state, else [1]
  kDenseSynaptic, // [T, B, N] synaptic with keep_dense_state, else [1]
  kSpikeBits,     // [T, B, tiles x words]: every spike, dropped or not (LayerGraph.hpp)
  kNumOutputs
};

inline constexpr Port kInputs[] = {
    {"in_ids", DType::Int32},         {"in_counts", DType::Int32},
    {"in_values", DType::FloatOrHalf}, {"weight", DType::FloatOrHalf},
    {"bias", DType::FloatOrHalf},      {"rec_weight", DType::FloatOrHalf},
    {"beta", DType::FloatOrHalf},      {"threshold", DType::FloatOrHalf},
    {"alpha", DType::FloatOrHalf}};
inline constexpr Port kOutputs[] = {
    {"values", DType::Float},         {"ids", DType::Int32},  {"counts", DType::Int32},
    {"membrane", DType::Float},       {"needed", DType::Float},
    {"dense_membrane", DType::Float}, {"dense_synaptic", DType::Float},
    {"spike_bits", DType::Float}};

// The grad op's inputs, in this order.
enum GradInputIndex : int {
  kGradValues, kGradInIds, kGradInCounts, kGradWeight, kGradRecWeight, kGradBeta,
  kGradThreshold, kGradAlpha, kGradIds, kGradCounts, kGradMembrane, kGradDenseMembrane,
  kGradDenseSynaptic, kGradSpikeBits, kNumGradInputs
};
inline constexpr GradInput kGradInputs[] = {
    {GradSource::GradOut, kValues},     {GradSource::In, kInIds},
    {GradSource::In, kInCounts},        {GradSource::In, kWeight},
    {GradSource::In, kRecWeight},       {GradSource::In, kBeta},
    {GradSource::In, kThreshold},       {GradSource::In, kAlpha},
    {GradSource::Out, kIds},            {GradSource::Out, kCounts},
    {GradSource::Out, kMembrane},       {GradSource::Out, kDenseMembrane},
    {GradSource::Out, kDenseSynaptic},  {GradSource::Out, kSpikeBits}};
// Output i of the grad op: the gradient of forward input i, for every input.
inline constexpr int kGradOutputs[] = {kInIds,     kInCounts, kInValues,    kWeight, kBias,
                                       kRecWeight, kBeta,     kThreshold, kAlpha};
} // namespace spiking

inline constexpr OpSignature kSpikingLayer = {
    "SnnSpikingLayer",     "SnnSpikingLayerGrad",
    spiking::kInputs,      int(sizeof(spiking::kInputs) / sizeof(Port)),
    spiking::kOutputs,     int(sizeof(spiking::kOutputs) / sizeof(Port)),
    spiking::kGradInputs,  int(sizeof(spiking::kGradInputs) / sizeof(GradInput)),
    spiking::kGradOutputs, int(sizeof(spiking::kGradOutputs) / sizeof(int))};

// ---------------------------------------------------------------- SnnReadoutLayer
namespace readout {
enum Input : int { kInIds, kInCounts, kInValues, kWeight, kBias, kBeta, kNumInputs };
enum Output : int { kMembrane, kNumOutputs }; // [T, B, N]

inline constexpr Port kInputs[] = {
    {"in_ids", DType::Int32},         {"in_counts", DType::Int32},
    {"in_values", DType::FloatOrHalf}, {"weight", DType::FloatOrHalf},
    {"bias", DType::FloatOrHalf},      {"beta", DType::FloatOrHalf}};
inline constexpr Port kOutputs[] = {{"membrane", DType::Float}};

enum GradInputIndex : int {
  kGradMembrane, kGradInIds, kGradInCounts, kGradWeight, kGradBeta, kGradOutMembrane,
  kNumGradInputs
};
inline constexpr GradInput kGradInputs[] = {
    {GradSource::GradOut, kMembrane}, {GradSource::In, kInIds},  {GradSource::In, kInCounts},
    {GradSource::In, kWeight},        {GradSource::In, kBeta},   {GradSource::Out, kMembrane}};
inline constexpr int kGradOutputs[] = {kInIds, kInCounts, kInValues, kWeight, kBias, kBeta};
} // namespace readout

inline constexpr OpSignature kReadoutLayer = {
    "SnnReadoutLayer",     "SnnReadoutLayerGrad",
    readout::kInputs,      int(sizeof(readout::kInputs) / sizeof(Port)),
    readout::kOutputs,     int(sizeof(readout::kOutputs) / sizeof(Port)),
    readout::kGradInputs,  int(sizeof(readout::kGradInputs) / sizeof(GradInput)),
    readout::kGradOutputs, int(sizeof(readout::kGradOutputs) / sizeof(int))};

inline constexpr const OpSignature *kAllOps[] = {&kSpikingLayer, &kReadoutLayer};

// ---------------------------------------------------------------- consistency
// The index names above and the tables agree (the tables are what PopART sees).
namespace detail {
constexpr bool same(const char *a, const char *b) {
  return *a == *b && (*a == '\0' || same(a + 1, b + 1));
}
} // namespace detail
static_assert(spiking::kNumInputs == kSpikingLayer.numInputs, "spiking inputs");
static_assert(spiking::kNumOutputs == kSpikingLayer.numOutputs, "spiking outputs");
static_assert(spiking::kNumGradInputs == kSpikingLayer.numGradInputs, "spiking grad inputs");
static_assert(detail::same(spiking::kInputs[spiking::kWeight].name, "weight"), "index names");
static_assert(detail::same(spiking::kInputs[spiking::kAlpha].name, "alpha"), "index names");
static_assert(detail::same(spiking::kOutputs[spiking::kNeeded].name, "needed"), "index names");
static_assert(detail::same(spiking::kOutputs[spiking::kDenseSynaptic].name, "dense_synaptic"),
              "index names");
static_assert(readout::kNumInputs == kReadoutLayer.numInputs, "readout inputs");
static_assert(readout::kNumOutputs == kReadoutLayer.numOutputs, "readout outputs");
static_assert(readout::kNumGradInputs == kReadoutLayer.numGradInputs, "readout grad inputs");
static_assert(detail::same(readout::kInputs[readout::kBeta].name, "beta"), "index names");

} // namespace ops
} // namespace snn
