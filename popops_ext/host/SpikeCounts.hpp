// SparseSpikes.spike_counts on the CPU and its gradient. Only the listed
// entries of the [T, B, K] list are read: torch's scatter over the whole list
// also reads every padding entry, and at low activity the list is mostly
// padding (an output layer of 20 neurons at 1%: 0.3 listed entries of 19 per
// row, and the scatter and its backward took ~2 ms of a 13 ms training step).
#pragma once
#include <cstddef>

#include "LayerViews.hpp"

namespace snn {

// Calls f(b, at, id) for every listed entry of every (t, b) row, t first:
// at = the entry's index in the [T, B, K] list, id = its neuron.
// Samples [firstSample, lastSample) only: a sample's entries touch its own row of
// the [B x numNeurons] array alone, so threads that share the samples out write
// disjoint rows, each entry added in the same order as on one thread.
template <typename F>
void forEachListed(const SpikeListView &list, unsigned steps, unsigned batch,
                   unsigned firstSample, unsigned lastSample, F &&f) {
  for (std::size_t t = 0; t < steps; ++t)
    for (unsigned b = firstSample; b < lastSample; ++b) {
      const std::size_t row = t * batch + b, at = row * list.capacity;
      const int32_t *ids = list.idsAt(row);
      for (unsigned k = 0, n = list.listedAt(row); k < n; ++k)
        f(b, at + k, ids[k]);
    }
}

// out[b][n] = the sum over t, and over k < listed(t, b) with ids[t][b][k] = n,
// of values[t][b][k]; out is [batch x numNeurons], its rows of the samples
// taken zeroed by the caller.
// Summed in the order of t, then k, as torch's scatter_add over [B, T*K].
template <typename V>
void sumListedByNeuron(const SpikeListView &list, const V *values, unsigned steps,
                       unsigned batch, unsigned firstSample, unsigned lastSample,
                       unsigned numNeurons, V *out) {
  forEachListed(list, steps, batch, firstSample, lastSample,
                [&](unsigned b, std::size_t at, int32_t id) {
    out[std::size_t(b) * numNeurons + id] += values[at];
  });
}

// The gradient of sumListedByNeuron: gradValues[t][b][k] = grad[b][ids[t][b][k]]
// for k < listed(t, b); gradValues is [steps x batch x capacity], its padding
// (k >= listed, no gradient) zeroed by the caller.
template <typename V>
void gatherListedByNeuron(const SpikeListView &list, const V *grad, unsigned steps,
                          unsigned batch, unsigned firstSample, unsigned lastSample,
                          unsigned numNeurons, V *gradValues) {
  forEachListed(list, steps, batch, firstSample, lastSample,
                [&](unsigned b, std::size_t at, int32_t id) {
    gradValues[at] = grad[std::size_t(b) * numNeurons + id];
  });
}

} // namespace snn
