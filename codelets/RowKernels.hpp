// Inner loops over rows of a tile's weight block [numRows x rowLength].
// Neurons are processed in chunks of 8-float vectors held in registers
// across the (sparse) rows. The summation order of every neuron is the order
// of the listed ids, whatever the chunking.
#pragma once
#include "VectorOps.hpp"

namespace snn {

// V vectors of neurons starting at acc: acc += sum over the listed rows.
template <unsigned V, typename WT>
inline void addRowsChunk(float *__restrict acc, const WT *__restrict rows,
                         const int *__restrict ids, unsigned numIds, unsigned rowLength) {
  f32x8 a[V];
#pragma GCC unroll 8
  for (unsigned v = 0; v < V; ++v)
    a[v] = load8(acc + 8 * v);
  for (unsigned k = 0; k < numIds; ++k) {
    const WT *__restrict row = rows + (unsigned long)(unsigned)ids[k] * rowLength;
#pragma GCC unroll 8
    for (unsigned v = 0; v < V; ++v)
      a[v] += load8(row + 8 * v);
  }
#pragma GCC unroll 8
  for (unsigned v = 0; v < V; ++v)
    store8(acc + 8 * v, a[v]);
}

// acc[n] += sum_k rows[ids[k]][n]
template <typename WT>
inline void addRows(float *__restrict acc, const WT *__restrict rows,
                    const int *__restrict ids, unsigned numIds, unsigned rowLength) {
  if (numIds == 0)
    return;
  unsigned c = 0;
  for (; c + 64 <= rowLength; c += 64)
    addRowsChunk<8>(acc + c, rows + c, ids, numIds, rowLength);
  for (; c + 8 <= rowLength; c += 8)
    addRowsChunk<1>(acc + c, rows + c, ids, numIds, rowLength);
  for (; c < rowLength; ++c)
    for (unsigned k = 0; k < numIds; ++k)
      acc[c] += float(rows[(unsigned long)(unsigned)ids[k] * rowLength + c]);
}

template <unsigned V>
inline void scatterRowsChunk(float *__restrict rows, const float *__restrict g,
                             const int *__restrict ids, unsigned numIds, unsigned rowLength) {
  f32x8 gv[V];
#pragma GCC unroll 8
  for (unsigned v = 0; v < V; ++v)
    gv[v] = load8(g + 8 * v);
  for (unsigned k = 0; k < numIds; ++k) {
    float *__restrict row = rows + (unsigned long)(unsigned)ids[k] * rowLength;
#pragma GCC unroll 8
    for (unsigned v = 0; v < V; ++v)
      store8(row + 8 * v, load8(row + 8 * v) + gv[v]);
  }
}

// rows[ids[k]][n] += g[n] for every listed k
inline void scatterRows(float *__restrict rows, const float *__restrict g,
                        const int *__restrict ids, unsigned numIds, unsigned rowLength) {
  if (numIds == 0)
    return;
  unsigned c = 0;
  for (; c + 64 <= rowLength; c += 64)
    scatterRowsChunk<8>(rows + c, g + c, ids, numIds, rowLength);
  for (; c + 8 <= rowLength; c += 8)
    scatterRowsChunk<1>(rows + c, g + c, ids, numIds, rowLength);
  for (; c < rowLength; ++c)
    for (unsigned k = 0; k < numIds; ++k)
      rows[(unsigned long)(unsigned)ids[k] * rowLength + c] += g[c];
}

// sum_n row[n] * g[n] with four independent vector accumulators (for
// instruction-level parallelism) reduced in a fixed order.
template <typename WT>
inline float rowDot(const WT *__restrict row, const float *__restrict g, unsigned rowLength) {
  f32x8 a[4] = {};
  unsigned c = 0;
  for (; c + 32 <= rowLength; c += 32) {
#pragma GCC unroll 4
    for (unsigned v = 0; v < 4; ++v)
      a[v] += load8(row + c + 8 * v) * load8(g + c + 8 * v);
  }
  for (; c + 8 <= rowLength; c += 8)
    a[0] += load8(row + c) * load8(g + c);
  const f32x8 s = (a[0] + a[1]) + (a[2] + a[3]);
  float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; c < rowLength; ++c)
    sum += float(row[c]) * g[c];
  return sum;
}

} // namespace snn
