// What the forward neuron update and its gradient share, without vertices:
// a header that defines a vertex would define it in every codelet source that
// includes it, and popc links those sources into one .gp.
#pragma once

#include "Codes.hpp"

namespace snn {

// The step's input of neuron n: its current, plus the bias when there is one.
inline float input(const float *__restrict cur, const float *__restrict bias, unsigned n) {
  return bias ? cur[n] + bias[n] : cur[n];
}
} // namespace snn
