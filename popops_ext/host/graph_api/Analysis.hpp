// What a graph costs on its tiles, shared by the Engine's memory check and
// the graph report: bytes of variables and vertex state per tile, and a walk
// over a program tree that counts how often each node runs.
#pragma once

#include "Model.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace snn {
namespace hostgraph {

struct TileUsage {
  std::uint64_t variableBytes = 0;
  std::uint64_t vertexStateBytes = 0;
  unsigned vertices = 0;
  std::uint64_t total() const { return variableBytes + vertexStateBytes; }
};

// An estimate of the vertex state Poplar keeps for v on its tile: each
// field's pointer (and size, for SPAN vectors), state members, and the
// vertex's entry in its compute set's list.
std::uint64_t vertexStateBytes(const VertexInstance &v);

// Per tile of the target: the variables' bytes and every mapped vertex. The
// variables are counted at the tile's peak while `program` runs: a variable
// is live from its first use to its last (all of a Repeat when used in its
// body; from the start when the host writes it or it is a constant, to the
// end when the host reads it), and variables never live at the same time
// share memory, as Poplar's allocator lets them. Variables the program never
// uses are not counted. `include` picks variables (all when empty).
std::vector<TileUsage> tileUsage(const GraphModel &g, const ProgramNode &program,
                                 const std::function<bool(std::uint32_t)> &include = {});

// Bytes the target keeps on every tile for code and control (the planner's
// reserve, popops_ext/plan/Target.cpp).
std::uint64_t reservedBytesPerTile();

// Calls f(node, runs) for every node under `root`, runs being how many times
// the node runs per run of root (the product of the enclosing Repeat counts).
void walkProgram(const ProgramNode &root,
                 const std::function<void(const ProgramNode &, std::uint64_t)> &f,
                 std::uint64_t runs = 1);

} // namespace hostgraph
} // namespace snn
