// _C.first_nonfinite.
#pragma once
#include <pybind11/pybind11.h>

namespace snn {
void registerValueBindings(pybind11::module_ &m);
} // namespace snn
