#pragma once
#include <pybind11/pybind11.h>

namespace snn {
// Adds plan_layer (and friends) to the snn_ipu._C module. Defined in PlanBindings.cpp.
void registerPlanBindings(pybind11::module_ &m);
} // namespace snn
