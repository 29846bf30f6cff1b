// "[2, 3]": a tensor's shape in an error message, for the ops' glue and the host
// implementation of the Poplar API alike.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace snn {

inline std::string shapeString(const std::vector<std::size_t> &shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace snn
