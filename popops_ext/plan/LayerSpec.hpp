// What the planner is asked to place: one layer and the training run's shape.
#pragma once

#include "plan/PerformanceEstimation.hpp"

namespace snn {
namespace plan {

struct LayerSpec {
  unsigned inFeatures = 0;
  unsigned outFeatures = 0;
  unsigned batch = 1;
  unsigned timesteps = 1;
  bool recurrent = false;
  NeuronModel model = NeuronModel::Leaky;
  // Spike-list capacities K (0: planned as kAutoCapacityFactor x expected).
  unsigned capacityIn = 0;
  unsigned capacityOut = 0;
  // Expected fraction of neurons spiking per step; drives cycles, not bytes.
  double activity = 0.05;
  // 4 (float) or 2 (half) for weights and their gradients.
  unsigned weightBytes = 4;
  // Keep dense U (and syn) over T: needed only to learn beta / alpha.
  bool denseHistory = false;
  // The input list is the network's input, laid out by PopART (linearly over
  // the tiles, poputil::mapTensorLinearly), not by the op before (step by step).
  bool linearInput = false;
  // Something upstream needs dL/d(input values): false for a layer fed with data
  // (PyTorch never asks for its gradient), which then builds and costs no input
  // gradient, no reduction of its partials and no exchange of them.
  bool inputNeedsGrad = true;
};

// Eligible-only entries expected per spike (neurons just below threshold).
constexpr double kEligiblePerSpike = 1.0;
// An automatic capacity is planned with 2x headroom over the expected listed
// entries: K = min(features, max(1, ceil(2 * (1 + kEligiblePerSpike) * activity * features))).
constexpr double kAutoCapacityFactor = 2.0;

} // namespace plan
} // namespace snn
