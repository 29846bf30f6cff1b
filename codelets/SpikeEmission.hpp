// Emission of a tile's spike list and eligible-only list for one sample and
// step, straight from the updated membrane: ascending ids, spikes strictly
// above threshold, eligible-only strictly above threshold - gradWindow.
// Groups of 8 neurons with nothing to list are skipped after one vectorisable
// test (the common case at low activity with a finite window). Within a
// group, writes are branch-free: every neuron is written at the current end
// of both lists, which only advance when it belongs there, so each list
// needs capacity for all numNeurons entries.
#pragma once
#include "VectorOps.hpp"

namespace snn {

struct EmittedCounts {
  unsigned spikes;
  unsigned eligible;
};

inline EmittedCounts emitSpikeLists(const float *__restrict membrane,
                                    const float *__restrict threshold,
                                    float *__restrict spiked, unsigned numNeurons,
                                    unsigned firstNeuron, float gradWindow,
                                    int *__restrict spikeIds,
                                    float *__restrict spikeMembrane,
                                    int *__restrict eligibleIds,
                                    float *__restrict eligibleMembrane) {
  // Spikes are listed even with a negative window.
  const float margin = gradWindow > 0.0f ? gradWindow : 0.0f;
  unsigned ns = 0, ne = 0;
  auto emit = [&](unsigned n) {
    const float u = membrane[n];
    const bool s = u > threshold[n];
    const bool e = u > threshold[n] - gradWindow;
    spikeIds[ns] = int(firstNeuron + n);
    spikeMembrane[ns] = u;
    ns += s;
    eligibleIds[ne] = int(firstNeuron + n);
    eligibleMembrane[ne] = u;
    ne += e & !s;
    spiked[n] = s ? 1.0f : 0.0f;
  };
  unsigned n = 0;
  for (; n + 8 <= numNeurons; n += 8) {
    if (anyGreater(load8(membrane + n), load8(threshold + n) - margin)) {
      for (unsigned j = 0; j < 8; ++j)
        emit(n + j);
    } else {
      store8(spiked + n, f32x8{});
    }
  }
  for (; n < numNeurons; ++n)
    emit(n);
  return {ns, ne};
}

} // namespace snn
