// Host implementation of the part of popops/DynamicSlice.hpp that the graph
// builders use. Offsets are read from the offset tensor when the program
// runs; an offset past the end of a dimension is an error (the SDK's default
// remapOutOfBoundIndices=false leaves it undefined on the device).
#pragma once

#include <cstddef>
#include <vector>

#include <poplar/Graph.hpp>
#include <poplar/OptionFlags.hpp>
#include <poplar/Program.hpp>

namespace popops {

// A tensor of `shape` laid out so that every slice along `dims` is spread
// over the tiles of the target (at least minGrainSize elements per tile).
poplar::Tensor createSliceableTensor(poplar::Graph &graph, const poplar::Type &type,
                                     const std::vector<std::size_t> &shape,
                                     const std::vector<std::size_t> &dims,
                                     const std::vector<std::size_t> &sizes,
                                     std::size_t minGrainSize = 0,
                                     const poplar::DebugContext &debugContext = {});

poplar::Tensor dynamicSlice(poplar::Graph &graph, const poplar::Tensor &t,
                            const poplar::Tensor &offset, const std::vector<std::size_t> &dims,
                            const std::vector<std::size_t> &sizes,
                            poplar::program::Sequence &prog,
                            const poplar::DebugContext &debugContext = {},
                            const poplar::OptionFlags &options = {});

void dynamicUpdate(poplar::Graph &graph, const poplar::Tensor &t, const poplar::Tensor &s,
                   const poplar::Tensor &offset, const std::vector<std::size_t> &dims,
                   const std::vector<std::size_t> &sizes, poplar::program::Sequence &prog,
                   const poplar::DebugContext &debugContext = {},
                   const poplar::OptionFlags &options = {});

} // namespace popops
