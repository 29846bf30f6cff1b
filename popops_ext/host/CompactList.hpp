// The compact copy of a [T, B, K] list (SpikeListView's rowStart form): its
// listed entries, row after row, O(entries) where a copy of the list is
// O(T B K). Taken by _C.compact_list (SpikeListBindings.cpp) and, as it
// repacks its input, by the forward's sparse path (StepLists.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "NumpyArgs.hpp"

namespace snn {

// Each row's start in the compact copy (start: rows + 1 offsets) from the
// list's counts [rows x 2], adding the rows' spikes to `spikes`. Returns
// whether a row's counts break countsOutside: branch-free over the rows, the
// caller names the first such row.
inline bool compactRowStarts(const int32_t *counts, std::size_t rows, std::size_t K,
                             std::size_t *start, std::int64_t &spikes) {
  std::size_t total = 0;
  bool bad = false;
  for (std::size_t row = 0; row < rows; ++row) {
    const int32_t rowSpikes = counts[2 * row], listed = counts[2 * row + 1];
    bad |= countsOutside(rowSpikes, listed, K);
    start[row] = total;
    total += std::size_t(std::uint32_t(listed));
    spikes += rowSpikes;
  }
  start[rows] = total;
  return bad;
}

// Rows [first, last) of a [T, B, K] list (ids, counts) copied compact, to
// their offsets `start` in dst; returns non-zero where a listed id lies
// outside [0, numIds) (a negative id is a large unsigned one). A row holds a handful of entries: a library
// memmove call per row cost more than the copying (and took the cache misses
// of the rows, spread K apart, one at a time); the loop, with the rows ahead
// prefetched, streams. The attribute keeps GCC from turning the loop back into
// that call (and from inlining this: one call per run of rows).
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
inline unsigned copyListedRows(const int32_t *ids, const int32_t *counts, std::size_t K,
                               std::size_t first, std::size_t last, const std::size_t *start,
                               int32_t *dst, unsigned numIds) {
  constexpr std::size_t kAhead = 8;
  unsigned bad = 0;
  for (std::size_t row = first; row < last; ++row) {
    if (row + kAhead < last && counts[2 * (row + kAhead) + 1] > 0)
      __builtin_prefetch(ids + (row + kAhead) * K);
    const std::size_t n = std::size_t(counts[2 * row + 1]);
    const int32_t *src = ids + row * K;
    int32_t *to = dst + start[row];
    for (std::size_t k = 0; k < n; ++k) {
      to[k] = src[k];
      bad |= unsigned(unsigned(src[k]) >= numIds);
    }
  }
  return bad;
}

// A copy taken while StepLists repacks an input list of [T, B, K] rows (not a
// compact one): every row's listed entries (spikes and eligible-only) at
// ids[start[row]], and whether any lies outside [0, numIds). The counts must
// be checked before (they say what is read).
struct ListCopy {
  const std::size_t *start; // [rows + 1], compactRowStarts'
  int32_t *ids;
  unsigned numIds;
  bool outside = false;
};

} // namespace snn
