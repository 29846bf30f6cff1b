// _C.check_spike_list, _C.spike_counts, _C.spike_counts_grad, _C.compact_list
// (and its core, which the forward pass uses for its own output list).
#pragma once
#include <cstdint>

#include <pybind11/pybind11.h>

#include "NumpyArgs.hpp"

namespace snn {

// A list's listed ids, compact (row after row), and its spike total.
struct CompactIds {
  IntArray ids;
  std::int64_t spikes;
};
CompactIds compactIds(const IntArray &ids, const IntArray &counts, unsigned numIds,
                      unsigned numThreads);

void registerSpikeListBindings(pybind11::module_ &m);
} // namespace snn
