// Fixed assignments of work to threads. Which thread runs a tile or a row
// never changes what is computed, only when.
#pragma once
#include <algorithm>
#include <cstddef>

namespace snn {

// [begin, end) of the thread's share of `count` items in contiguous chunks.
inline std::pair<std::size_t, std::size_t> threadShare(std::size_t count, unsigned thread,
                                                       unsigned numThreads) {
  return {count * thread / numThreads, count * (thread + 1) / numThreads};
}

inline unsigned effectiveThreads(unsigned requested, std::size_t items) {
  const std::size_t n = std::min<std::size_t>(requested == 0 ? 1 : requested, items);
  return unsigned(n == 0 ? 1 : n);
}

} // namespace snn
