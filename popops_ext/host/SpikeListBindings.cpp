// _C.check_spike_list, compact_list, gather_listed, _C.spike_counts and its
// gradient: the lists read by native code, each scanned first (listed ids in
// range, counts consistent), so a list edited through .data raises instead of
// reading or writing out of bounds. _C.dense_list_counts and dense_list_ids:
// the lists of dense spike tensors (SparseSpikes.from_dense).
#include "SpikeListBindings.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <pybind11/stl.h>

#include "CompactList.hpp"
#include "NumpyArgs.hpp"
#include "SpikeCounts.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"

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

// Threads for a pass of `work` units, at least `perThread` units each: small
// passes stay on the calling thread, where waking a worker costs more than
// its share.
unsigned threadsFor(std::size_t work, std::size_t perThread, unsigned numThreads) {
  return unsigned(
      std::max<std::size_t>(1, std::min<std::size_t>(numThreads, work / perThread)));
}

// Threads for a pass over a list's rows (a handful of entries each).
unsigned rowThreads(std::size_t rows, unsigned numThreads) {
  return threadsFor(rows, 1024, numThreads);
}

// Threads for spike_counts and its gradient: each thread takes a share of the
// samples (the rows of the [B, N] counts it alone writes), and one only where
// the list holds enough entries to pay for waking another.
unsigned sampleThreads(const SpikeListView &list, std::size_t rows, unsigned batch,
                       unsigned numThreads) {
  std::size_t listed = 0;
  for (std::size_t row = 0; row < rows; ++row)
    listed += list.listedAt(row);
  return std::min(batch, threadsFor(listed, 16384, numThreads));
}

// Whether a row of a [T, B, K] list breaks checkSpikeList's rules (counts, ids
// in [0, numIds)): branch-free, so that the threads' passes scan their rows
// on the way; checkWholeList then names the first fault.
inline bool rowOutside(const SpikeListView &list, std::size_t row, unsigned numIds) {
  const int32_t spikes = list.counts[2 * row], listed = list.counts[2 * row + 1];
  if (countsOutside(spikes, listed, list.capacity))
    return true;
  const int32_t *r = list.idsAt(row);
  unsigned bad = 0;
  for (int32_t k = 0; k < listed; ++k)
    bad |= unsigned(unsigned(r[k]) >= numIds);
  return bad != 0;
}

// The shapes of a [T, B, K] list of ids in [0, numIds), before its rows are read.
void requireListShapes(const IntArray &ids, const IntArray &counts, int numIds) {
  if (numIds < 1)
    throw std::invalid_argument("num_neurons must be >= 1, got " + std::to_string(numIds));
  if (ids.ndim() != 3)
    throw std::invalid_argument("ids must be [T, B, K], got " + std::to_string(ids.ndim()) +
                                " dimensions");
  requireShape(counts, {ids.shape(0), ids.shape(1), 2}, "spike list");
}

// Runs pass(list, first, last) on the threads' shares of the samples of a list
// of requireListShapes' shapes, each after its rows passed rowOutside; if any
// did not, raises checkWholeList's error for the first (no pass has read past
// the list's bounds: a thread stops at its fault).
template <typename Pass>
void forSampleShares(const IntArray &ids, const IntArray &counts, unsigned numIds,
                     unsigned numThreads, Pass &&pass) {
  const SpikeListView list = listView(ids, counts);
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1));
  std::atomic<bool> bad{false};
  {
    py::gil_scoped_release release;
    ThreadPool::instance().run(sampleThreads(list, std::size_t(T) * B, B, numThreads),
                               [&](unsigned thread, unsigned team) {
                                 const auto share = threadShare(B, thread, team);
                                 for (std::size_t t = 0; t < T; ++t)
                                   for (std::size_t b = share.first; b < share.second; ++b)
                                     if (rowOutside(list, t * B + b, numIds)) {
                                       bad.store(true);
                                       return;
                                     }
                                 pass(list, unsigned(share.first), unsigned(share.second));
                               });
  }
  if (bad.load()) {
    checkWholeList(ids, counts, numIds, "spike list");
    throw std::logic_error("spike list: a row failed the threads' scan but not the full check");
  }
}

template <typename V>
py::array spikeCountsAs(const IntArray &ids, const IntArray &counts, const py::array &values,
                        int numNeurons, unsigned numThreads) {
  requireListShapes(ids, counts, numNeurons);
  const Array<V> v = Array<V>::ensure(values);
  requireShape(v, {ids.shape(0), ids.shape(1), ids.shape(2)}, "values");
  const unsigned T = unsigned(ids.shape(0)), B = unsigned(ids.shape(1)),
                 N = unsigned(numNeurons);
  Array<V> out({py::ssize_t(B), py::ssize_t(N)});
  V *o = out.mutable_data();
  const V *in = v.data();
  forSampleShares(ids, counts, N, numThreads,
                  [&](const SpikeListView &list, unsigned first, unsigned last) {
                    std::fill(o + first * std::size_t(N), o + last * std::size_t(N), V(0));
                    sumListedByNeuron(list, in, T, B, first, last, N, o);
                  });
  return std::move(out);
}

template <typename V>
py::array spikeCountsGradAs(const IntArray &ids, const IntArray &counts, const py::array &grad,
                            unsigned numThreads) {
  const Array<V> g = Array<V>::ensure(grad);
  if (g.ndim() != 2)
    throw std::invalid_argument("grad must be [B, num_neurons]");
  requireListShapes(ids, counts, int(g.shape(1)));
  requireShape(g, {ids.shape(1), g.shape(1)}, "grad");
  const std::size_t T = std::size_t(ids.shape(0)), B = std::size_t(ids.shape(1)),
                    K = std::size_t(ids.shape(2));
  const unsigned N = unsigned(g.shape(1));
  Array<V> out({ids.shape(0), ids.shape(1), ids.shape(2)});
  V *o = out.mutable_data();
  const V *in = g.data();
  forSampleShares(ids, counts, N, numThreads,
                  [&](const SpikeListView &list, unsigned first, unsigned last) {
                    for (std::size_t t = 0; t < T; ++t) // the padding gets no gradient
                      for (std::size_t b = first; b < last; ++b) {
                        const std::size_t row = t * B + b;
                        std::fill(o + row * K + list.listedAt(row), o + (row + 1) * K, V(0));
                      }
                    gatherListedByNeuron(list, in, unsigned(T), unsigned(B), first, last, N,
                                         o);
                  });
  return std::move(out);
}

// The listed entries of a [T, B, K] list, every row's one after another (the
// compact form of SpikeListView): O(entries), where a copy of the list is
// O(T B K). The counts are checked, since they say what is read; with
// numIds > 0 the listed ids are checked too (in [0, numIds), as
// check_spike_list does), in the same pass as the copy, for a list the caller
// has not scanned. Returns the compact ids and the spike total. The rows are
// shared among up to numThreads threads (each copies its own rows to their
// offsets, so the result does not depend on the thread count).
py::tuple compactList(const IntArray &ids, const IntArray &counts, unsigned numIds,
                      unsigned numThreads) {
  if (ids.ndim() != 3)
    throw std::invalid_argument("ids must be [T, B, K], got " + std::to_string(ids.ndim()) +
                                " dimensions");
  requireShape(counts, {ids.shape(0), ids.shape(1), 2}, "counts");
  const std::size_t rows = std::size_t(ids.shape(0)) * std::size_t(ids.shape(1));
  const std::size_t K = std::size_t(ids.shape(2));
  const int32_t *c = counts.data(), *id = ids.data();
  std::vector<std::size_t> start(rows + 1);
  std::int64_t spikeTotal = 0;
  if (compactRowStarts(c, rows, K, start.data(), spikeTotal)) {
    if (numIds != 0) // an input list: the scan's error, which names the step and sample
      checkWholeList(ids, counts, numIds, "input list");
    for (std::size_t row = 0; row < rows; ++row) {
      const int32_t spikes = c[2 * row], listed = c[2 * row + 1];
      if (countsOutside(spikes, listed, K))
        throw std::invalid_argument("counts (" + std::to_string(spikes) + ", " +
                                    std::to_string(listed) + ") of row " + std::to_string(row) +
                                    " are inconsistent or exceed capacity " + std::to_string(K));
    }
  }
  IntArray out({py::ssize_t(start[rows])});
  int32_t *dst = out.mutable_data();
  const unsigned threads = rowThreads(rows, numThreads);
  std::vector<unsigned char> bad(threads, 0);
  ThreadPool::instance().run(threads, [&](unsigned thread, unsigned team) {
    // rows shared by their listed entries (a layer's activity builds up over the steps)
    const auto share = costShare(rows, thread, team, [&](std::size_t row) {
      return start[row + 1] - start[row] + 1;
    });
    bad[thread] =
        copyListedRows(id, c, K, share.first, share.second, start.data(), dst, numIds) != 0;
  });
  // (numIds 0: the ids are not checked)
  if (numIds != 0 && std::find(bad.begin(), bad.end(), 1) != bad.end()) // the first fault
    checkWholeList(ids, counts, numIds, "input list");
  return py::make_tuple(std::move(out), spikeTotal);
}

// Rows [first, last) of gatherListed: row r's listed entries take source's
// values at their ids, its padding 0; returns whether an id lay outside
// [0, n) (that entry is left 0, nothing is read out of bounds).
bool gatherRows(const float *source, std::size_t n, std::size_t rowStride, const int32_t *ids,
                const std::size_t *start, std::size_t K, std::size_t first, std::size_t last,
                float *out) {
  bool outside = false;
  for (std::size_t row = first; row < last; ++row) {
    const float *src = source + row * rowStride;
    const int32_t *id = ids + start[row];
    float *to = out + row * K;
    const std::size_t listed = start[row + 1] - start[row];
    for (std::size_t k = 0; k < listed; ++k) {
      const std::size_t i = std::size_t(std::uint32_t(id[k])); // a negative id: huge
      if (i < n) {
        to[k] = src[i];
      } else {
        to[k] = 0.0f;
        outside = true;
      }
    }
    std::fill(to + listed, to + K, 0.0f);
  }
  return outside;
}

// d(loss)/d(values) of a list from the dense gradient of its neurons,
// source [T x B, n]: out[t, b, k] = source[t * B + b, id] for the row's k-th
// listed entry (id), 0 at the padding; ids compact (compact_list's). This is
// the gather of the backward's dense input-gradient path without the int64
// copy of a [T, B, K] index that torch.gather needs and the masking pass that
// zeroes the padding after it. The rows are shared among threads. source's
// rows may lie further apart than n (a GEMM's output with aligned rows, read
// in place); any other layout is copied C-contiguous first.
py::array gatherListed(const py::array &sourceArg, const IntArray &ids, const IntArray &counts,
                       unsigned capacity, unsigned numThreads) {
  py::array_t<float, py::array::forcecast> source =
      py::array_t<float, py::array::forcecast>::ensure(sourceArg);
  if (!source)
    throw std::invalid_argument("source must be an array of float32");
  constexpr py::ssize_t f = sizeof(float);
  if (source.ndim() == 2 &&
      !(source.strides(1) == f && source.strides(0) % f == 0 &&
        source.strides(0) >= source.shape(1) * f))
    source = FloatArray::ensure(source);
  if (counts.ndim() != 3)
    throw std::invalid_argument("counts must be [T, B, 2]");
  if (ids.ndim() != 1)
    throw std::invalid_argument("ids must be compact (1-D)");
  const unsigned T = unsigned(counts.shape(0)), B = unsigned(counts.shape(1));
  const std::size_t rows = std::size_t(T) * B;
  if (source.ndim() != 2 || std::size_t(source.shape(0)) != rows)
    throw std::invalid_argument("source must be [T * B, n] = [" + std::to_string(rows) +
                                ", n]");
  // The counts against the capacity and the ids' length, and the rows' starts
  // (the ids are checked against source's width as they are read).
  std::vector<std::size_t> start;
  checkSpikeList(ids, counts, T, B, 0, false, "list", false, &start, capacity);
  FloatArray out({counts.shape(0), counts.shape(1), py::ssize_t(capacity)});
  const std::size_t n = std::size_t(source.shape(1));
  const std::size_t rowStride = rows > 1 ? std::size_t(source.strides(0)) / sizeof(float) : n;
  const unsigned threads = rowThreads(rows, numThreads);
  std::vector<unsigned char> bad(threads, 0);
  ThreadPool::instance().run(threads, [&](unsigned thread, unsigned team) {
    // a row gathers its listed entries and fills its padding
    const auto share = costShare(rows, thread, team, [&](std::size_t row) {
      return start[row + 1] - start[row] + capacity;
    });
    bad[thread] = gatherRows(source.data(), n, rowStride, ids.data(), start.data(), capacity,
                             share.first, share.second, out.mutable_data());
  });
  if (std::find(bad.begin(), bad.end(), 1) != bad.end())
    throw std::invalid_argument("a listed id lies outside [0, " + std::to_string(n) + ")");
  return std::move(out);
}

// A dense spike tensor's rows, [rows, n] of float32, float64 or uint8 (bool),
// scanned for SparseSpikes.from_dense: a spike is a nonzero entry, which must
// be 1; with an `eligible` mask (uint8, [rows, n]) the eligible-only entries
// are the marked ones that did not spike. One pass per question, rows shared
// among threads, in place of torch's nonzero, its index tensors and the
// scatter of the ranks (with which the whole conversion of S's input,
// [6400, 700] at 1%, took 3.5x as long).
struct DenseRows {
  py::array x;
  const std::uint8_t *eligible = nullptr;
  std::size_t rows = 0, n = 0;
  char kind = 0; // numpy's dtype char: 'f', 'd' or 'B'

  DenseRows(const py::array &x_, const std::optional<py::array> &eligible_) : x(x_) {
    if (x.ndim() != 2)
      throw std::invalid_argument("dense spikes must be [rows, n]");
    if (!(x.flags() & py::array::c_style))
      throw std::invalid_argument("dense spikes must be C-contiguous");
    kind = x.dtype().char_();
    if (kind == '?')
      kind = 'B';
    if (kind != 'f' && kind != 'd' && kind != 'B')
      throw std::invalid_argument(std::string("dense spikes must be float32, float64, bool "
                                              "or uint8, got dtype '") +
                                  x.dtype().char_() + "'");
    rows = std::size_t(x.shape(0));
    n = std::size_t(x.shape(1));
    if (eligible_) {
      const py::array &e = *eligible_;
      const char ek = e.dtype().char_();
      if ((ek != '?' && ek != 'B') || e.ndim() != 2 || std::size_t(e.shape(0)) != rows ||
          std::size_t(e.shape(1)) != n || !(e.flags() & py::array::c_style))
        throw std::invalid_argument("eligible must be a C-contiguous bool mask of the "
                                    "spikes' shape");
      eligible = static_cast<const std::uint8_t *>(e.data());
    }
  }

  // Runs f(values of the dtype) on the rows' data.
  template <typename F> void visit(F &&f) const {
    if (kind == 'f')
      f(static_cast<const float *>(x.data()));
    else if (kind == 'd')
      f(static_cast<const double *>(x.data()));
    else
      f(static_cast<const std::uint8_t *>(x.data()));
  }

  unsigned threads(unsigned numThreads) const {
    return threadsFor(rows * n, std::size_t(1) << 16, numThreads);
  }
};

// What a dense entry is: a spike (nonzero), an eligible-only entry (marked,
// not spiking), or neither 0 nor 1 (not a spike tensor).
template <typename V> inline bool isSpike(V v) { return v != V(0); }
template <typename V> inline bool isEligibleOnly(std::uint8_t mark, V v) {
  return (mark != 0) & (v == V(0));
}
template <typename V> inline bool notBinary(V v) { return (v != V(0)) & (v != V(1)); }

// Per row: its spikes and eligible-only entries; and the flat index of the
// first entry that is neither 0 nor 1 (-1: none), and whether any such entry
// is NaN or infinite.
template <typename V>
void countRows(const V *x, const std::uint8_t *eligible, std::size_t n, std::size_t first,
               std::size_t last, int32_t *spikes, int32_t *only, std::int64_t &firstBad,
               bool &nonFinite) {
  for (std::size_t r = first; r < last; ++r) {
    const V *v = x + r * n;
    unsigned s = 0, bad = 0;
    for (std::size_t i = 0; i < n; ++i) { // branch-free: vectorised
      s += unsigned(isSpike(v[i]));
      bad |= unsigned(notBinary(v[i]));
    }
    spikes[r] = int32_t(s);
    unsigned e = 0;
    if (eligible) {
      const std::uint8_t *m = eligible + r * n;
      for (std::size_t i = 0; i < n; ++i)
        e += unsigned(isEligibleOnly(m[i], v[i]));
    }
    only[r] = int32_t(e);
    if (bad) {
      for (std::size_t i = 0; i < n; ++i) {
        if (notBinary(v[i])) {
          if (firstBad < 0)
            firstBad = std::int64_t(r * n + i);
          if constexpr (!std::is_integral_v<V>)
            nonFinite |= !std::isfinite(double(v[i]));
        }
      }
    }
  }
}

py::tuple denseListCounts(const py::array &x, const std::optional<py::array> &eligible,
                          unsigned numThreads) {
  const DenseRows d(x, eligible);
  IntArray spikes({py::ssize_t(d.rows)}), only({py::ssize_t(d.rows)});
  const unsigned threads = d.threads(numThreads);
  std::vector<std::int64_t> firstBad(threads, -1);
  std::vector<unsigned char> nonFinite(threads, 0);
  int32_t *sp = spikes.mutable_data(), *on = only.mutable_data();
  d.visit([&](const auto *v) {
    py::gil_scoped_release release;
    ThreadPool::instance().run(threads, [&](unsigned thread, unsigned team) {
      const auto share = threadShare(d.rows, thread, team);
      bool nf = false;
      countRows(v, d.eligible, d.n, share.first, share.second, sp, on, firstBad[thread], nf);
      nonFinite[thread] = nf;
    });
  });
  std::int64_t bad = -1;
  for (const std::int64_t b : firstBad) // threads' shares ascend: the first found is first
    if (b >= 0) {
      bad = b;
      break;
    }
  const bool anyNonFinite = std::find(nonFinite.begin(), nonFinite.end(), 1) != nonFinite.end();
  return py::make_tuple(std::move(spikes), std::move(only), bad, anyNonFinite);
}

// Whether any of the 16 entries at v is nonzero (a -0.0 counts as 0): their
// bits ORed 32 bytes at a time, the sign bits masked off. Most chunks hold
// nothing to list at low activity.
typedef std::uint64_t u64x4 __attribute__((vector_size(32)));
template <typename V> inline bool anyNonzero16(const V *v) {
  constexpr std::size_t kBytes = 16 * sizeof(V);
  const char *p = reinterpret_cast<const char *>(v);
  if constexpr (kBytes < 32) {
    std::uint64_t a, b;
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + 8, 8);
    return (a | b) != 0;
  } else {
    u64x4 acc = {0, 0, 0, 0};
    for (std::size_t at = 0; at < kBytes; at += 32) {
      u64x4 w;
      std::memcpy(&w, p + at, 32);
      acc |= w;
    }
    constexpr std::uint64_t kMagnitude =
        sizeof(V) == 4 ? 0x7fffffff7fffffffull : 0x7fffffffffffffffull;
    acc &= kMagnitude;
    return (acc[0] | acc[1] | acc[2] | acc[3]) != 0;
  }
}

// Appends to out[k..) the ids i in [0, n) for which listed(i) holds, ascending,
// until `want` are there; chunks of 16 for which busy(i0) is false are passed
// over.
// A busy chunk's listed entries become a 16-bit mask without a branch per entry
// (which mispredicts about once per listed entry), then its set bits are walked
// in ascending order.
template <typename Busy, typename Listed>
std::size_t appendListed(std::size_t n, std::size_t want, std::size_t k, int32_t *out,
                         Busy &&busy, Listed &&listed) {
  std::size_t i = 0;
  for (; i + 16 <= n && k < want; i += 16) {
    if (!busy(i))
      continue;
    unsigned mask = 0;
#pragma GCC unroll 16
    for (unsigned j = 0; j < 16; ++j)
      mask |= unsigned(listed(i + j)) << j;
    for (; mask != 0 && k < want; mask &= mask - 1)
      out[k++] = int32_t(i + unsigned(__builtin_ctz(mask)));
  }
  for (; i < n && k < want; ++i)
    if (listed(i))
      out[k++] = int32_t(i);
  return k;
}

// Bit j set where v[j] != 0, j < 16 (a -0.0 counts as 0; the values were
// checked to be 0 or 1): with AVX2 a compare and a movemask per vector, where a
// test and a branch per entry cost 2-3x more at 5-30% activity.
template <typename V> inline unsigned nonzeroMask16(const V *v) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<V, float>) {
    const __m256 zero = _mm256_setzero_ps();
    auto bits = [&](const float *at) {
      return unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(at), zero, _CMP_NEQ_OQ)));
    };
    return bits(v) | bits(v + 8) << 8;
  } else if constexpr (std::is_same_v<V, double>) {
    const __m256d zero = _mm256_setzero_pd();
    unsigned mask = 0;
    for (unsigned q = 0; q < 4; ++q) {
      const __m256d ne = _mm256_cmp_pd(_mm256_loadu_pd(v + 4 * q), zero, _CMP_NEQ_OQ);
      mask |= unsigned(_mm256_movemask_pd(ne)) << (4 * q);
    }
    return mask;
  } else {
    static_assert(std::is_same_v<V, std::uint8_t>);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(v));
    return ~unsigned(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_setzero_si128()))) & 0xffffu;
  }
#else
  unsigned mask = 0;
  for (unsigned j = 0; j < 16; ++j)
    mask |= unsigned(isSpike(v[j])) << j;
  return mask;
#endif
}

// Appends the ids of v's nonzero entries (of n), ascending, to out until there are
// `want`; returns how many there are.
template <typename V>
std::size_t appendSpikes(const V *v, std::size_t n, std::size_t want, int32_t *out) {
  std::size_t k = 0, i = 0;
  for (; i + 16 <= n && k < want; i += 16)
    for (unsigned mask = nonzeroMask16(v + i); mask != 0 && k < want; mask &= mask - 1)
      out[k++] = int32_t(i + unsigned(__builtin_ctz(mask)));
  for (; i < n && k < want; ++i)
    if (isSpike(v[i]))
      out[k++] = int32_t(i);
  return k;
}

// Row r's list: its spikes' ids ascending, then its eligible-only ids
// ascending, the first K of them, over the zeros already there; the rows'
// counts are denseListCounts'. The values are known to be 0 or 1.
template <typename V>
void fillRows(const V *x, const std::uint8_t *eligible, const int32_t *spikes,
              const int32_t *only, std::size_t n, std::size_t K, std::size_t first,
              std::size_t last, int32_t *ids) {
  for (std::size_t r = first; r < last; ++r) {
    const V *v = x + r * n;
    int32_t *out = ids + r * K;
    const std::size_t s = std::min<std::size_t>(K, std::size_t(spikes[r]));
    std::size_t k = appendSpikes(v, n, s, out);
    if (eligible && only[r] > 0) {
      const std::uint8_t *m = eligible + r * n;
      const std::size_t want = std::min<std::size_t>(K, s + std::size_t(only[r]));
      appendListed(
          n, want, k, out, [m](std::size_t i) { return anyNonzero16(m + i); },
          [v, m](std::size_t i) { return isEligibleOnly(m[i], v[i]); });
    }
  }
}

py::array denseListIds(const py::array &x, const std::optional<py::array> &eligible,
                       const IntArray &spikes, const IntArray &only, unsigned capacity,
                       unsigned numThreads) {
  const DenseRows d(x, eligible);
  requireShape(spikes, {py::ssize_t(d.rows)}, "spikes");
  requireShape(only, {py::ssize_t(d.rows)}, "eligible-only");
  if (d.n > std::size_t(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("dense spikes have more neurons than int32 ids can name");
  IntArray ids({py::ssize_t(d.rows), py::ssize_t(capacity)});
  int32_t *out = ids.mutable_data();
  const unsigned threads = d.threads(numThreads);
  d.visit([&](const auto *v) {
    py::gil_scoped_release release;
    ThreadPool::instance().run(threads, [&](unsigned thread, unsigned team) {
      const auto share = threadShare(d.rows, thread, team);
      // the padding: one memset of the share, not one per row of a few entries
      std::memset(out + share.first * capacity, 0,
                  (share.second - share.first) * capacity * sizeof(int32_t));
      fillRows(v, d.eligible, spikes.data(), only.data(), d.n, capacity, share.first,
               share.second, out);
    });
  });
  return std::move(ids);
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
        py::arg("num_ids") = 0, py::arg("num_threads") = 1,
        "The listed entries of a [T, B, K] list, row after row (int32 [entries]), and its "
        "spike total; with num_ids > 0 the ids are checked as check_spike_list checks them.");
  m.def("gather_listed", &gatherListed, py::arg("source"), py::arg("ids"), py::arg("counts"),
        py::arg("capacity"), py::arg("num_threads") = 1,
        "source [T*B, n] float32 at a compact list's entries: float32 [T, B, capacity], "
        "0 at the padding.");
  m.def("dense_list_counts", &denseListCounts, py::arg("x"), py::arg("eligible") = py::none(),
        py::arg("num_threads") = 1,
        "Rows of a dense [rows, n] spike tensor (float32, float64, bool or uint8): spikes and "
        "eligible-only entries per row (int32), the flat index of the first entry neither 0 "
        "nor 1 (-1: none), and whether any such entry is NaN or inf.");
  m.def("dense_list_ids", &denseListIds, py::arg("x"), py::arg("eligible"), py::arg("spikes"),
        py::arg("eligible_only"), py::arg("capacity"), py::arg("num_threads") = 1,
        "int32 [rows, capacity]: per row its spikes' ids ascending, then its eligible-only "
        "ids ascending, the first `capacity` of them, then 0s (the rows' counts are "
        "dense_list_counts').");
  m.def(
      "spike_counts",
      [](const IntArray &ids, const IntArray &counts, const py::array &values, int numNeurons,
         unsigned numThreads) {
        return byDtype(values, "values", [&](auto v) {
          return spikeCountsAs<decltype(v)>(ids, counts, values, numNeurons, numThreads);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("values"), py::arg("num_neurons"),
      py::arg("num_threads") = 1);
  m.def(
      "spike_counts_grad",
      [](const IntArray &ids, const IntArray &counts, const py::array &grad,
         unsigned numThreads) {
        return byDtype(grad, "grad", [&](auto v) {
          return spikeCountsGradAs<decltype(v)>(ids, counts, grad, numThreads);
        });
      },
      py::arg("ids"), py::arg("counts"), py::arg("grad"), py::arg("num_threads") = 1);
}

} // namespace snn
