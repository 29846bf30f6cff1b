// Host implementation of the part of popops/Reduce.hpp that the graph builders use.
#pragma once

#include <cstddef>
#include <vector>

#include <poplar/Graph.hpp>
#include <poplar/OptionFlags.hpp>
#include <poplar/Program.hpp>
#include <popops/Operation.hpp>

namespace popops {

struct ReduceParams {
  ReduceParams() = default;
  ReduceParams(popops::Operation op, bool update = false) : op(op), update(update) {}
  popops::Operation op = popops::Operation::ADD;
  bool update = false;
  bool useScale = false;
};

// Reduces `in` over `dims` (accumulating in float) into a new tensor of outType.
poplar::Tensor reduce(poplar::Graph &graph, const poplar::Tensor &in, const poplar::Type &outType,
                      const std::vector<std::size_t> &dims, ReduceParams params,
                      poplar::program::Sequence &prog,
                      const poplar::DebugContext &debugContext = {},
                      const poplar::OptionFlags &options = {});

} // namespace popops
