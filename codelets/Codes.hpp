// The integer codes of the neuron models, resets, surrogate gradients,
// overflow policies and the value ranges a layer checks: their only
// definition. The vertices, the host executor, the graph builders and the
// planner include this header; the extension exports it to Python
// (snn_ipu._C.codes), where snn_ipu/_codes.py names them.
#pragma once

namespace snn {

enum Model : unsigned { MODEL_LEAKY = 0, MODEL_SYNAPTIC = 1, MODEL_READOUT = 2 };
constexpr unsigned kNumModels = 3;

enum ResetKind : unsigned { RESET_SUBTRACT = 0, RESET_ZERO = 1, RESET_NONE = 2 };
constexpr unsigned kNumResets = 3;

enum SurrogateKind : unsigned {
  SURROGATE_ATAN = 0,
  SURROGATE_FAST_SIGMOID = 1,
  SURROGATE_SIGMOID = 2,
  SURROGATE_TRIANGLE = 3,
  SURROGATE_STRAIGHT_THROUGH = 4,
};
constexpr unsigned kNumSurrogates = 5;

// What a spike list does with more entries than its capacity.
enum OverflowPolicy : unsigned { OVERFLOW_ERROR = 0, OVERFLOW_DROP = 1, OVERFLOW_GROW = 2 };
constexpr unsigned kNumOverflowPolicies = 3;

// The range a layer's values must lie in (_C.first_out_of_range); NaN lies
// outside every one.
enum ValueRange : unsigned {
  RANGE_FINITE = 0,   // weights: not inf
  RANGE_UNIT = 1,     // decays: [0, 1]
  RANGE_POSITIVE = 2, // thresholds: finite and > 0
};
constexpr unsigned kNumValueRanges = 3;

// The names Python uses, in code order.
struct CodeNames {
  static constexpr const char *models[kNumModels] = {"leaky", "synaptic", "readout"};
  static constexpr const char *resets[kNumResets] = {"subtract", "zero", "none"};
  static constexpr const char *surrogates[kNumSurrogates] = {
      "atan", "fast_sigmoid", "sigmoid", "triangle", "straight_through"};
  static constexpr const char *overflowPolicies[kNumOverflowPolicies] = {"error", "drop",
                                                                         "grow"};
  static constexpr const char *valueRanges[kNumValueRanges] = {"finite", "unit", "positive"};
};

} // namespace snn
