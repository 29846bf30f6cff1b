// What the executor needs to know about one layer call: its codes
// (Codes.hpp), the neuron parameters and non-owning views of the caller's
// arrays (validated by the bindings before any kernel runs).
#pragma once
#include <cstddef>
#include <cstdint>

#include "Codes.hpp"

namespace snn {


struct NeuronSpec {
  unsigned model; // Model
  unsigned reset;
  unsigned surrogateKind;
  float surrogateP0;
  float surrogateP1;
  float gradWindow;
  const float *beta;      // [out]
  const float *threshold; // [out]; unused by the readout
  const float *alpha;     // [out]; synaptic only
  const float *bias;      // [out] or null
};

// Whether values[0, n) all hold the same bits as values[0] (false for null): a
// parameter given as one number and filled per neuron, which the vertices can
// then take as one value with the same results.
inline bool sameEverywhere(const float *values, unsigned n) {
  for (unsigned i = 1; values && i < n; ++i)
    if (__builtin_memcmp(values + i, values, sizeof(float)) != 0)
      return false;
  return values != nullptr;
}

// ids[T, B, capacity] with counts[T, B, 2] = {spikes, listed}; or, where
// rowStart is set, compact: every row's listed entries one after another,
// row r's at ids[rowStart[r] .. rowStart[r + 1]) (the backward pass's private
// copies, O(entries) where [T, B, capacity] is O(T B K)). capacity is the
// list's K either way, the last dimension of the arrays that go with it.
struct SpikeListView {
  const int32_t *ids;
  const int32_t *counts;
  unsigned capacity;
  const std::size_t *rowStart = nullptr; // [T x B + 1], compact lists only

  const int32_t *idsAt(std::size_t row) const {
    return rowStart ? ids + rowStart[row] : ids + row * capacity;
  }
  unsigned spikesAt(std::size_t row) const { return unsigned(counts[2 * row]); }
  unsigned listedAt(std::size_t row) const { return unsigned(counts[2 * row + 1]); }
};

struct Shape {
  unsigned steps;
  unsigned batch;
  unsigned inFeatures;
  unsigned outFeatures;
};

} // namespace snn
