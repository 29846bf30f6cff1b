// _C.first_out_of_range: the value checks a layer runs on its parameters and
// neuron constants on every call (finite weights, decays in [0, 1], finite
// thresholds above 0), all of them in one native call. Per tensor, torch
// needed a reduction, its conversion to a Python float and a comparison: a
// dozen dispatched ops per layer call, which cost more than the passes over
// small weights.
#include "ValueBindings.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "Codes.hpp"
#include "ThreadPool.hpp"

namespace snn {

namespace py = pybind11;

namespace {

// The bit layout of an IEEE format: sign bit, all-ones exponent (NaN or inf at
// and above it, in magnitude bits), and 1.0.
template <typename Bits> struct Format {
  Bits sign, exponent, one;
};

// Whether any of n IEEE values of this format lies outside `range`. Integer
// compares on the raw bits (magnitude = bits without the sign): no
// floating-point exceptions, NaN fails every range (its magnitude is above
// inf's), and the OR over the whole array vectorizes.
//   FINITE:   magnitude < exponent
//   UNIT:     [0, 1]: -0, or sign clear and magnitude <= 1.0's bits
//   POSITIVE: finite and > 0: sign clear, 0 < magnitude < exponent
template <ValueRange R, typename Bits>
bool anyOutside(const void *data, std::size_t n, const Format<Bits> &f) {
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  const Bits magnitudeMask = Bits(~f.sign);
  unsigned bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, bytes + i * sizeof(Bits), sizeof(Bits));
    const Bits magnitude = Bits(v & magnitudeMask);
    const bool negative = (v & f.sign) != 0;
    if constexpr (R == RANGE_FINITE)
      bad |= unsigned(magnitude >= f.exponent);
    else if constexpr (R == RANGE_UNIT)
      bad |= unsigned(magnitude != 0 && (negative || magnitude > f.one));
    else
      bad |= unsigned(negative || magnitude == 0 || magnitude >= f.exponent);
  }
  return bad != 0;
}

template <typename Bits>
bool anyOutside(const void *data, std::size_t n, const Format<Bits> &f, ValueRange range) {
  switch (range) {
  case RANGE_FINITE:
    return anyOutside<RANGE_FINITE>(data, n, f);
  case RANGE_UNIT:
    return anyOutside<RANGE_UNIT>(data, n, f);
  default:
    return anyOutside<RANGE_POSITIVE>(data, n, f);
  }
}

// Arrays from this many bytes are checked by several threads, without the GIL:
// a pass over a large layer's weights (~1 ms for 22 MB) otherwise runs on one
// core while the others wait for the layer call.
constexpr std::size_t kParallelCheckBytes = std::size_t(1) << 20;

template <typename Bits>
bool anyOutsideOnThreads(const void *data, std::size_t n, const Format<Bits> &f,
                         ValueRange range, unsigned numThreads) {
  if (numThreads <= 1 || n * sizeof(Bits) < kParallelCheckBytes)
    return anyOutside(data, n, f, range);
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  std::atomic<bool> bad{false};
  py::gil_scoped_release release;
  ThreadPool::instance().run(numThreads, [&](unsigned thread, unsigned team) {
    const std::size_t lo = n * thread / team, hi = n * (thread + 1) / team;
    if (anyOutside(bytes + lo * sizeof(Bits), hi - lo, f, range))
      bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
}

bool outside(py::array a, ValueRange range, unsigned numThreads) {
  if (!(a.flags() & py::array::c_style)) // a strided view of a tensor: read a copy
    a = py::module_::import("numpy").attr("ascontiguousarray")(a);
  const std::size_t n = std::size_t(a.size());
  switch (a.dtype().char_()) {
  case 'f':
    return anyOutsideOnThreads<std::uint32_t>(
        a.data(), n, {0x80000000u, 0x7f800000u, 0x3f800000u}, range, numThreads);
  case 'd':
    return anyOutsideOnThreads<std::uint64_t>(
        a.data(), n,
        {0x8000000000000000ull, 0x7ff0000000000000ull, 0x3ff0000000000000ull}, range,
        numThreads);
  case 'e':
    return anyOutsideOnThreads<std::uint16_t>(
        a.data(), n, {std::uint16_t(0x8000u), std::uint16_t(0x7c00u), std::uint16_t(0x3c00u)},
        range, numThreads);
  default:
    throw std::invalid_argument(std::string("first_out_of_range takes float16, float32 or "
                                            "float64 arrays, got dtype '") +
                                a.dtype().char_() + "'");
  }
}

long firstOutOfRange(const std::vector<py::array> &arrays, const std::vector<int> &ranges,
                     unsigned numThreads) {
  if (ranges.size() != arrays.size())
    throw std::invalid_argument("first_out_of_range needs one range per array, got " +
                                std::to_string(ranges.size()) + " for " +
                                std::to_string(arrays.size()));
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (ranges[i] < 0 || unsigned(ranges[i]) >= kNumValueRanges)
      throw std::invalid_argument("unknown range code " + std::to_string(ranges[i]));
    if (outside(arrays[i], ValueRange(ranges[i]), numThreads))
      return long(i);
  }
  return -1;
}

} // namespace

void registerValueBindings(py::module_ &m) {
  m.def("first_out_of_range", &firstOutOfRange, py::arg("arrays"), py::arg("ranges"),
        py::arg("num_threads") = 1,
        "The index of the first of `arrays` (float16, float32 or float64) with a value "
        "outside its range (codes['value_ranges']: finite, [0, 1], finite and > 0; NaN "
        "is outside every range), or -1. Arrays of 1 MB and more are read by up to "
        "`num_threads` threads.");
}

} // namespace snn
