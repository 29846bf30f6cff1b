// Fixed assignments of work to threads. Which thread runs a tile or a row
// never changes what is computed, only when.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace snn {

// [begin, end) of the thread's share of `count` items in contiguous chunks.
inline std::pair<std::size_t, std::size_t> threadShare(std::size_t count, unsigned thread,
                                                       unsigned numThreads) {
  return {count * thread / numThreads, count * (thread + 1) / numThreads};
}

// [begin, end) of the thread's share of `count` items in contiguous chunks of
// about equal cost, cost(i) >= 0 each (integers, so the cut is exact): the
// shares end where the running cost first reaches k / numThreads of the total.
// Rows of a layer call differ in cost by their listed entries, and activity
// builds up over the steps, so equal numbers of rows left the thread with the
// late steps working while the other waited. Each item is still computed
// whole by one thread, so which thread takes it changes nothing computed.
template <typename Cost>
std::pair<std::size_t, std::size_t> costShare(std::size_t count, unsigned thread,
                                              unsigned numThreads, Cost &&cost) {
  if (numThreads <= 1)
    return {0, count};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < count; ++i)
    total += cost(i);
  if (total == 0)
    return threadShare(count, thread, numThreads);
  // Share k begins at the first item whose running cost before it reaches
  // total * k / numThreads (compared as running * numThreads >= total * k).
  const std::uint64_t loMark = total * thread, hiMark = total * (thread + 1);
  std::size_t lo = thread == 0 ? 0 : count, hi = count;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t scaled = running * numThreads;
    if (lo == count && scaled >= loMark)
      lo = i;
    if (thread + 1 < numThreads && scaled >= hiMark) {
      hi = i;
      break;
    }
    running += cost(i);
  }
  return {std::min(lo, hi), hi};
}

inline unsigned effectiveThreads(unsigned requested, std::size_t items) {
  const std::size_t n = std::min<std::size_t>(requested == 0 ? 1 : requested, items);
  return unsigned(n == 0 ? 1 : n);
}

// A batch cut into contiguous groups of samples. A layer with fewer tiles
// than threads can give each thread a group of samples instead of a
// narrower tile (the planner decides): a tile's per-(step, sample) work
// hardly depends on its width, and one tile of 256 neurons whose 64 samples
// two threads share makes half the vertex calls of two tiles of 128 over all
// 64 samples. A unit of work is a (tile, group) pair; a group's samples
// never meet another group's until the parameter gradients, which are summed
// over the groups in group order.
class SampleGroups {
public:
  SampleGroups(unsigned batch, unsigned count)
      : batch_(batch), count_(std::max(1u, std::min(count, std::max(batch, 1u)))),
        first_(count_ + 1), groupOf_(batch) {
    for (unsigned g = 0; g <= count_; ++g)
      first_[g] = unsigned(std::size_t(batch_) * g / count_);
    for (unsigned g = 0; g < count_; ++g)
      for (unsigned b = first_[g]; b < first_[g + 1]; ++b)
        groupOf_[b] = g;
  }

  unsigned batch() const { return batch_; }
  unsigned count() const { return count_; }
  unsigned first(unsigned g) const { return first_[g]; }
  unsigned end(unsigned g) const { return first_[g + 1]; }
  unsigned size(unsigned g) const { return end(g) - first(g); }
  // The group that holds sample b, and b's index within it. A table, since
  // the executors ask for every (step, sample) row and the arithmetic costs
  // several divisions.
  std::pair<unsigned, unsigned> locate(unsigned b) const {
    const unsigned g = groupOf_[b];
    return {g, b - first_[g]};
  }

private:
  unsigned batch_, count_;
  std::vector<unsigned> first_;   // [count + 1]
  std::vector<unsigned> groupOf_; // [batch]
};

} // namespace snn
