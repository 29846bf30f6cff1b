// A step's list entries regrouped by input id: for every id listed in any of a
// segment's rows (one step's samples, or a sample group's), the rows that list
// it, in row order; the ids ascending. Where an id is listed in several
// samples of a step, a kernel that walks the buckets reads its weight row (or
// writes its dL/dW row) once for all of them instead of once per sample, and
// walks the rows in address order. Where ids rarely repeat within a step (low
// activity) the regrouping buys nothing, and a segment keeps its rows' order
// (`bucketed` false).
//
// Walking the buckets, a row of dL/dW takes its samples' additions in row
// order, as a walk of the rows does; a sample's currents take their rows in id
// order, which is the list's order where every row ascends (`ascendingRows`
// asks for that, and leaves a segment with a row that does not unbucketed).
// So the results are the same bit for bit whichever walk is taken.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "LayerViews.hpp"
#include "RawVector.hpp"
#include "ThreadPool.hpp"
#include "TilePartition.hpp"
#include "plan/Target.hpp"

namespace snn {

// When a segment is walked by buckets. auto: where its entries are at least
// twice its distinct ids (each id's row then read once for two entries or
// more), on tiles of rows at least 64 floats long (a readout's rows of a few
// neurons are cheap to read again, and a walk of the rows keeps each sample's
// sums in registers where a walk of the buckets reads and writes them once an
// entry) whose block is beyond the L2 (appliesTo). Nor is a call's list
// looked at where its segments list fewer
// entries than their id range on average: random ids would then repeat 1.6
// times a step at most, and sorting them would cost the call more than it
// could buy. The environment's SNN_IPU_ID_BUCKETS=always|never|auto
// overrides all of it, so that tests can take both walks on any host; read at
// every call.
struct BucketPolicy {
  bool enabled = true;
  bool forced = false; // always: every segment with an entry, any tile
  double minReuse = 2;
  // dL/dx's walk shares a weight row's loads among eight dL/dI rows; an id's
  // last few entries go in (weight row, dL/dI row) pairs that load both, so it
  // needs more entries an id to pay (measured: 3.3 did not, 6 did).
  double minInputGradReuse = 4;
  double minFill = 1;
  unsigned minRowLength = 64;

  // Whether a layer whose widest tile has rows of maxRowLength and a block of
  // blockBytes may walk by ids: the walk saves reads of rows from L3, so it pays
  // only where the rows would come from there, blocks over `l2Times` the L2
  // (dL/dW: once; the forward and dL/dx, whose row walks keep each sample's
  // sums in registers where the walk by ids reads and writes them once an
  // entry: twice).
  bool appliesTo(unsigned maxRowLength, std::uint64_t blockBytes, unsigned l2Times) const {
    return enabled && maxRowLength >= minRowLength &&
           (forced || blockBytes > l2Times * plan::hostL2Bytes());
  }
};

inline BucketPolicy bucketPolicy() {
  BucketPolicy p;
  const char *mode = std::getenv("SNN_IPU_ID_BUCKETS");
  if (!mode || !*mode || std::strcmp(mode, "auto") == 0)
    return p;
  if (std::strcmp(mode, "never") == 0) {
    p.enabled = false;
  } else if (std::strcmp(mode, "always") == 0) {
    p.forced = true;
    p.minReuse = 0;
    p.minInputGradReuse = 0;
    p.minFill = 0;
    p.minRowLength = 0;
  } else {
    throw std::invalid_argument(std::string("SNN_IPU_ID_BUCKETS is '") + mode +
                                "'; expected auto, always or never");
  }
  return p;
}

class IdBuckets {
public:
  struct Segment {
    bool bucketed = false;
    unsigned numIds = 0;                 // distinct ids (bucketed only)
    const int32_t *ids = nullptr;        // [numIds]: the buckets' ids, ascending
    const unsigned *ends = nullptr;      // [numIds]: bucket k's entries end at ends[k]
    const int32_t *entries = nullptr;    // each entry's row in the segment, bucket after bucket
    const uint32_t *positions = nullptr; // each entry's place in its row's list (withPositions)
  };

  // Segment s covers rows [firstRow(s), firstRow(s) + rowsOf(s)) of a list;
  // count(row) is how many of row's entries take part, ids(row) where they are
  // (each below numIdValues); a segment is bucketed where its entries are at
  // least minReuse times its distinct ids. withPositions: keep each entry's
  // place in its row's list too.
  template <typename FirstRow, typename RowsOf, typename Ids, typename Count>
  void build(const BucketPolicy &policy, double minReuse, std::size_t numSegments,
             unsigned numIdValues, unsigned numThreads, bool ascendingRows, bool withPositions,
             FirstRow &&firstRow, RowsOf &&rowsOf, Ids &&ids, Count &&count) {
    minRowLength_ = policy.minRowLength;
    segStart_.assign(numSegments + 1, 0);
    for (std::size_t s = 0; s < numSegments; ++s) {
      std::size_t m = 0;
      for (unsigned r = 0; r < rowsOf(s); ++r)
        m += count(firstRow(s) + r);
      segStart_[s + 1] = segStart_[s] + m;
    }
    const std::size_t total = segStart_[numSegments];
    bucketed_.assign(numSegments, 0);
    numIds_.assign(numSegments, 0);
    if (double(total) < policy.minFill * double(numIdValues) * double(numSegments) ||
        total == 0)
      return;
    ids_.resize(total);
    ends_.resize(total);
    entries_.resize(total);
    positions_.resize(withPositions ? total : 0);
    ThreadPool::instance().run(
        effectiveThreads(numThreads, numSegments), [&](unsigned thread, unsigned team) {
          // slot[id]: the id's bucket in the segment being built, -1 when none.
          std::vector<int32_t> slot(numIdValues, -1);
          std::vector<unsigned> fill;
          std::vector<int32_t> sorted;
          const auto share = threadShare(numSegments, thread, team);
          for (std::size_t s = share.first; s < share.second; ++s) {
            const std::size_t at = segStart_[s], m = segStart_[s + 1] - at;
            int32_t *bucketIds = ids_.data() + at;
            unsigned *ends = ends_.data() + at;
            unsigned d = 0;
            bool ascending = true;
            const std::size_t row0 = firstRow(s);
            const unsigned rows = rowsOf(s);
            // Each id's entries, its bucket numbered in the order first met.
            for (unsigned r = 0; r < rows; ++r) {
              const int32_t *list = ids(row0 + r);
              const unsigned n = count(row0 + r);
              for (unsigned k = 0; k < n; ++k) {
                ascending &= k == 0 || list[k] >= list[k - 1];
                int32_t &sl = slot[unsigned(list[k])];
                if (sl < 0) {
                  sl = int32_t(d);
                  bucketIds[d] = list[k];
                  ends[d++] = 0;
                }
                ++ends[sl];
              }
            }
            if (double(m) >= minReuse * d && d != 0 && (ascending || !ascendingRows)) {
              bucketed_[s] = 1;
              numIds_[s] = d;
              // The buckets renumbered by ascending id: a scan of the id range
              // where the segment lists a good part of it, a sort otherwise.
              sorted.clear();
              if (std::size_t(d) * 16 >= numIdValues) {
                for (unsigned id = 0; id < numIdValues; ++id)
                  if (slot[id] >= 0)
                    sorted.push_back(int32_t(id));
              } else {
                sorted.assign(bucketIds, bucketIds + d);
                std::sort(sorted.begin(), sorted.end());
              }
              fill.resize(d);
              for (unsigned k = 0; k < d; ++k)
                fill[k] = ends[slot[unsigned(sorted[k])]];
              unsigned running = 0;
              for (unsigned k = 0; k < d; ++k) {
                bucketIds[k] = sorted[k];
                slot[unsigned(sorted[k])] = int32_t(k);
                const unsigned size = fill[k];
                fill[k] = running;
                running += size;
                ends[k] = running;
              }
              int32_t *entries = entries_.data() + at;
              uint32_t *positions = withPositions ? positions_.data() + at : nullptr;
              for (unsigned r = 0; r < rows; ++r) {
                const int32_t *list = ids(row0 + r);
                for (unsigned k = 0, n = count(row0 + r); k < n; ++k) {
                  const unsigned e = fill[unsigned(slot[unsigned(list[k])])]++;
                  entries[e] = int32_t(r);
                  if (positions)
                    positions[e] = k;
                }
              }
            }
            for (unsigned k = 0; k < d; ++k)
              slot[unsigned(bucketIds[k])] = -1;
          }
        });
  }

  // build() over a list's spikes, a segment per (step, sample group): segment
  // t * groups.count() + g holds step t's rows of group g.
  void buildSpikes(const BucketPolicy &policy, const SpikeListView &list, unsigned steps,
                   const SampleGroups &groups, unsigned numIdValues, unsigned numThreads,
                   bool ascendingRows) {
    const unsigned B = groups.batch(), G = groups.count();
    build(
        policy, policy.minReuse, std::size_t(steps) * G, numIdValues, numThreads, ascendingRows,
        false, [&](std::size_t s) { return (s / G) * B + groups.first(unsigned(s % G)); },
        [&](std::size_t s) { return groups.size(unsigned(s % G)); },
        [&](std::size_t row) { return list.idsAt(row); },
        [&](std::size_t row) { return list.spikesAt(row); });
  }

  // How many segments the last build bucketed.
  std::size_t bucketedSegments() const {
    return std::size_t(std::count(bucketed_.begin(), bucketed_.end(), uint8_t(1)));
  }

  // Segment s of the last build, for a tile of rows rowLength long; not
  // bucketed when nothing was built.
  Segment segment(std::size_t s, unsigned rowLength) const {
    if (segStart_.empty() || rowLength < minRowLength_ || !bucketed_[s])
      return {};
    const std::size_t at = segStart_[s];
    return {true,
            numIds_[s],
            ids_.data() + at,
            ends_.data() + at,
            entries_.data() + at,
            positions_.empty() ? nullptr : positions_.data() + at};
  }

private:
  unsigned minRowLength_ = 0;
  std::vector<std::size_t> segStart_;
  std::vector<uint8_t> bucketed_;
  std::vector<unsigned> numIds_;
  RawVector<int32_t> ids_;
  RawVector<unsigned> ends_;
  RawVector<int32_t> entries_;
  RawVector<uint32_t> positions_;
};

} // namespace snn
