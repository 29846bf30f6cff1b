// An input list [T x B x capacity] repacked for the SpikeMatmul vertex: the
// spike ids of each step's samples one after another, and where each
// sample's end. A tile then adds a step's rows in one vertex call over one
// dense run of ids (SpikeMatmul.hpp), instead of one call per sample over
// rows spread `capacity` apart with their counts beside them. With sample
// groups (TilePartition.hpp), each (step, group) is such a run of its own,
// its ends counted from the run's start. Built once per layer call and read
// by every tile.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstring>
#include <vector>

#include "CompactList.hpp"
#include "LayerViews.hpp"
#include "RawVector.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"

namespace snn {

class StepLists {
public:
  // The runs' sizes first, on the calling thread (a pass over the counts
  // alone), then the copies, the steps shared among threads with no barrier
  // and each sample's end written as its row is copied: one pass over the
  // ids and no wait for the slowest thread between two passes, which would
  // cost more than the copies at low activity. With `copy`, the same pass
  // takes that copy of every run of rows (read from memory once for both).
  void build(const SpikeListView &in, unsigned steps, const SampleGroups &groups,
             unsigned numThreads, ListCopy *copy = nullptr) {
    const unsigned batch = groups.batch(), G = groups.count();
    groups_ = groups;
    runStart_.resize(std::size_t(steps) * G + 1);
    std::size_t total = 0;
    for (std::size_t t = 0; t < steps; ++t)
      for (unsigned g = 0; g < G; ++g) {
        runStart_[t * G + g] = total;
        for (std::size_t row = t * batch + groups.first(g); row < t * batch + groups.end(g);
             ++row)
          total += in.spikesAt(row);
      }
    runStart_[std::size_t(steps) * G] = total;
    ends_.resize(std::size_t(steps) * batch);
    ids_.resize(total + kBlock); // a block copy may write past the last id
    ThreadPool &pool = ThreadPool::instance();
    std::atomic<bool> outside{false};
    pool.run(effectiveThreads(numThreads, steps), [&](unsigned thread, unsigned team) {
      const auto share = threadShare(steps, thread, team);
      // The next thread's ids start at limit: past it, whole-block copies stop.
      const int *limit =
          ids_.data() + runStart_[share.second * G] + (share.second == steps ? kBlock : 0);
      unsigned bad = 0;
      for (std::size_t t = share.first; t < share.second; ++t)
        for (unsigned g = 0; g < G; ++g) {
          int *out = ids_.data() + runStart_[t * G + g];
          const std::size_t first = t * batch + groups.first(g);
          const std::size_t last = t * batch + groups.end(g);
          if (copy) // the rows then come from L1
            bad |= copyListedRows(in.ids, in.counts, in.capacity, first, last, copy->start,
                                  copy->ids, copy->numIds);
          unsigned end = 0;
          for (std::size_t row = first; row < last; ++row)
            ends_[row] = end += copyRow(in, row, out + end, limit);
        }
      if (bad)
        outside.store(true, std::memory_order_relaxed);
    });
    if (copy)
      copy->outside = outside.load();
  }

  // Step t's run of group g: its ids, their number, and [group size] ends:
  // the group's sample i has ids(t, g)[ends(t, g)[i-1], ends(t, g)[i]).
  const int *ids(unsigned t, unsigned g = 0) const {
    return ids_.data() + runStart_[std::size_t(t) * groups_.count() + g];
  }
  std::size_t spikes(unsigned t, unsigned g = 0) const {
    const std::size_t r = std::size_t(t) * groups_.count() + g;
    return runStart_[r + 1] - runStart_[r];
  }
  std::size_t totalSpikes() const { return runStart_.back(); }
  const unsigned *ends(unsigned t, unsigned g = 0) const {
    return ends_.data() + std::size_t(t) * groups_.batch() + groups_.first(g);
  }

private:
  static constexpr unsigned kBlock = 8;

  // In whole blocks of kBlock ids where the row holds them and out has room
  // before limit (rows hold a few spikes: one fixed-size copy instead of a
  // call sized by the count). What a block writes past the row's spikes, the
  // next row's copy overwrites. Returns the row's spike count.
  static unsigned copyRow(const SpikeListView &in, std::size_t row, int *out,
                          const int *limit) {
    const int *src = in.idsAt(row);
    const unsigned n = in.spikesAt(row);
    unsigned k = 0;
    for (; k < n && k + kBlock <= in.capacity && out + k + kBlock <= limit; k += kBlock)
      std::memcpy(out + k, src + k, kBlock * sizeof(int));
    if (k < n)
      std::memcpy(out + k, src + k, (n - k) * sizeof(int));
    return n;
  }

  SampleGroups groups_{0, 1};
  RawVector<int> ids_;
  RawVector<unsigned> ends_;
  std::vector<std::size_t> runStart_; // [steps x groups + 1]
};

} // namespace snn
