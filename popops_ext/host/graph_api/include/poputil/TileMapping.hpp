// Host implementation of the part of poputil/TileMapping.hpp that the graph
// builders use.
#pragma once

#include <poplar/Graph.hpp>

namespace poputil {

// Spreads t over the tiles from tile 0: whole grains of the type's vector
// width, at least 128 bytes per tile, as few tiles as that allows.
void mapTensorLinearly(poplar::Graph &graph, const poplar::Tensor &t);

} // namespace poputil
