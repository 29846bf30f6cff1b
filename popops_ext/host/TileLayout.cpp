#include "TileLayout.hpp"

#include <algorithm>
#include <stdexcept>

#include <poplar/HalfFloat.hpp>

namespace snn {

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
  // Eight source rows at a time so each destination row gets a whole 8-wide run.
  const WT *src = matrix + std::size_t(layout.first(j)) * rows;
  for (unsigned n0 = 0; n0 < width; n0 += 8) {
    const unsigned nEnd = std::min(width, n0 + 8);
    for (unsigned i = 0; i < rows; ++i)
      for (unsigned n = n0; n < nEnd; ++n)
        b[std::size_t(i) * len + n] = src[std::size_t(n) * rows + i];
  }
}

void GradBlocks::allocate(const TileLayout &layout, unsigned j, unsigned rows) {
  blocks_[j].assign(std::size_t(rows) * layout.rowLength(j), 0.0f);
}

void GradBlocks::writeMatrix(const TileLayout &layout, unsigned j, unsigned rows,
                             float *matrix) const {
  const unsigned len = layout.rowLength(j), width = layout.width(j);
  const RawVector<float> &b = blocks_[j];
  float *dst = matrix + std::size_t(layout.first(j)) * rows;
  for (unsigned n = 0; n < width; ++n)
    for (unsigned i = 0; i < rows; ++i)
      dst[std::size_t(n) * rows + i] = b[std::size_t(i) * len + n];
}

template class TileBlocks<float>;
template class TileBlocks<half>;

} // namespace snn
