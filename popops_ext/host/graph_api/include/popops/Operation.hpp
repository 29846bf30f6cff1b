// Host implementation of popops/Operation.hpp: reduction operations.
#pragma once

namespace popops {

enum class Operation { ADD, MUL, MIN, MAX, LOGICAL_AND, LOGICAL_OR, SQUARE_ADD, LOG_ADD };

} // namespace popops
