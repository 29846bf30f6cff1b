// _C.spike_matmul.
#pragma once
#include <pybind11/pybind11.h>

namespace snn {
void registerKernelBindings(pybind11::module_ &m);
} // namespace snn
