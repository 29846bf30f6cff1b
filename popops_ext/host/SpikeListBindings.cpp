// _C.check_spike_list, _C.spike_counts and its gradient: the [T, B, K] lists
// read by native code, each scanned first (listed ids in range, counts
// consistent), so a list edited through .data raises instead of reading or
// writing out of bounds.
#include "SpikeListBindings.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "NumpyArgs.hpp"
#include "SpikeCounts.hpp"

namespace snn {

namespace {

template <typename V> using Array = py::array_t<V, py::array::c_style | py::array::forcecast>;

// A whole [T, B, K] list scanned as the executor scans its input (its steps
// and samples taken from ids); returns its spike total.
std::int64_t checkWholeList(const IntArray &ids, const IntArray &counts, unsigned numIds,
                            const char *name) {
  if (ids.ndim() != 3)
    throw std::invalid_argument("ids must be [T, B, K], got " + std::to_string(ids.ndim()) +
                                " dimensions");
  return checkSpikeList(ids, counts, unsigned(ids.shape(0)), unsigned(ids.shape(1)), numIds,
                        false, name);
}

SpikeListView checkedCountList(const IntArray &ids, const IntArray &counts, int numNeurons) {
  if (numNeurons < 1)
    throw std::invalid_argument("num_neurons must be >= 1, got " + std::to_string(numNeurons));
  checkWholeList(ids, counts, unsigned(numNeurons), "spike list");
  return listView(ids, counts);
}

template <typename V>
py::array spikeCountsAs(const IntArray &ids, const IntArray &counts, const py::array &values,
                        int numNeurons) {
  const SpikeListView list = checkedCountList(ids, counts, numNeurons);
  const Array<V> v = Array<V>::ensure(values);
  requireShape(v, {ids.shape(0), ids.shape(1), ids.shape(2)}, "values");
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1));
  Array<V> out({py::ssize_t(B), py::ssize_t(numNeurons)});
  std::fill(out.mutable_data(), out.mutable_data() + out.size(), V(0));
  sumListedByNeuron(list, v.data(), T, B, unsigned(numNeurons), out.mutable_data());
  return std::move(out);
}

template <typename V>
py::array spikeCountsGradAs(const IntArray &ids, const IntArray &counts, const py::array &grad) {
  const Array<V> g = Array<V>::ensure(grad);
  if (g.ndim() != 2)
    throw std::invalid_argument("grad must be [B, num_neurons]");
  const SpikeListView list = checkedCountList(ids, counts, int(g.shape(1)));
  requireShape(g, {ids.shape(1), g.shape(1)}, "grad");
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1));
  Array<V> out({ids.shape(0), ids.shape(1), ids.shape(2)});
  std::fill(out.mutable_data(), out.mutable_data() + out.size(), V(0));
  gatherListedByNeuron(list, g.data(), T, B, unsigned(g.shape(1)), out.mutable_data());
  return std::move(out);
}

// The listed entries of a [T, B, K] list, every row's one after another (the
// compact form of SpikeListView): O(entries), where a copy of the list is
// O(T B K). The ids are copied as they are (the caller scans them, or made
// them); the counts are checked, since they say what is read.
// A row holds a handful of entries: a library memmove call per row cost more
// than the copying (and took the cache misses of the rows, spread K apart, one
// at a time); the loop, with the rows ahead prefetched, streams. The attribute
// keeps GCC from turning the loop back into that call.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
IntArray compactList(const IntArray &ids, const IntArray &counts) {
  if (ids.ndim() != 3)
    throw std::invalid_argument("ids must be [T, B, K], got " + std::to_string(ids.ndim()) +
                                " dimensions");
  requireShape(counts, {ids.shape(0), ids.shape(1), 2}, "counts");
  const std::size_t rows = std::size_t(ids.shape(0)) * std::size_t(ids.shape(1));
  const std::size_t K = std::size_t(ids.shape(2));
  const int32_t *c = counts.data(), *id = ids.data();
  std::size_t total = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    const int32_t spikes = c[2 * row], listed = c[2 * row + 1];
    if (spikes < 0 || spikes > listed || std::size_t(listed) > K)
      throw std::invalid_argument("counts (" + std::to_string(spikes) + ", " +
                                  std::to_string(listed) + ") of row " + std::to_string(row) +
                                  " are inconsistent or exceed capacity " + std::to_string(K));
    total += std::size_t(listed);
  }
  IntArray out({py::ssize_t(total)});
  int32_t *dst = out.mutable_data();
  constexpr std::size_t kAhead = 8;
  for (std::size_t row = 0; row < rows; ++row) {
    if (row + kAhead < rows && c[2 * (row + kAhead) + 1] > 0)
      __builtin_prefetch(id + (row + kAhead) * K);
    const std::size_t n = std::size_t(c[2 * row + 1]);
    const int32_t *src = id + row * K;
    for (std::size_t k = 0; k < n; ++k)
      dst[k] = src[k];
    dst += n;
  }
  return out;
}

// float32 or float64, as `like`.
template <typename F> auto byDtype(const py::array &like, const char *name, F &&f) {
  if (py::isinstance<py::array_t<float>>(like))
    return f(float{});
  if (py::isinstance<py::array_t<double>>(like))
    return f(double{});
  throw std::invalid_argument(std::string(name) + " must be float32 or float64");
}

} // namespace

void registerSpikeListBindings(py::module_ &m) {
  m.def(
      "check_spike_list",
      [](const IntArray &ids, const IntArray &counts, unsigned numIds) {
        return checkWholeList(ids, counts, numIds, "input list");
      },
      py::arg("ids"), py::arg("counts"), py::arg("num_ids"),
      "Checks a list's counts and listed ids as the executor does; returns its spike total.");
  m.def("compact_list", &compactList, py::arg("ids"), py::arg("counts"),
        "The listed entries of a [T, B, K] list, row after row (int32 [entries]).");
  m.def(
      "spike_counts",
      [](const IntArray &ids, const IntArray &counts, const py::array &values, int numNeurons) {
        return byDtype(values, "values", [&](auto v) {
          return spikeCountsAs<decltype(v)>(ids, counts, values, numNeurons);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("values"), py::arg("num_neurons"));
  m.def(
      "spike_counts_grad",
      [](const IntArray &ids, const IntArray &counts, const py::array &grad) {
        return byDtype(grad, "grad", [&](auto v) {
          return spikeCountsGradAs<decltype(v)>(ids, counts, grad);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("grad"));
}

} // namespace snn
