// _C.first_out_of_range.
#pragma once
#include <pybind11/pybind11.h>

namespace snn {
void registerValueBindings(pybind11::module_ &m);
} // namespace snn
