// Lists are [rows x capacity] arrays holding a few dozen entries per row, and
// every tile walks all rows: each row it reads starts kilobytes from the last
// one, a pattern the hardware prefetchers do not follow. The loops over rows
// fetch the list entries they will read two rows later (on the L config at 1%
// activity, training steps ran ~6% faster in an interleaved A/B).
#pragma once
#include <cstddef>

#include "LayerViews.hpp"
#include "RowKernels.hpp"

namespace snn {

constexpr unsigned kRowsAhead = 2;

// The cache lines holding elements [begin, end) of p. (Written with integer
// offsets: GCC 12 deleted the same loop written as a pointer walk.)
template <typename T> inline void prefetchRun(const T *p, std::size_t begin, std::size_t end) {
  const char *base = reinterpret_cast<const char *>(p);
  const std::size_t last = end * sizeof(T);
  for (std::size_t at = begin * sizeof(T) & ~std::size_t(63); at < last; at += 64)
    __builtin_prefetch(base + at);
}

// The first line of each of the first Rows weight rows that the next
// SpikeMatmul call will add, issued before this call: a call adds only a few
// rows and its loop over them ends in a mispredicted branch, past which the
// core does not run ahead to start the next call's reads from L2 by itself.
// Rows = the kernel's own prefetch distance, so together they fetch every
// row. Always Rows prefetches (repeating the last row), with no branch on the
// count to mispredict: GCC unrolled a loop to the count into a chain of
// data-dependent compares. The first line is enough for the hardware to
// follow; whole rows measured slower in a microbenchmark.
template <unsigned Rows, typename WT>
inline void prefetchListedRows(const WT *block, const int *ids, unsigned count,
                               unsigned rowLength) {
  if (count == 0)
    return;
#pragma GCC unroll 8
  for (unsigned k = 0; k < Rows; ++k) {
    const unsigned at = k < count ? k : count - 1;
    __builtin_prefetch(block + std::size_t(unsigned(ids[at])) * rowLength);
  }
}

// Before the SpikeMatmul call of list row `row` (of `rows`) on a tile's weight
// block: the list entries of the row kRowsAhead on, and the next call's rows.
template <typename WT>
inline void prefetchSpikeMatmul(const SpikeListView &in, const WT *block, std::size_t row,
                                std::size_t rows, unsigned rowLength) {
  if (row + kRowsAhead < rows)
    prefetchRun(in.idsAt(row + kRowsAhead), 0, in.spikesAt(row + kRowsAhead));
  if (row + 1 < rows)
    prefetchListedRows<kPrefetchAhead>(block, in.idsAt(row + 1), in.spikesAt(row + 1),
                                       rowLength);
}

} // namespace snn
