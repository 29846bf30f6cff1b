// The host's kernels for a step's input walked id by id (IdBuckets.hpp): each
// weight row read once for every sample that lists it. Host only: an IPU
// tile's block is in its own memory, where a walk of the samples' rows
// (SpikeMatmul, InputSpikeGrad) reads nothing twice from far away.
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

// out[k] = sum_n row[n] * g[k][n]: one weight row against R dL/dI rows, each
// sum with rowDotsOfList's arithmetic (finishRowDots) (the same sum as rowDots' for that row
// and g), each load of the row serving R dL/dI rows.
template <unsigned R, typename WT>
inline void rowDotsOfRow(const WT *__restrict row, const float *const *g, unsigned rowLength,
                         float *__restrict out) {
  f32x8 a[R] = {};
  unsigned c = 0;
  for (; c + 8 <= rowLength; c += 8) {
    const f32x8 w = load8(row + c);
#pragma GCC unroll 8
    for (unsigned k = 0; k < R; ++k)
      a[k] += w * load8(g[k] + c);
  }
  finishRowDots<R>(
      a, c, rowLength, [&](unsigned) { return row; }, [&](unsigned k) { return g[k]; }, out);
}

// out[k] = sum_n w[k][n] * g[k][n] for R (weight row, dL/dI row) pairs, with
// rowDotsOfList's arithmetic. Four pairs hold eight row pointers in registers: two
// loads a multiply-add, so the loads, not the four chains, set the pace.
template <unsigned R, typename WT>
inline void rowDotsOfPairs(const WT *const *w, const float *const *g, unsigned rowLength,
                           float *__restrict out) {
  f32x8 a[R] = {};
  unsigned c = 0;
  for (; c + 8 <= rowLength; c += 8) {
#pragma GCC unroll 4
    for (unsigned k = 0; k < R; ++k)
      a[k] += load8(w[k] + c) * load8(g[k] + c);
  }
  finishRowDots<R>(
      a, c, rowLength, [&](unsigned k) { return w[k]; }, [&](unsigned k) { return g[k]; }, out);
}

} // namespace snn
