#include "Analysis.hpp"

#include "VertexRegistry.hpp"
#include "plan/Target.hpp"

namespace snn {
namespace hostgraph {

std::uint64_t vertexStateBytes(const VertexInstance &v) {
  std::uint64_t bytes = 4; // the vertex's entry in its compute set's list on the tile
  for (std::size_t f = 0; f < v.cls->fields.size(); ++f) {
    const FieldInfo &fi = v.cls->fields[f];
    bytes += fi.stateBytes;
    if (fi.shape == FieldShape::VectorList)
      bytes += std::uint64_t(fi.itemStateBytes) * v.fields[f].items.size();
  }
  return (bytes + 3) / 4 * 4;
}

std::vector<TileUsage> tileUsage(const GraphModel &g) {
  std::vector<TileUsage> usage(g.target.getNumTiles());
  for (const Variable &var : g.vars)
    var.tiles.forEach(0, var.bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
      if (tile != kUnmapped)
        usage[tile].variableBytes += e - b;
    });
  for (const VertexInstance &v : g.vertices)
    if (v.tile != kUnmapped) {
      usage[v.tile].vertexStateBytes += vertexStateBytes(v);
      ++usage[v.tile].vertices;
    }
  return usage;
}

std::uint64_t reservedBytesPerTile() { return plan::ipu2Target().reservedBytesPerTile; }

void walkProgram(const ProgramNode &root,
                 const std::function<void(const ProgramNode &, std::uint64_t)> &f,
                 std::uint64_t runs) {
  f(root, runs);
  const std::uint64_t inner = root.kind == ProgramNode::Kind::Repeat ? runs * root.count : runs;
  for (const auto &child : root.children)
    walkProgram(*child.hostNode(), f, inner);
}

} // namespace hostgraph
} // namespace snn
