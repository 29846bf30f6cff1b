// Inner loops over rows of a tile's weight block [numRows x rowLength].
// Neurons are processed in chunks of 8-float vectors held in registers
// across the (sparse) rows. The summation order of every neuron is the order
// of the listed ids, whatever the chunking.
#pragma once
#include "VectorOps.hpp"

namespace snn {

// Listed rows are scattered over the tile's block (in L2 at best), so the
// host fetches the row a few ids ahead; the IPU's tile memory needs nothing.
constexpr unsigned kPrefetchAhead = 6;

template <unsigned V, int ForWrite, typename T> inline void prefetchRow(const T *row) {
#if !defined(__IPU__)
  const char *p = reinterpret_cast<const char *>(row);
#pragma GCC unroll 8
  for (unsigned line = 0; line < (V * 8 * sizeof(T) + 63) / 64; ++line)
    __builtin_prefetch(p + 64 * line, ForWrite);
#else
  (void)row;
#endif
}

// V vectors of neurons starting at acc: acc += sum over the listed rows.
template <unsigned V, typename WT>
inline void addRowsChunk(float *__restrict acc, const WT *__restrict rows,
                         const int *__restrict ids, unsigned numIds, unsigned rowLength) {
  f32x8 a[V];
#pragma GCC unroll 8
  for (unsigned v = 0; v < V; ++v)
    a[v] = load8(acc + 8 * v);
  for (unsigned k = 0; k < numIds; ++k) {
    if (k + kPrefetchAhead < numIds)
      prefetchRow<V, 0>(rows + (unsigned long)(unsigned)ids[k + kPrefetchAhead] * rowLength);
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
  // The remaining whole vectors in one more pass over the ids, not one per vector.
  switch ((rowLength - c) / 8) {
  case 7: addRowsChunk<7>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 6: addRowsChunk<6>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 5: addRowsChunk<5>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 4: addRowsChunk<4>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 3: addRowsChunk<3>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 2: addRowsChunk<2>(acc + c, rows + c, ids, numIds, rowLength); break;
  case 1: addRowsChunk<1>(acc + c, rows + c, ids, numIds, rowLength); break;
  default: break;
  }
  c += (rowLength - c) / 8 * 8;
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
    if (k + kPrefetchAhead < numIds)
      prefetchRow<V, 1>(rows + (unsigned long)(unsigned)ids[k + kPrefetchAhead] * rowLength);
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
  switch ((rowLength - c) / 8) {
  case 7: scatterRowsChunk<7>(rows + c, g + c, ids, numIds, rowLength); break;
  case 6: scatterRowsChunk<6>(rows + c, g + c, ids, numIds, rowLength); break;
  case 5: scatterRowsChunk<5>(rows + c, g + c, ids, numIds, rowLength); break;
  case 4: scatterRowsChunk<4>(rows + c, g + c, ids, numIds, rowLength); break;
  case 3: scatterRowsChunk<3>(rows + c, g + c, ids, numIds, rowLength); break;
  case 2: scatterRowsChunk<2>(rows + c, g + c, ids, numIds, rowLength); break;
  case 1: scatterRowsChunk<1>(rows + c, g + c, ids, numIds, rowLength); break;
  default: break;
  }
  c += (rowLength - c) / 8 * 8;
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

// out[r] = sum_n rows[ids[r]][n] * g[n] for four listed rows at once: each
// load of g serves four rows, and two accumulators per row (even and odd
// vectors) keep eight independent chains in flight. (Prefetching the next
// rows here measured slower: whole rows are long, and four are read at once.)
template <typename WT>
inline void rowDot4(const WT *__restrict rows, const int *__restrict ids,
                    const float *__restrict g, unsigned rowLength, float *__restrict out) {
  const WT *__restrict r[4];
#pragma GCC unroll 4
  for (unsigned k = 0; k < 4; ++k)
    r[k] = rows + (unsigned long)(unsigned)ids[k] * rowLength;

  f32x8 even[4] = {}, odd[4] = {};
  unsigned c = 0;
  for (; c + 16 <= rowLength; c += 16) {
    const f32x8 g0 = load8(g + c), g1 = load8(g + c + 8);
#pragma GCC unroll 4
    for (unsigned k = 0; k < 4; ++k) {
      even[k] += load8(r[k] + c) * g0;
      odd[k] += load8(r[k] + c + 8) * g1;
    }
  }
  if (c + 8 <= rowLength) {
    const f32x8 g0 = load8(g + c);
#pragma GCC unroll 4
    for (unsigned k = 0; k < 4; ++k)
      even[k] += load8(r[k] + c) * g0;
    c += 8;
  }
#pragma GCC unroll 4
  for (unsigned k = 0; k < 4; ++k) {
    const f32x8 s = even[k] + odd[k];
    float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (unsigned n = c; n < rowLength; ++n)
      sum += float(r[k][n]) * g[n];
    out[k] = sum;
  }
}

} // namespace snn
