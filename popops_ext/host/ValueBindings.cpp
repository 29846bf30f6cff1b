// _C.first_nonfinite: the finiteness check a layer runs on its parameters on
// every call, all of them in one native call. Per tensor, torch needed a sum,
// its conversion to a Python float and an isfinite: a dozen dispatched ops per
// layer call, which cost more than the passes over small weights.
#include "ValueBindings.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

namespace snn {

namespace py = pybind11;

namespace {

// Whether any of n IEEE values of this width (bits) has an all-ones exponent
// (NaN or inf). Integer compares on the raw bits: no floating-point exceptions,
// and the OR over the whole array vectorizes.
template <typename Bits> bool anyNonFinite(const void *data, std::size_t n, Bits exponent) {
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  unsigned bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, bytes + i * sizeof(Bits), sizeof(Bits));
    bad |= unsigned((v & exponent) == exponent);
  }
  return bad != 0;
}

bool nonFinite(py::array a) {
  if (!(a.flags() & py::array::c_style)) // a strided view of a tensor: read a copy
    a = py::module_::import("numpy").attr("ascontiguousarray")(a);
  const std::size_t n = std::size_t(a.size());
  switch (a.dtype().char_()) {
  case 'f':
    return anyNonFinite<std::uint32_t>(a.data(), n, 0x7f800000u);
  case 'd':
    return anyNonFinite<std::uint64_t>(a.data(), n, 0x7ff0000000000000ull);
  case 'e':
    return anyNonFinite<std::uint16_t>(a.data(), n, std::uint16_t(0x7c00u));
  default:
    throw std::invalid_argument(std::string("first_nonfinite takes float16, float32 or "
                                            "float64 arrays, got dtype '") +
                                a.dtype().char_() + "'");
  }
}

long firstNonFinite(const std::vector<py::array> &arrays) {
  for (std::size_t i = 0; i < arrays.size(); ++i)
    if (nonFinite(arrays[i]))
      return long(i);
  return -1;
}

} // namespace

void registerValueBindings(py::module_ &m) {
  m.def("first_nonfinite", &firstNonFinite, py::arg("arrays"),
        "The index of the first of `arrays` (float16, float32 or float64) holding a NaN "
        "or inf, or -1.");
}

} // namespace snn
