// An input list [T x B x capacity] repacked for the SpikeMatmul vertex: the
// spike ids of each step's samples one after another, and where each
// sample's end. A tile then adds a step's rows in one vertex call over one
// dense run of ids (SpikeMatmul.hpp), instead of one call per sample over
// rows spread `capacity` apart with their counts beside them. Built once per
// layer call and read by every tile.
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

#include "LayerViews.hpp"
#include "RawVector.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"

namespace snn {

class StepLists {
public:
  // The steps' sizes first, on the calling thread (a pass over the counts
  // alone), then the copies, the steps shared among threads with no barrier
  // and each sample's end written as its row is copied. Sizing the steps in
  // the threads, waiting for all of them and copying in a second pass over
  // the ends took 1.6x as long (S's input at 0.5% activity, 2 threads: 38 us
  // against 23; 2.8x single-threaded with the list in cache).
  void build(const SpikeListView &in, unsigned steps, unsigned batch, unsigned numThreads) {
    B_ = batch;
    stepStart_.resize(std::size_t(steps) + 1);
    std::size_t total = 0;
    for (std::size_t t = 0; t < steps; ++t) {
      stepStart_[t] = total;
      for (std::size_t row = t * batch; row < (t + 1) * batch; ++row)
        total += in.spikesAt(row);
    }
    stepStart_[steps] = total;
    ends_.resize(std::size_t(steps) * batch);
    ids_.resize(total + kBlock); // a block copy may write past the last id
    ThreadPool &pool = ThreadPool::instance();
    pool.run(effectiveThreads(numThreads, steps), [&](unsigned thread, unsigned team) {
      const auto share = threadShare(steps, thread, team);
      // The next thread's ids start at limit: past it, whole-block copies stop.
      const int *limit =
          ids_.data() + stepStart_[share.second] + (share.second == steps ? kBlock : 0);
      for (std::size_t t = share.first; t < share.second; ++t) {
        int *out = ids_.data() + stepStart_[t];
        unsigned end = 0;
        for (std::size_t row = t * batch; row < (t + 1) * batch; ++row)
          ends_[row] = end += copyRow(in, row, out + end, limit);
      }
    });
  }

  const int *ids(unsigned t) const { return ids_.data() + stepStart_[t]; }
  std::size_t spikes(unsigned t) const { return stepStart_[t + 1] - stepStart_[t]; }
  std::size_t totalSpikes() const { return stepStart_.back(); }
  // [B]: sample b's ids are ids(t)[ends(t)[b-1], ends(t)[b]).
  const unsigned *ends(unsigned t) const { return ends_.data() + std::size_t(t) * B_; }

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

  unsigned B_ = 0;
  RawVector<int> ids_;
  RawVector<unsigned> ends_;
  std::vector<std::size_t> stepStart_;
};

} // namespace snn
