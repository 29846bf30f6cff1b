// Tile maps and the graph model's bookkeeping.
#include "Model.hpp"

#include <poplar/exceptions.hpp>

#include "VertexRegistry.hpp"

#include <algorithm>
#include <sstream>

namespace snn {
namespace hostgraph {

// ---------------------------------------------------------------- TileMap

void TileMap::expandPeriod(std::uint32_t total) {
  if (!period_)
    return;
  std::vector<Run> runs;
  for (std::uint32_t base = 0; base < total; base += period_)
    for (const Run &r : runs_)
      if (base + r.begin < total)
        runs.push_back({base + r.begin, std::min(total, base + r.end), r.tile});
  runs_ = std::move(runs);
  period_ = 0;
}

void TileMap::setPeriodic(std::uint32_t period, std::uint32_t total,
                          std::vector<std::pair<std::uint32_t, unsigned>> ends) {
  runs_.clear();
  std::uint32_t at = 0;
  for (const auto &e : ends) {
    runs_.push_back({at, e.first, e.second});
    at = e.first;
  }
  period_ = period;
  total_ = total;
}

void TileMap::assign(std::uint32_t begin, std::uint32_t end, unsigned tile) {
  if (period_)
    expandPeriod(std::max(total_, end));
  if (begin >= end)
    return;
  if (runs_.empty() || runs_.back().end <= begin) {
    if (!runs_.empty() && runs_.back().end == begin && runs_.back().tile == tile)
      runs_.back().end = end;
    else
      runs_.push_back({begin, end, tile});
    return;
  }
  auto lo = std::lower_bound(runs_.begin(), runs_.end(), begin,
                             [](const Run &r, std::uint32_t b) { return r.end <= b; });
  auto hi = std::lower_bound(lo, runs_.end(), end,
                             [](const Run &r, std::uint32_t e) { return r.begin < e; });
  std::vector<Run> repl;
  if (lo != hi && lo->begin < begin)
    repl.push_back({lo->begin, begin, lo->tile});
  repl.push_back({begin, end, tile});
  if (lo != hi && (hi - 1)->end > end)
    repl.push_back({end, (hi - 1)->end, (hi - 1)->tile});
  const auto at = runs_.erase(lo, hi);
  runs_.insert(at, repl.begin(), repl.end());
}

void TileMap::forEachPlain(
    std::uint32_t begin, std::uint32_t end,
    const std::function<void(std::uint32_t, std::uint32_t, unsigned)> &f) const {
  auto it = std::lower_bound(runs_.begin(), runs_.end(), begin,
                             [](const Run &r, std::uint32_t b) { return r.end <= b; });
  std::uint32_t at = begin;
  for (; at < end && it != runs_.end() && it->begin < end; ++it) {
    if (it->begin > at) {
      f(at, it->begin, kUnmapped);
      at = it->begin;
    }
    const std::uint32_t stop = std::min(end, it->end);
    f(at, stop, it->tile);
    at = stop;
  }
  if (at < end)
    f(at, end, kUnmapped);
}

void TileMap::forEach(std::uint32_t begin, std::uint32_t end,
                      const std::function<void(std::uint32_t, std::uint32_t, unsigned)> &f) const {
  if (!period_)
    return forEachPlain(begin, end, f);
  std::uint32_t at = begin;
  while (at < end) {
    const std::uint32_t base = at / period_ * period_;
    const std::uint32_t stop = std::min(end, base + period_);
    forEachPlain(at - base, stop - base, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
      f(base + b, base + e, tile);
    });
    at = stop;
  }
}

// ---------------------------------------------------------------- GraphModel

std::uint32_t GraphModel::addVariable(const poplar::Type &type, std::size_t elements,
                                      std::string name) {
  const std::uint64_t bytes = std::uint64_t(elements) * typeSize(type);
  if (bytes > 0xffffffffull)
    throw poplar::graph_memory_allocation_error("variable '" + name + "' of " +
                                                std::to_string(bytes) +
                                                " bytes exceeds any IPU's memory");
  Variable v;
  v.name = std::move(name);
  v.type = type;
  v.bytes = std::uint32_t(bytes);
  vars.push_back(std::move(v));
  return std::uint32_t(vars.size() - 1);
}

poplar::Tensor GraphModel::wholeVariable(std::uint32_t var, std::vector<std::size_t> shape) const {
  ViewBuilder b;
  b.add(var, 0, vars[var].bytes);
  return poplar::Tensor(vars[var].type, std::move(shape), b.finish(this));
}

std::string GraphModel::describeChunk(const Chunk &c) const {
  const Variable &v = vars[c.var];
  const unsigned esz = typeSize(v.type);
  std::ostringstream os;
  os << "'" << v.name << "'";
  if (c.begin != 0 || c.bytes != v.bytes)
    os << "[" << c.begin / esz << ":" << (c.begin + c.bytes) / esz << "]";
  return os.str();
}

std::string GraphModel::describe(const poplar::Tensor &t) const {
  if (!t.valid())
    return "<invalid tensor>";
  std::ostringstream os;
  std::size_t n = 0, shown = 0;
  t.hostView().forEachChunk([&](const Chunk &c) {
    if (shown < 3) {
      os << (shown ? " + " : "") << describeChunk(c);
      ++shown;
    }
    ++n;
  });
  if (n == 0)
    os << "<empty>";
  else if (n > shown)
    os << " + " << n - shown << " more regions";
  return os.str();
}

std::string GraphModel::describeVertex(unsigned v) const {
  const VertexInstance &vi = vertices[v];
  std::ostringstream os;
  os << "vertex " << vi.cls->name << " #" << v << " (compute set '"
     << computeSets[vi.computeSet].name << "'";
  if (vi.tile != kUnmapped)
    os << ", tile " << vi.tile;
  os << ")";
  return os.str();
}

void addHostOp(poplar::program::Sequence &prog, std::shared_ptr<HostOp> op,
               const std::string &name) {
  auto node = std::make_shared<ProgramNode>();
  node->kind = ProgramNode::Kind::HostOp;
  node->name = name;
  node->op = std::move(op);
  prog.add(poplar::program::Program(node));
}

} // namespace hostgraph
} // namespace snn
