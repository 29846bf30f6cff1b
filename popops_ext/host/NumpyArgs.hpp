// Conversion and validation of the numpy arguments of the _C functions.
// Everything the kernels index with is checked here, before any kernel
// runs: std::invalid_argument becomes ValueError in Python.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "LayerViews.hpp"

namespace snn {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// A weight matrix as given: float32 or float16, made C-contiguous.
struct WeightArg {
  py::array array;
  bool isHalf = false;
  const void *data() const { return array.data(); }
  std::size_t rows() const { return array.ndim() == 2 ? std::size_t(array.shape(0)) : 0; }
  std::size_t cols() const { return array.ndim() == 2 ? std::size_t(array.shape(1)) : 0; }
};

WeightArg toWeight(const py::array &a, const char *name);

// Throws std::invalid_argument unless `a` has exactly this shape.
void requireShape(const py::array &a, std::initializer_list<py::ssize_t> shape,
                  const char *name);
// Size 0 (absent) or exactly this shape; returns whether present.
bool optionalShape(const py::array &a, std::initializer_list<py::ssize_t> shape,
                   const char *name);
void requireCode(int value, int count, const char *name);

// Whether a row's counts break 0 <= spikes <= listed <= K; branch-free, so that
// a pass over many rows can OR it up and name the row only when it is set (a
// negative listed is above K as a std::size_t).
inline bool countsOutside(std::int32_t spikes, std::int32_t listed, std::size_t K) {
  return bool(unsigned(spikes < 0) | unsigned(spikes > listed) |
              unsigned(std::size_t(listed) > K));
}

// counts[T,B,2] with 0 <= spikes <= listed <= K and every listed id in
// [0, numIds); with `sorted`, also ascending within the spike part and
// within the eligible part, and no id in both (the executor relies on it to
// find each tile's runs, at most one entry per neuron). Returns the number
// of spikes listed. scanEntries false checks the shapes alone, for lists the
// caller has scanned (and returns 0).
// With rowStart given, ids may also be compact (1-D: every row's listed
// entries one after another, SpikeListView), of capacity K = `capacity`:
// the counts are then checked against K and against the number of ids, and
// rowStart is filled with the rows' starts [T x B + 1] (left empty for a
// [T, B, K] list).
std::int64_t checkSpikeList(const IntArray &ids, const IntArray &counts, unsigned steps,
                            unsigned batch, unsigned numIds, bool sorted, const char *name,
                            bool scanEntries = true, std::vector<std::size_t> *rowStart = nullptr,
                            unsigned capacity = 0);

inline SpikeListView listView(const IntArray &ids, const IntArray &counts) {
  return {ids.data(), counts.data(), unsigned(ids.shape(2))};
}

// A list checked by checkSpikeList: compact where rowStart is not empty.
inline SpikeListView listView(const IntArray &ids, const IntArray &counts,
                              const std::vector<std::size_t> &rowStart, unsigned capacity) {
  if (rowStart.empty())
    return listView(ids, counts);
  return {ids.data(), counts.data(), capacity, rowStart.data()};
}

} // namespace snn
