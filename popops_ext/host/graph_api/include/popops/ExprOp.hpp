// Host implementation of the part of popops/ExprOp.hpp that the host's
// expressions need: the operator codes.
#pragma once

namespace popops {
namespace expr {

enum class BinaryOpType {
  ADD,
  SUBTRACT,
  MULTIPLY,
  DIVIDE,
  EQUAL,
  NOT_EQUAL,
  LESS_THAN,
  LESS_THAN_EQUAL,
  GREATER_THAN,
  GREATER_THAN_EQUAL,
};

} // namespace expr
} // namespace popops
