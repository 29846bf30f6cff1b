// The host's kernel for a step's input walked id by id (IdBuckets.hpp): each
// weight row read once and added to the currents of every sample that lists
// it. Host only: an IPU tile's block is in its own memory, where a walk of the
// samples' rows (SpikeMatmul) reads nothing twice from far away.
#pragma once
#include "RowKernels.hpp"

namespace snn {

template <unsigned V, typename WT>
inline void addBucketRowsChunk(float *__restrict acc, const WT *__restrict rows,
                               const int *__restrict ids, const unsigned *__restrict ends,
                               const int *__restrict entries, unsigned numIds,
                               unsigned rowLength) {
  unsigned e = 0;
  for (unsigned k = 0; k < numIds; ++k) {
    if (k + kPrefetchAhead < numIds)
      prefetchRow<linesOf<V, WT>(), 0>(rows +
                                       (unsigned long)(unsigned)ids[k + kPrefetchAhead] *
                                           rowLength);
    const WT *__restrict row = rows + (unsigned long)(unsigned)ids[k] * rowLength;
    f32x8 w[V];
#pragma GCC unroll 8
    for (unsigned v = 0; v < V; ++v)
      w[v] = load8(row + 8 * v);
    for (const unsigned end = ends[k]; e < end; ++e) {
      float *__restrict a = acc + (unsigned long)(unsigned)entries[e] * rowLength;
#pragma GCC unroll 8
      for (unsigned v = 0; v < V; ++v)
        store8(a + 8 * v, load8(a + 8 * v) + w[v]);
    }
  }
}

// acc[entries[e]][n] += rows[ids[k]][n] for bucket k's entries e (bucket k
// ends at ends[k]), the buckets in order: a host walk of a step's spikes id by
// id (IdBuckets.hpp), each row read once for all the samples that list it.
// Chunks of 8 vectors, the row's in registers, so that a chunk of every
// sample's currents stays in L1 while the rows stream past. Each element
// takes its rows in bucket order.
template <typename WT>
inline void addBucketRows(float *__restrict acc, const WT *__restrict rows,
                          const int *__restrict ids, const unsigned *__restrict ends,
                          const int *__restrict entries, unsigned numIds, unsigned rowLength) {
  unsigned c = forVectorChunks<8>(rowLength, [&](auto v, unsigned at) {
    addBucketRowsChunk<decltype(v)::count>(acc + at, rows + at, ids, ends, entries, numIds,
                                           rowLength);
  });
  for (; c < rowLength; ++c) {
    unsigned e = 0;
    for (unsigned k = 0; k < numIds; ++k) {
      const float w = float(rows[(unsigned long)(unsigned)ids[k] * rowLength + c]);
      for (; e < ends[k]; ++e)
        acc[(unsigned long)(unsigned)entries[e] * rowLength + c] += w;
    }
  }
}

} // namespace snn
