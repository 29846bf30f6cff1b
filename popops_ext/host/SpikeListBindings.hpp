// _C.check_spike_list, _C.spike_counts, _C.spike_counts_grad.
#pragma once
#include <pybind11/pybind11.h>

namespace snn {
void registerSpikeListBindings(pybind11::module_ &m);
} // namespace snn
