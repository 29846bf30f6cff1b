// One layer call as Python describes it (snn_ipu/backends/native_call.py builds
// these) and what the executor gives back: pybind11 classes with named fields
// (_C.LayerCall, _C.ForwardCall, _C.BackwardCall, _C.GradNeeds,
// _C.ForwardResult, _C.BackwardResult). An absent array is None. Every field is
// checked (LayerArgs) before any kernel runs: a bad one raises ValueError.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "Codes.hpp"
#include "LayerBackward.hpp"
#include "NumpyArgs.hpp"

namespace snn {

// The neuron model of a call and its surrogate gradient.
struct NeuronSettings {
  unsigned model = MODEL_LEAKY;
  unsigned reset = RESET_SUBTRACT;
  unsigned surrogate = SURROGATE_ATAN;
  // The surrogate's shape: ATan's alpha, (Fast)Sigmoid's slope, Triangle's width.
  float surrogateParam = 2.0f;
  float surrogateHeight = 0.0f; // Triangle's height
  // Eligible: U > threshold - gradWindow; infinite: every neuron (exact gradients).
  float gradWindow = std::numeric_limits<float>::infinity();
};

// What both passes of a call share: the neurons, the tile plan, the input list
// and the parameters ([out, in] weights float32 or float16; [out] float32
// constants), and the state before step 0.
struct LayerCall {
  NeuronSettings neuron;
  IntArray tileStarts;  // int32 [tiles + 1]: tile i owns neurons [starts[i], starts[i+1])
  unsigned sampleGroups = 1;
  unsigned numThreads = 0; // 0: the machine's
  // [T, B, Kin], [T, B, 2]; in a backward call inIds may be compact (1-D: the
  // listed entries of every row one after another), of capacity inCapacity.
  IntArray inIds, inCounts;
  unsigned inCapacity = 0;
  py::array weight;
  std::optional<FloatArray> bias;
  std::optional<py::array> recWeight;
  FloatArray beta;
  std::optional<FloatArray> threshold, alpha; // spiking; synaptic
  std::optional<FloatArray> initialMembrane, initialSynaptic; // [B, out]
};

struct ForwardCall {
  LayerCall layer;
  unsigned capacity = 0; // 0: sized to fit
  unsigned overflow = OVERFLOW_ERROR;
  bool keepDenseState = false; // return U (and syn) [T, B, out]
  bool returnState = false;    // return the state after the last step
  // false: the caller has scanned the input list (check_spike_list) already.
  bool scanInput = true;
  std::uint64_t memoryBudget = 0; // bytes for the growing buffers; 0: no limit
  // W x[t], from a GEMM: [T, B, out], or [T, B, out rounded up to 8] (aligned rows)
  std::optional<FloatArray> inputCurrents;
  std::optional<FloatArray> initialSpikes; // [B, out], 0/1
  // The sparse path also takes the backward's private copy of the input list
  // (ForwardResult::inputIds) while it repacks the list, checking its counts
  // and ids on the way (as scanInput would). Where the list's spikes are more
  // than denseAbove, nothing runs (ForwardResult::wantsDense): they are dense
  // enough for the caller's GEMM, which makes inputCurrents for another call.
  bool copyInput = false;
  double denseAbove = std::numeric_limits<double>::infinity();
};

struct BackwardCall {
  LayerCall layer;
  // Spiking: the forward's output list ([T, B, K], or compact as inIds), the
  // membrane and dL/dvalues at its entries [T, B, K]. Readout: the membrane
  // and dL/dU, dense [T, B, out].
  std::optional<IntArray> outIds, outCounts;
  FloatArray membrane, gradOut;
  std::optional<FloatArray> denseMembrane, denseSynaptic; // learned decays
  GradNeeds needs{};
  bool scanLists = true;
  // Spikes the capacity dropped (they still reset): ids per row, [T, B] counts.
  std::optional<IntArray> droppedIds, droppedCounts;
  // A carried state's spikes S[-1]: ids per sample, [1, B] counts; and how many
  // of a sample's were step 0's recurrent input (0: all).
  std::optional<IntArray> initialSpikeIds, initialSpikeCounts;
  unsigned initialRecurrentCap = 0;
};

struct ForwardResult {
  // Spiking: the list [T, B, K] with its counts, the membrane at its entries
  // and the spike values. Readout: membrane is the dense output [T, B, out].
  std::optional<IntArray> ids, counts;
  // The backward pass's private copy of that list (the user can edit the one
  // returned): its listed ids compact, its counts, and its spike total.
  std::optional<IntArray> privateIds, privateCounts;
  std::int64_t privateSpikes = 0;
  FloatArray membrane;
  std::optional<FloatArray> values;
  std::optional<IntArray> droppedIds, droppedCounts;
  std::optional<FloatArray> denseMembrane, denseSynaptic;
  std::optional<FloatArray> finalMembrane, finalSynaptic, finalSpikes;
  std::int64_t totalSpikes = 0, eligibleListed = 0;
  std::int64_t spikesDropped = 0, eligibleDropped = 0;
  unsigned neededCapacity = 0;
  // (step, sample, spikes, entries needed) of the first overflowing row.
  std::optional<py::tuple> overflowAt;
  // copyInput: the input list's private copy (listed ids compact, counts) and
  // its spike total; wantsDense: the call ran nothing (ForwardCall::denseAbove).
  std::optional<IntArray> inputIds, inputCounts;
  std::int64_t inputSpikes = 0;
  bool wantsDense = false;
  std::int64_t bucketedSteps = 0; // LayerForward::bucketedSteps
};

struct BackwardResult {
  std::optional<FloatArray> gradInValues, gradWeight, gradBias, gradRecWeight, gradBeta,
      gradThreshold, gradAlpha, gradCurrent;
  std::int64_t bucketedSteps = 0;          // LayerBackward::bucketedSteps
  std::int64_t inputGradBucketedSteps = 0; // LayerBackward::inputGradBucketedSteps
  bool inputGradWalkedOutputs = false;     // LayerBackward::inputGradWalkedOutputs
};

void registerLayerCallClasses(py::module_ &m);

} // namespace snn
