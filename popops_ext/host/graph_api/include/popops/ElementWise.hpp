// Host implementation of the part of popops/ElementWise.hpp that the graph
// builders use. As in the SDK, the second operand of an in-place operation
// may have fewer dimensions or dimensions of 1 where it is broadcast.
#pragma once

#include <vector>

#include <poplar/Graph.hpp>
#include <poplar/OptionFlags.hpp>
#include <poplar/Program.hpp>
#include <popops/Expr.hpp>

namespace popops {

poplar::Tensor map(poplar::Graph &graph, const expr::Expr &expr,
                   const std::vector<poplar::Tensor> &ts, poplar::program::Sequence &prog,
                   const poplar::DebugContext &debugContext = {},
                   const poplar::OptionFlags &options = {});

void addInPlace(poplar::Graph &graph, const poplar::Tensor &A, const poplar::Tensor &B,
                poplar::program::Sequence &prog, const poplar::DebugContext &debugContext = {},
                const poplar::OptionFlags &options = {});

void subInPlace(poplar::Graph &graph, const poplar::Tensor &A, const poplar::Tensor &B,
                poplar::program::Sequence &prog, const poplar::DebugContext &debugContext = {},
                const poplar::OptionFlags &options = {});

} // namespace popops
