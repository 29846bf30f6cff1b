// Host implementation of the part of poputil/Util.hpp that the graph builders use.
#pragma once

#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/TensorCloneMethod.hpp>

namespace poputil {

// A copy of `in` (a clone mapped as `in`, and a Copy into it appended to p).
poplar::Tensor duplicate(poplar::Graph &graph, const poplar::Tensor &in,
                         poplar::program::Sequence &p,
                         const poplar::DebugContext &debugContext = {},
                         poplar::TensorCloneMethod method =
                             poplar::TensorCloneMethod::PRESERVE_ORDER_UNLESS_ALIASES);

} // namespace poputil
