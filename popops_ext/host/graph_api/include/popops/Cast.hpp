// Host implementation of the part of popops/Cast.hpp that the op glue uses.
#pragma once

#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>

namespace popops {

// A new tensor mapped as src, holding src's values converted to dstType.
poplar::Tensor cast(poplar::Graph &graph, const poplar::Tensor &src, const poplar::Type &dstType,
                    poplar::program::Sequence &prog,
                    const poplar::DebugContext &debugContext = {});

} // namespace popops
