// The partition of a layer's neurons over tiles and the per-tile weight
// blocks: block j is [rows x rowLength(j)] with block[i][n] = W[first(j)+n][i],
// so a spike of input i reads one contiguous row of the tile's neurons.
// rowLength is the tile width padded to a multiple of 8 floats (zero-filled)
// for whole-vector loops.
#pragma once
#include <cstdint>
#include <vector>

#include "RawVector.hpp"

namespace snn {

class TileLayout {
public:
  // Throws std::invalid_argument unless starts is 0 = s0 < s1 < ... = numNeurons.
  TileLayout(const int32_t *starts, std::size_t numStarts, unsigned numNeurons);

  unsigned numTiles() const { return unsigned(first_.size() - 1); }
  unsigned first(unsigned j) const { return first_[j]; }
  unsigned width(unsigned j) const { return first_[j + 1] - first_[j]; }
  unsigned rowLength(unsigned j) const { return (width(j) + 7u) & ~7u; }
  unsigned maxRowLength() const;

private:
  std::vector<unsigned> first_;
};

// Per-tile blocks of a row-major [numNeurons x rows] matrix; converts once per call.
template <typename WT> class TileBlocks {
public:
  void build(const TileLayout &layout, unsigned j, const WT *matrix, unsigned rows);
  const WT *block(unsigned j) const { return blocks_[j].data(); }
  std::size_t blockSize(unsigned j) const { return blocks_[j].size(); }
  void resize(unsigned numTiles) { blocks_.resize(numTiles); }
  // Frees tile j's block once no step reads it: one copy of the weights in
  // blocks, not two with the caller's matrix, on a wide layer.
  void release(unsigned j) { RawVector<WT>().swap(blocks_[j]); }

private:
  std::vector<RawVector<WT>> blocks_;
};

// Float gradient blocks in the same layout, turned back into [numNeurons x rows].
class GradBlocks {
public:
  void allocate(const TileLayout &layout, unsigned j, unsigned rows);
  float *block(unsigned j) { return blocks_[j].data(); }
  std::size_t blockSize(unsigned j) const { return blocks_[j].size(); }
  void resize(unsigned numTiles) { blocks_.resize(numTiles); }
  void writeMatrix(const TileLayout &layout, unsigned j, unsigned rows, float *matrix) const;
  void release(unsigned j) { RawVector<float>().swap(blocks_[j]); }

private:
  std::vector<RawVector<float>> blocks_;
};

} // namespace snn
