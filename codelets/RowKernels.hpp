// Inner loops over rows of a tile's weight block [numRows x rowLength].
// Neurons are processed in chunks of 8-float vectors held in registers
// across the (sparse) rows. The summation order of every neuron is the order
// of the listed ids, whatever the chunking.
#pragma once
#include <cstddef>

#include "VectorOps.hpp"

namespace snn {

// Listed rows are scattered over the tile's block (in L2 at best), so the
// host fetches the row a few ids ahead; the IPU's tile memory needs nothing.
constexpr unsigned kPrefetchAhead = 6;

// The cache lines of a chunk of V 8-element vectors.
template <unsigned V, typename T> constexpr unsigned linesOf() {
  return (V * 8 * sizeof(T) + 63) / 64;
}

template <unsigned Lines, int ForWrite, typename T> inline void prefetchRow(const T *row) {
#if !defined(__IPU__)
  const char *p = reinterpret_cast<const char *>(row);
#pragma GCC unroll 8
  for (unsigned line = 0; line < Lines; ++line)
    __builtin_prefetch(p + 64 * line, ForWrite);
#else
  (void)row;
#endif
}

template <unsigned V> struct Vectors {
  static constexpr unsigned count = V;
};

// Walks a row of rowLength floats in chunks of whole 8-float vectors: chunks
// of MaxV vectors, then the remaining whole vectors as one more chunk (one
// more pass over the ids, not one per vector). Calls chunk(Vectors<V>{},
// offset) and returns where the scalar tail starts (cases above MaxV - 1 are
// never reached). Always inlined: as a call it passed the chunk's arguments
// through memory, on every kernel call.
template <unsigned MaxV, typename Chunk>
inline __attribute__((always_inline)) unsigned forVectorChunks(unsigned rowLength, Chunk &&chunk) {
  static_assert(MaxV == 8 || MaxV == 16, "chunks of 8 or 16 vectors");
  unsigned c = 0;
  for (; c + 8 * MaxV <= rowLength; c += 8 * MaxV)
    chunk(Vectors<MaxV>{}, c);
  switch ((rowLength - c) / 8) {
  case 15: chunk(Vectors<15>{}, c); break;
  case 14: chunk(Vectors<14>{}, c); break;
  case 13: chunk(Vectors<13>{}, c); break;
  case 12: chunk(Vectors<12>{}, c); break;
  case 11: chunk(Vectors<11>{}, c); break;
  case 10: chunk(Vectors<10>{}, c); break;
  case 9: chunk(Vectors<9>{}, c); break;
  case 8: chunk(Vectors<8>{}, c); break;
  case 7: chunk(Vectors<7>{}, c); break;
  case 6: chunk(Vectors<6>{}, c); break;
  case 5: chunk(Vectors<5>{}, c); break;
  case 4: chunk(Vectors<4>{}, c); break;
  case 3: chunk(Vectors<3>{}, c); break;
  case 2: chunk(Vectors<2>{}, c); break;
  case 1: chunk(Vectors<1>{}, c); break;
  default: break;
  }
  return c + (rowLength - c) / 8 * 8;
}

// V vectors of neurons of each sample: acc[b] (+)= the sum of sample b's
// listed rows, for the samples whose lists follow one another in ids
// (sample b's are ids[ends[b-1], ends[b]), ends[-1] = 0). Walking one list
// of all samples, rows are fetched kPrefetchAhead ids ahead across the
// samples' boundaries: a sample adds a few rows at low activity, fewer than
// the distance that hides a row's read from L2. (Only the first line of a
// row is fetched: the hardware follows on with the rest.)
template <bool Accumulate, unsigned V, typename WT>
inline void addRowsChunk(float *__restrict acc, const WT *__restrict rows,
                         const int *__restrict ids, const unsigned *__restrict ends,
                         unsigned numSamples, unsigned rowLength) {
  const unsigned total = ends[numSamples - 1];
  unsigned k = 0;
  for (unsigned b = 0; b < numSamples; ++b, acc += rowLength) {
    f32x8 a[V];
#pragma GCC unroll 16
    for (unsigned v = 0; v < V; ++v)
      a[v] = Accumulate ? load8(acc + 8 * v) : f32x8{};
    for (const unsigned end = ends[b]; k < end; ++k) {
      if (k + kPrefetchAhead < total)
        prefetchRow<1, 0>(rows + (unsigned long)(unsigned)ids[k + kPrefetchAhead] * rowLength);
      const WT *__restrict row = rows + (unsigned long)(unsigned)ids[k] * rowLength;
#pragma GCC unroll 16
      for (unsigned v = 0; v < V; ++v)
        a[v] += load8(row + 8 * v);
    }
#pragma GCC unroll 16
    for (unsigned v = 0; v < V; ++v)
      store8(acc + 8 * v, a[v]);
  }
}

// acc[b][n] += sum over sample b's listed k of rows[ids[k]][n] (Accumulate),
// or acc[b][n] = that sum; acc is [numSamples x rowLength]. Chunks of up to
// 16 vectors (128 neurons: all 16 AVX registers hold accumulators, the rows
// are read as memory operands), so a host tile's row is one pass over the
// ids. One call for a step's samples over one dense run of their ids, not
// one call per sample over the [T, B, K] list: 1.12-1.24x faster at 0.5%
// activity, 1.02-1.06x with the host's repack of the list (StepLists.hpp)
// counted in, as the repack was before it became one pass (38 -> 23 us).
template <bool Accumulate, typename WT>
inline void addRows(float *__restrict acc, const WT *__restrict rows,
                    const int *__restrict ids, const unsigned *__restrict ends,
                    unsigned numSamples, unsigned rowLength) {
  if (numSamples == 0 || (Accumulate && ends[numSamples - 1] == 0))
    return;
  unsigned c = forVectorChunks<16>(rowLength, [&](auto v, unsigned at) {
    addRowsChunk<Accumulate, decltype(v)::count>(acc + at, rows + at, ids, ends, numSamples,
                                                 rowLength);
  });
  for (; c < rowLength; ++c) {
    unsigned k = 0;
    for (unsigned b = 0; b < numSamples; ++b) {
      float *out = acc + std::size_t(b) * rowLength + c;
      float sum = Accumulate ? *out : 0.0f;
      for (; k < ends[b]; ++k)
        sum += float(rows[(unsigned long)(unsigned)ids[k] * rowLength + c]);
      *out = sum;
    }
  }
}

template <unsigned V>
inline void scatterRowsChunk(float *__restrict rows, const float *__restrict g,
                             const int *__restrict ids, unsigned numIds, unsigned rowStride) {
  f32x8 gv[V];
#pragma GCC unroll 8
  for (unsigned v = 0; v < V; ++v)
    gv[v] = load8(g + 8 * v);
  for (unsigned k = 0; k < numIds; ++k) {
    if (k + kPrefetchAhead < numIds)
      prefetchRow<linesOf<V, float>(), 1>(rows +
                                          (unsigned long)(unsigned)ids[k + kPrefetchAhead] *
                                              rowStride);
    float *__restrict row = rows + (unsigned long)(unsigned)ids[k] * rowStride;
#pragma GCC unroll 8
    for (unsigned v = 0; v < V; ++v)
      store8(row + 8 * v, load8(row + 8 * v) + gv[v]);
  }
}

// rows[ids[k]][n] += g[n] for every listed k and n < length, in rows rowStride
// floats apart (length < rowStride: a worker's share of the columns). Every
// element takes its ids' additions in list order, whatever the share.
inline void scatterRows(float *__restrict rows, const float *__restrict g,
                        const int *__restrict ids, unsigned numIds, unsigned rowStride,
                        unsigned length) {
  if (numIds == 0 || length == 0)
    return;
  unsigned c = forVectorChunks<8>(length, [&](auto v, unsigned at) {
    scatterRowsChunk<decltype(v)::count>(rows + at, g + at, ids, numIds, rowStride);
  });
  for (; c < length; ++c)
    for (unsigned k = 0; k < numIds; ++k)
      rows[(unsigned long)(unsigned)ids[k] * rowStride + c] += g[c];
}

// r[k] = the start of listed row ids[k], k < R.
template <unsigned R, typename WT>
inline void listedRows(const WT *rows, const int *ids, unsigned rowLength, const WT **r) {
#pragma GCC unroll 8
  for (unsigned k = 0; k < R; ++k)
    r[k] = rows + (unsigned long)(unsigned)ids[k] * rowLength;
}

// acc[n] = acc[n] * scale (First) + sum over k < R of scales[k] * r[k][n],
// for the whole vectors of n < length: R rows streamed side by side.
template <unsigned R, bool First, typename WT>
inline void scaleAddRowGroup(float *__restrict acc, float scale, const WT *const *r,
                             const float *__restrict scales, unsigned length) {
  f32x8 s[R];
#pragma GCC unroll 8
  for (unsigned k = 0; k < R; ++k)
    s[k] = f32x8{} + scales[k];
  for (unsigned c = 0; c + 8 <= length; c += 8) {
    f32x8 a = load8(acc + c);
    if (First)
      a *= scale;
#pragma GCC unroll 8
    for (unsigned k = 0; k < R; ++k)
      a += s[k] * load8(r[k] + c);
    store8(acc + c, a);
  }
}

template <unsigned R, typename WT>
inline void scaleAddRowGroupOf(float *acc, float scale, bool first, const WT *rows,
                               const int *ids, const float *scales, unsigned rowStride,
                               unsigned length) {
  const WT *r[R];
  listedRows<R>(rows, ids, rowStride, r);
  if (first)
    scaleAddRowGroup<R, true>(acc, scale, r, scales, length);
  else
    scaleAddRowGroup<R, false>(acc, scale, r, scales, length);
}

// acc[n] = scale * acc[n] + sum over k of scales[k] * rows[ids[k]][n], for n <
// length, in rows rowStride elements apart, added in list order (eight rows
// streamed at a time). Each element's arithmetic depends only on whether it
// lies in the whole 8-float vectors or the scalar tail of `length`, so a
// caller that cuts a row into parts of whole vectors (the tail in the last
// part) gets the same sums as one call over the row.
template <typename WT>
inline void scaleAddRows(float *__restrict acc, float scale, const WT *__restrict rows,
                         const int *__restrict ids, const float *__restrict scales,
                         unsigned numIds, unsigned rowStride, unsigned length) {
  unsigned k = 0;
  bool first = true;
  for (; k + 8 <= numIds; k += 8, first = false)
    scaleAddRowGroupOf<8>(acc, scale, first, rows, ids + k, scales + k, rowStride, length);
  if (k + 4 <= numIds) {
    scaleAddRowGroupOf<4>(acc, scale, first, rows, ids + k, scales + k, rowStride, length);
    k += 4;
    first = false;
  }
  if (k + 2 <= numIds) {
    scaleAddRowGroupOf<2>(acc, scale, first, rows, ids + k, scales + k, rowStride, length);
    k += 2;
    first = false;
  }
  if (k < numIds) {
    scaleAddRowGroupOf<1>(acc, scale, first, rows, ids + k, scales + k, rowStride, length);
    first = false;
  }
  if (first) // no rows: the scaling alone
    for (unsigned c = 0; c + 8 <= length; c += 8)
      store8(acc + c, load8(acc + c) * scale);
  for (unsigned c = length / 8 * 8; c < length; ++c) {
    float sum = acc[c] * scale;
    for (unsigned m = 0; m < numIds; ++m)
      sum += scales[m] * float(rows[(unsigned long)(unsigned)ids[m] * rowStride + c]);
    acc[c] = sum;
  }
}

// {sum of a[k]'s lanes} for k = 0..7, as one vector: on the host a transpose
// by horizontal adds (9 instructions for 8 rows instead of ~8 per row).
inline f32x8 laneSums8(const f32x8 *a) {
#if defined(__AVX__) && !defined(__IPU__)
  const __m256 t0 = _mm256_hadd_ps((__m256)a[0], (__m256)a[1]);
  const __m256 t1 = _mm256_hadd_ps((__m256)a[2], (__m256)a[3]);
  const __m256 t2 = _mm256_hadd_ps((__m256)a[4], (__m256)a[5]);
  const __m256 t3 = _mm256_hadd_ps((__m256)a[6], (__m256)a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return (f32x8)_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                              _mm256_permute2f128_ps(u0, u1, 0x31));
#else
  f32x8 out;
  for (unsigned k = 0; k < 8; ++k)
    out[k] = ((a[k][0] + a[k][1]) + (a[k][2] + a[k][3])) +
             ((a[k][4] + a[k][5]) + (a[k][6] + a[k][7]));
  return out;
#endif
}

// The sum of a's lanes, in laneSums8's order.
inline float laneSum(const f32x8 a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// sums[k] = the sum of a[k]'s lanes, k < R, in one order whatever R: eight at
// once by laneSums8's transpose, fewer one by one.
template <unsigned R> inline void laneSumsOf(const f32x8 *a, float *sums) {
  if constexpr (R == 8) {
    const f32x8 s = laneSums8(a);
#pragma GCC unroll 8
    for (unsigned k = 0; k < R; ++k)
      sums[k] = s[k];
  } else {
#pragma GCC unroll 8
    for (unsigned k = 0; k < R; ++k)
      sums[k] = laneSum(a[k]);
  }
}

// out[k] = the sum of a[k]'s lanes (laneSumsOf), then row(k)[n] * grad(k)[n]
// added for n in [c, rowLength): the end every dot product of a list entry
// shares, whichever of its weight row and dL/dI row the vector loop held, so
// that every entry's sum has one arithmetic.
template <unsigned R, typename RowOf, typename GradOf>
inline void finishRowDots(const f32x8 *a, unsigned c, unsigned rowLength, RowOf &&row,
                          GradOf &&grad, float *__restrict out) {
  float sums[R];
  laneSumsOf<R>(a, sums);
#pragma GCC unroll 8
  for (unsigned k = 0; k < R; ++k) {
    const auto *w = row(k);
    const float *g = grad(k);
    float sum = sums[k];
    for (unsigned n = c; n < rowLength; ++n)
      sum += float(w[n]) * g[n];
    out[k] = sum;
  }
}

// out[k] = sum_n rows[ids[k]][n] * g[n] for R <= 8 listed rows: one
// accumulator a row (eight independent chains at R = 8), each load of g
// serving R rows.
template <unsigned R, typename WT>
inline void rowDotsOfList(const WT *__restrict rows, const int *__restrict ids,
                          const float *__restrict g, unsigned rowLength, float *__restrict out) {
  const WT *r[R];
  listedRows<R>(rows, ids, rowLength, r);
  f32x8 a[R] = {};
  unsigned c = 0;
  for (; c + 8 <= rowLength; c += 8) {
    const f32x8 gv = load8(g + c);
#pragma GCC unroll 8
    for (unsigned k = 0; k < R; ++k)
      a[k] += load8(r[k] + c) * gv;
  }
  finishRowDots<R>(
      a, c, rowLength, [&](unsigned k) { return r[k]; }, [&](unsigned) { return g; }, out);
}

// out[k] = sum_n rows[ids[k]][n] * g[n] for the n listed rows: eight at a time,
// then four, two and one. Every entry's sum has one arithmetic (one
// accumulator, the 8-float vectors in order, the lanes reduced
// ((0+1)+(2+3))+((4+5)+(6+7)), the scalar tail last), so it depends only on
// its weight row and g, not on where the entry falls in its list: a list cut
// into ranges (InputSpikeGradRange) and the host's walk of a step's entries
// id by id (IdBuckets.hpp) give the same sums.
template <typename WT>
inline void rowDots(const WT *rows, const int *ids, const float *g, unsigned rowLength,
                    float *out, unsigned n) {
  unsigned k = 0;
  for (; k + 8 <= n; k += 8)
    rowDotsOfList<8>(rows, ids + k, g, rowLength, out + k);
  if (k + 4 <= n) {
    rowDotsOfList<4>(rows, ids + k, g, rowLength, out + k);
    k += 4;
  }
  if (k + 2 <= n) {
    rowDotsOfList<2>(rows, ids + k, g, rowLength, out + k);
    k += 2;
  }
  if (k < n)
    rowDotsOfList<1>(rows, ids + k, g, rowLength, out + k);
}

} // namespace snn
