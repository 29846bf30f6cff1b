// _C.layer_forward / _C.layer_backward and the classes of their calls.
#pragma once
#include <pybind11/pybind11.h>

namespace snn {
void registerLayerBindings(pybind11::module_ &m);
} // namespace snn
