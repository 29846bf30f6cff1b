// Lists are [rows x capacity] arrays holding a few dozen entries per row, and
// every tile walks all rows: each row it reads starts kilobytes from the last
// one, a pattern the hardware prefetchers do not follow. The loops over rows
// fetch the list entries they will read two rows later (on the L config at 1%
// activity, training steps ran ~6% faster in an interleaved A/B).
#pragma once
#include <cstddef>

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

} // namespace snn
