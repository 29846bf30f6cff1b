#include "TileLayout.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include <poplar/HalfFloat.hpp>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace snn {

namespace {
// out[c * outStride + r] = in[r * inStride + c] for an 8 x 8 float block.
// Both conversions between W and the tile blocks are transposes; element by
// element, one side is read or written a line per element (~9% of an
// L-config layer call went to them).
inline void transpose8(const float *in, std::size_t inStride, float *out,
                       std::size_t outStride) {
#if defined(__AVX__)
  __m256 r[8], t[8];
  for (unsigned k = 0; k < 8; ++k)
    r[k] = _mm256_loadu_ps(in + k * inStride);
  for (unsigned k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (unsigned k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (unsigned k = 0; k < 4; ++k) {
    _mm256_storeu_ps(out + k * outStride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(out + (k + 4) * outStride, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
#else
  for (unsigned rr = 0; rr < 8; ++rr)
    for (unsigned c = 0; c < 8; ++c)
      out[c * outStride + rr] = in[rr * inStride + c];
#endif
}

// out[c * outStride + r] = in[r * inStride + c] for r < numRows, c < numCols.
// The side in main memory (W or its gradient) is walked along its rows, eight
// rows at a time; the tile block side stays in cache between passes.
enum class Walk { InRows, OutRows };

template <typename T>
void transpose(const T *in, std::size_t inStride, T *out, std::size_t outStride,
               unsigned numRows, unsigned numCols, Walk walk) {
  unsigned rFull = 0, cFull = 0;
  if constexpr (std::is_same_v<T, float>) {
    rFull = numRows / 8 * 8;
    cFull = numCols / 8 * 8;
    auto block = [&](unsigned r0, unsigned c0) {
      transpose8(in + r0 * inStride + c0, inStride, out + c0 * outStride + r0, outStride);
    };
    if (walk == Walk::InRows) {
      for (unsigned r0 = 0; r0 < rFull; r0 += 8)
        for (unsigned c0 = 0; c0 < cFull; c0 += 8)
          block(r0, c0);
    } else {
      for (unsigned c0 = 0; c0 < cFull; c0 += 8)
        for (unsigned r0 = 0; r0 < rFull; r0 += 8)
          block(r0, c0);
    }
  }
  auto element = [&](unsigned r, unsigned c) {
    out[c * outStride + r] = in[r * inStride + c];
  };
  // What the 8 x 8 blocks left: whole rows below rFull, whole columns right of cFull.
  for (unsigned r = 0; r < rFull; ++r)
    for (unsigned c = cFull; c < numCols; ++c)
      element(r, c);
  for (unsigned r0 = rFull; r0 < numRows; r0 += 8) {
    const unsigned rEnd = std::min(numRows, r0 + 8);
    for (unsigned c = 0; c < numCols; ++c)
      for (unsigned r = r0; r < rEnd; ++r)
        element(r, c);
  }
}
} // namespace

TileLayout::TileLayout(const int32_t *starts, std::size_t numStarts, unsigned numNeurons) {
  if (numStarts < 2)
    throw std::invalid_argument("tile_starts needs at least two entries");
  if (starts[0] != 0 || starts[numStarts - 1] != int32_t(numNeurons))
    throw std::invalid_argument("tile_starts must begin at 0 and end at out_features");
  first_.resize(numStarts);
  for (std::size_t j = 0; j < numStarts; ++j) {
    if (j > 0 && starts[j] <= starts[j - 1])
      throw std::invalid_argument("tile_starts must be strictly increasing");
    first_[j] = unsigned(starts[j]);
  }
}

unsigned TileLayout::maxRowLength() const {
  unsigned m = 0;
  for (unsigned j = 0; j < numTiles(); ++j)
    m = std::max(m, rowLength(j));
  return m;
}

template <typename WT>
void TileBlocks<WT>::build(const TileLayout &layout, unsigned j, const WT *matrix,
                           unsigned rows) {
  const unsigned len = layout.rowLength(j), width = layout.width(j);
  RawVector<WT> &b = blocks_[j];
  if (b.size() != std::size_t(rows) * len)
    b.resize(std::size_t(rows) * len); // every element is written below
  if (len != width)
    for (unsigned i = 0; i < rows; ++i)
      for (unsigned n = width; n < len; ++n)
        b[std::size_t(i) * len + n] = WT(0);
  transpose(matrix + std::size_t(layout.first(j)) * rows, rows, b.data(), len, width, rows,
            Walk::InRows);
}

void GradBlocks::allocate(const TileLayout &layout, unsigned j, unsigned rows) {
  blocks_[j].assign(std::size_t(rows) * layout.rowLength(j), 0.0f);
}

void GradBlocks::writeMatrix(const TileLayout &layout, unsigned j, unsigned rows,
                             float *matrix) const {
  const unsigned len = layout.rowLength(j), width = layout.width(j);
  transpose(blocks_[j].data(), len, matrix + std::size_t(layout.first(j)) * rows, rows, rows,
            width, Walk::OutRows);
}

template class TileBlocks<float>;
template class TileBlocks<half>;

} // namespace snn
