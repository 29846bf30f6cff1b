#include "NumpyArgs.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace snn {

namespace {
// Whether two ascending runs have an element in common: each element of the
// shorter run is looked up in the longer one (few spikes against a long
// eligible run is the common case), which avoids a branchy merge.
bool sharesAnId(const int32_t *a, const int32_t *aEnd, const int32_t *b, const int32_t *bEnd) {
  if (aEnd - a > bEnd - b) {
    std::swap(a, b);
    std::swap(aEnd, bEnd);
  }
  if (a == aEnd || b == bEnd || *(aEnd - 1) < *b || *(bEnd - 1) < *a)
    return false;
  // Branch-free search (conditional moves): base ends at the last element
  // <= x, or at the first one.
  bool hit = false;
  const std::size_t n = std::size_t(bEnd - b);
  for (; a != aEnd; ++a) {
    const int32_t x = *a;
    const int32_t *base = b;
    for (std::size_t len = n; len > 1;) {
      const std::size_t half = len / 2;
      base = base[half] <= x ? base + half : base;
      len -= half;
    }
    hit |= *base == x;
  }
  return hit;
}

std::string describe(const py::array &a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d)
    s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}
} // namespace

WeightArg toWeight(const py::array &a, const char *name) {
  WeightArg w;
  const py::dtype dt = a.dtype();
  if (dt.kind() == 'f' && dt.itemsize() == 2) {
    w.isHalf = true;
    w.array = py::module_::import("numpy").attr("ascontiguousarray")(a);
  } else if (dt.kind() == 'f' && dt.itemsize() == 4) {
    w.array = FloatArray::ensure(a);
  } else {
    throw std::invalid_argument(std::string(name) + " must be float32 or float16");
  }
  return w;
}

void requireShape(const py::array &a, std::initializer_list<py::ssize_t> shape,
                  const char *name) {
  bool ok = a.ndim() == py::ssize_t(shape.size());
  py::ssize_t d = 0;
  for (auto it = shape.begin(); ok && it != shape.end(); ++it, ++d)
    ok = a.shape(d) == *it;
  if (!ok)
    throw std::invalid_argument(std::string(name) + " has shape " + describe(a));
}

bool optionalShape(const py::array &a, std::initializer_list<py::ssize_t> shape,
                   const char *name) {
  if (a.size() == 0)
    return false;
  requireShape(a, shape, name);
  return true;
}

void requireCode(int value, int count, const char *name) {
  if (value < 0 || value >= count)
    throw std::invalid_argument(std::string("unknown ") + name + " code " +
                                std::to_string(value));
}

std::int64_t checkSpikeList(const IntArray &ids, const IntArray &counts, unsigned steps,
                            unsigned batch, unsigned numIds, bool sorted, const char *name,
                            bool scanEntries, std::vector<std::size_t> *rowStart,
                            unsigned capacity) {
  const bool compact = rowStart && ids.ndim() == 1;
  if (!compact && (ids.ndim() != 3 || ids.shape(0) != steps || ids.shape(1) != batch))
    throw std::invalid_argument(std::string(name) + " ids have shape " + describe(ids));
  requireShape(counts, {steps, batch, 2}, name);
  const std::size_t K = compact ? capacity : std::size_t(ids.shape(2));
  const std::size_t rows = std::size_t(steps) * batch;
  const int32_t *id = ids.data(), *c = counts.data();
  auto at = [&](std::size_t row) {
    return " at t=" + std::to_string(row / batch) + ", b=" + std::to_string(row % batch);
  };
  auto checkCounts = [&](std::size_t row) {
    const int32_t spikes = c[2 * row], listed = c[2 * row + 1];
    if (countsOutside(spikes, listed, K))
      throw std::invalid_argument(std::string(name) + " counts (" + std::to_string(spikes) +
                                  ", " + std::to_string(listed) + ")" + at(row) +
                                  " are inconsistent or exceed capacity " + std::to_string(K));
  };
  if (rowStart)
    rowStart->clear();
  if (compact) { // the rows' starts, whether the entries are scanned or not
    rowStart->resize(rows + 1);
    std::size_t start = 0;
    std::size_t *starts = rowStart->data();
    // Branch-free over the rows (every backward call runs it over two lists); the
    // slow loop only names the fault.
    bool bad = false;
    for (std::size_t row = 0; row < rows; ++row) {
      const int32_t listed = c[2 * row + 1];
      bad |= countsOutside(c[2 * row], listed, K);
      starts[row] = start;
      start += std::size_t(listed);
    }
    for (std::size_t row = 0; bad && row < rows; ++row)
      checkCounts(row);
    (*rowStart)[rows] = start;
    if (start != std::size_t(ids.size()))
      throw std::invalid_argument(std::string(name) + " lists " + std::to_string(start) +
                                  " entries in its counts but has " +
                                  std::to_string(ids.size()) + " ids");
  }
  if (!scanEntries)
    return 0;
  std::int64_t total = 0;
  for (std::size_t row = 0; row < rows; ++row) {
    checkCounts(row);
    const int32_t spikes = c[2 * row], listed = c[2 * row + 1];
    total += spikes;
    const int32_t *r = compact ? id + (*rowStart)[row] : id + row * K;
    // Branch-free scan first (vectorised); the slow loop only names the fault.
    unsigned bad = 0;
    for (int32_t k = 0; k < listed; ++k)
      bad |= unsigned(unsigned(r[k]) >= numIds);
    if (sorted) {
      for (int32_t k = 1; k < spikes; ++k)
        bad |= unsigned(r[k] <= r[k - 1]);
      for (int32_t k = spikes + 1; k < listed; ++k)
        bad |= unsigned(r[k] <= r[k - 1]);
    }
    for (int32_t k = 0; bad && k < listed; ++k) {
      if (r[k] < 0 || unsigned(r[k]) >= numIds)
        throw std::invalid_argument(std::string(name) + " id " + std::to_string(r[k]) + at(row) +
                                    ", k=" + std::to_string(k) + " out of range [0, " +
                                    std::to_string(numIds) + ")");
      if (sorted && k != 0 && k != spikes && r[k] <= r[k - 1])
        throw std::invalid_argument(std::string(name) +
                                    " ids must ascend within spikes and within eligible" +
                                    at(row));
    }
    if (sorted && sharesAnId(r, r + spikes, r + spikes, r + listed))
      throw std::invalid_argument(std::string(name) + " lists a neuron twice" + at(row));
  }
  return total;
}

} // namespace snn
