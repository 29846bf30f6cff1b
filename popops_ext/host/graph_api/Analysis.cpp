#include "Analysis.hpp"

#include "VertexRegistry.hpp"

#include <algorithm>
#include <map>
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

namespace {

// Live range [first, last] of each variable, in positions of the program's
// leaves (Execute, Copy, host operation) in the order they run.
std::vector<std::pair<long, long>> liveRanges(const GraphModel &g, const ProgramNode &program) {
  std::vector<std::pair<long, long>> range(g.vars.size(), {-1, -1});
  long position = 0;
  auto use = [&](const poplar::Tensor &t, long from, long to) {
    if (!t.valid())
      return;
    t.hostView().forEachChunk([&](const Chunk &c) {
      auto &r = range[c.var];
      r.first = r.first < 0 ? from : std::min(r.first, from);
      r.second = std::max(r.second, to);
    });
  };
  // A use inside a Repeat holds for the whole of the outermost Repeat.
  std::function<void(const ProgramNode &, long)> visit = [&](const ProgramNode &n, long loopStart) {
    if (n.kind == ProgramNode::Kind::Repeat && loopStart < 0) {
      const long start = position;
      std::vector<std::pair<long, long>> before = range;
      for (const auto &child : n.children)
        visit(*child.hostNode(), start);
      const long end = position - 1;
      for (std::size_t v = 0; v < range.size(); ++v)
        if (range[v] != before[v]) {
          range[v].first = before[v].first < 0 ? start : std::min(before[v].first, start);
          range[v].second = std::max(range[v].second, end);
        }
      return;
    }
    const long from = position, to = position;
    switch (n.kind) {
    case ProgramNode::Kind::Execute:
      for (unsigned v : g.computeSets[n.computeSet].vertices)
        for (const FieldState &fs : g.vertices[v].fields) {
          use(fs.tensor, from, to);
          for (const auto &t : fs.items)
            use(t, from, to);
        }
      ++position;
      break;
    case ProgramNode::Kind::Copy:
      use(n.src, from, to);
      use(n.dst, from, to);
      ++position;
      break;
    case ProgramNode::Kind::HostOp:
      for (const auto &t : n.op->tensors())
        use(t, from, to);
      ++position;
      break;
    default:
      break;
    }
    for (const auto &child : n.children)
      visit(*child.hostNode(), loopStart);
  };
  visit(program, -1);
  const long end = std::max(0L, position - 1);
  for (std::size_t v = 0; v < range.size(); ++v)
    if (g.vars[v].constant && range[v].first >= 0)
      range[v] = {0, end};
  for (const auto &kv : g.hostWrites)
    for (const Chunk &c : chunksOf(kv.second))
      range[c.var] = {0, range[c.var].first < 0 ? end : range[c.var].second};
  for (const auto &kv : g.hostReads)
    for (const Chunk &c : chunksOf(kv.second))
      range[c.var] = {range[c.var].first < 0 ? 0 : range[c.var].first, end};
  return range;
}

} // namespace

std::vector<TileUsage> tileUsage(const GraphModel &g, const ProgramNode &program,
                                 const std::function<bool(std::uint32_t)> &include) {
  const unsigned numTiles = g.target.getNumTiles();
  std::vector<TileUsage> usage(numTiles);
  // Per position, the bytes each tile gains and loses there.
  const auto range = liveRanges(g, program);
  std::map<long, std::vector<std::pair<unsigned, std::int64_t>>> events;
  for (std::size_t v = 0; v < g.vars.size(); ++v) {
    if (range[v].first < 0 || (include && !include(std::uint32_t(v))))
      continue;
    std::map<unsigned, std::int64_t> perTile;
    g.vars[v].tiles.forEach(0, g.vars[v].bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
      if (tile != kUnmapped)
        perTile[tile] += e - b;
    });
    for (const auto &kv : perTile) {
      events[range[v].first].push_back({kv.first, kv.second});
      events[range[v].second + 1].push_back({kv.first, -kv.second});
    }
  }
  std::vector<std::int64_t> now(numTiles, 0);
  for (const auto &ev : events) {
    for (const auto &d : ev.second)
      now[d.first] += d.second;
    for (const auto &d : ev.second)
      usage[d.first].variableBytes =
          std::max<std::uint64_t>(usage[d.first].variableBytes, std::uint64_t(now[d.first]));
  }
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
