// The snn_ipu._C module: what each part registers, and the codes (Codes.hpp)
// from which snn_ipu/_codes.py takes the names Python uses.
#include <pybind11/pybind11.h>

#include "Codes.hpp"
#include "KernelBindings.hpp"
#include "LayerBindings.hpp"
#include "MallocTuning.hpp"
#include "MemoryBudget.hpp"
#include "SpikeListBindings.hpp"
#include "ThreadPool.hpp"
#include "ValueBindings.hpp"
#include "plan/PlanBindings.hpp"

namespace py = pybind11;

namespace {

template <unsigned N> py::dict names(const char *const (&list)[N]) {
  py::dict d;
  for (unsigned code = 0; code < N; ++code)
    d[list[code]] = code;
  return d;
}

py::dict codes() {
  using snn::CodeNames;
  py::dict d;
  d["models"] = names(CodeNames::models);
  d["resets"] = names(CodeNames::resets);
  d["surrogates"] = names(CodeNames::surrogates);
  d["overflow_policies"] = names(CodeNames::overflowPolicies);
  d["value_ranges"] = names(CodeNames::valueRanges);
  return d;
}

} // namespace

// setup.py builds this module once per instruction-set level, each under its own
// name (snn_ipu/_native.py picks one at import).
#ifndef SNN_IPU_MODULE_NAME
#define SNN_IPU_MODULE_NAME _C
#endif

PYBIND11_MODULE(SNN_IPU_MODULE_NAME, m) {
  m.doc() = "snn_ipu host executor: the IPU codelets run on CPU threads";
  snn::tuneMalloc();
  m.attr("codes") = codes();
  py::register_exception<snn::MemoryBudgetExceeded>(m, "MemoryBudgetExceeded",
                                                    PyExc_MemoryError);
  snn::registerLayerBindings(m);
  snn::registerSpikeListBindings(m);
  snn::registerKernelBindings(m);
  snn::registerValueBindings(m);
  m.def("hardware_threads", &snn::hardwareThreads);
  snn::registerPlanBindings(m);
}
