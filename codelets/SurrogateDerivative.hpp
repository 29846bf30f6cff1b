// dS/dU of the surrogate spike functions, selected by their kind (Codes.hpp)
// and evaluated at x = U - threshold. Header-only so that popc and g++ share it.
#pragma once
#include <cmath>

#include "Codes.hpp"

namespace snn {

inline float surrogateDerivative(unsigned kind, float p0, float p1, float x) {
  switch (kind) {
  case SURROGATE_ATAN: {
    const float z = 1.5707963267948966f * p0 * x;
    return 0.5f * p0 / (1.0f + z * z);
  }
  case SURROGATE_FAST_SIGMOID: {
    const float d = p0 * std::fabs(x) + 1.0f;
    return 1.0f / (d * d);
  }
  case SURROGATE_SIGMOID: {
    // exp of a non-positive argument only: no overflow for large |x|.
    const float e = std::exp(-p0 * std::fabs(x));
    const float d = 1.0f + e;
    return p0 * e / (d * d);
  }
  case SURROGATE_TRIANGLE: {
    const float r = 1.0f - std::fabs(x) / p0;
    return r > 0.0f ? p1 * r : 0.0f;
  }
  default:
    return 1.0f;
  }
}

} // namespace snn
