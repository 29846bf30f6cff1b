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
  void build(const SpikeListView &in, unsigned steps, unsigned batch, unsigned numThreads) {
    B_ = batch;
    ends_.resize(std::size_t(steps) * batch);
    stepStart_.resize(std::size_t(steps) + 1);
    ThreadPool &pool = ThreadPool::instance();
    pool.run(effectiveThreads(numThreads, steps), [&](unsigned thread, unsigned team) {
      const auto share = threadShare(steps, thread, team);
      // Ends within each step, and the step's size (in stepStart_[t + 1] for now).
      for (std::size_t t = share.first; t < share.second; ++t) {
        unsigned inStep = 0;
        for (std::size_t row = t * batch; row < (t + 1) * batch; ++row)
          ends_[row] = inStep += in.spikesAt(row);
        stepStart_[t + 1] = inStep;
      }
      pool.barrier();
      if (thread == 0) {
        stepStart_[0] = 0;
        for (unsigned t = 0; t < steps; ++t)
          stepStart_[t + 1] += stepStart_[t];
        ids_.resize(stepStart_[steps] + kBlock); // a block copy may write past the last id
      }
      pool.barrier();
      // The next thread's ids start at limit: past it, whole-block copies stop.
      const int *limit =
          ids_.data() + stepStart_[share.second] + (share.second == steps ? kBlock : 0);
      for (std::size_t t = share.first; t < share.second; ++t) {
        int *out = ids_.data() + stepStart_[t];
        for (std::size_t row = t * batch; row < (t + 1) * batch; ++row)
          copyRow(in, row, out + (row == t * batch ? 0 : ends_[row - 1]), limit);
      }
    });
  }

  const int *ids(unsigned t) const { return ids_.data() + stepStart_[t]; }
  std::size_t spikes(unsigned t) const { return stepStart_[t + 1] - stepStart_[t]; }
  // [B]: sample b's ids are ids(t)[ends(t)[b-1], ends(t)[b]).
  const unsigned *ends(unsigned t) const { return ends_.data() + std::size_t(t) * B_; }

private:
  static constexpr unsigned kBlock = 8;

  // In whole blocks of kBlock ids where the row holds them and out has room
  // before limit (rows hold a few spikes: one fixed-size copy instead of a
  // call sized by the count). What a block writes past the row's spikes, the
  // next row's copy overwrites.
  static void copyRow(const SpikeListView &in, std::size_t row, int *out, const int *limit) {
    const int *src = in.idsAt(row);
    const unsigned n = in.spikesAt(row);
    unsigned k = 0;
    for (; k < n && k + kBlock <= in.capacity && out + k + kBlock <= limit; k += kBlock)
      std::memcpy(out + k, src + k, kBlock * sizeof(int));
    if (k < n)
      std::memcpy(out + k, src + k, (n - k) * sizeof(int));
  }

  unsigned B_ = 0;
  RawVector<int> ids_;
  RawVector<unsigned> ends_;
  std::vector<std::size_t> stepStart_;
};

} // namespace snn
