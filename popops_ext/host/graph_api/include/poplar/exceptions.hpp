// Host implementation of poplar/exceptions.hpp: the errors the host raises
// where the SDK's graph construction or engine compilation would.
#pragma once

#include <stdexcept>
#include <string>

namespace poplar {

struct poplar_error : std::runtime_error {
  explicit poplar_error(const std::string &s) : std::runtime_error(s) {}
};

// A field connected to a tensor of the wrong type or size, or not at all.
struct graph_connection_error : poplar_error {
  explicit graph_connection_error(const std::string &s) : poplar_error(s) {}
};

// A tensor operation given an impossible shape or index.
struct index_error : poplar_error {
  explicit index_error(const std::string &s) : poplar_error(s) {}
};

// The graph breaks a rule the device would enforce (mapping, memory, exchange).
struct graph_memory_allocation_error : poplar_error {
  explicit graph_memory_allocation_error(const std::string &s) : poplar_error(s) {}
};

struct graph_program_compilation_error : poplar_error {
  explicit graph_program_compilation_error(const std::string &s) : poplar_error(s) {}
};

struct invalid_option : poplar_error {
  explicit invalid_option(const std::string &s) : poplar_error(s) {}
};

} // namespace poplar
