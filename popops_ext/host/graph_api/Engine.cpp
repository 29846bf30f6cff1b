// poplar::Engine on the host: the Executor checks the graph as the device
// would and runs its program, vertices through the codelets' compute().
#include "Executor.hpp"

#include <poplar/Engine.hpp>
#include <poplar/HalfFloat.hpp>
#include <poplar/exceptions.hpp>

#include "Analysis.hpp"
#include "VertexRegistry.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace snn {
namespace hostgraph {

namespace {

constexpr std::size_t kAlign = 64;

std::string kib(std::uint64_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << double(bytes) / 1024.0 << " KiB";
  return os.str();
}

// A value of `type` that differs from all-zero bytes in every element:
// reading it instead of a value the vertex wrote changes what it computes.
void fillPatternB(std::uint8_t *p, std::size_t bytes, const poplar::Type &type) {
  const TypeInfo &ti = typeInfo(type);
  std::uint8_t e[8] = {};
  switch (ti.kind) {
  case 'f': {
    const std::uint32_t nan = 0x7fc0dead;
    std::memcpy(e, &nan, 4);
    break;
  }
  case 'h': {
    const std::uint16_t nan = 0x7e0d;
    std::memcpy(e, &nan, 2);
    break;
  }
  default:
    e[0] = 1;
  }
  for (std::size_t i = 0; i < bytes; i += ti.size)
    std::memcpy(p + i, e, ti.size);
}

} // namespace

// One region a vertex field reads or writes: where the vertex sees it, and,
// when that is a staging buffer (a region split over variables, or not
// aligned as the field requires), the chunks to gather and scatter.
struct Executor::Binding {
  const FieldInfo *field = nullptr;
  std::uint8_t *ptr = nullptr;
  std::size_t bytes = 0;
  std::vector<Chunk> chunks; // non-empty: staged
  std::unique_ptr<std::uint8_t, void (*)(void *)> staging{nullptr, std::free};
};

struct Executor::BoundVertex {
  unsigned id = 0;
  const VertexClass *cls = nullptr;
  std::shared_ptr<void> object;
  std::vector<std::shared_ptr<void>> lists;
  std::vector<Binding> data;
  unsigned workers = 1;
  bool hasOutputs = false;
};

struct Executor::Step {
  ProgramNode::Kind kind;
  std::string name;
  std::vector<std::unique_ptr<Step>> children;
  unsigned count = 0, computeSet = 0;
  std::vector<std::pair<Chunk, Chunk>> copy; // (source, destination) of equal length
  HostOp *op = nullptr;
};

Executor::Executor(const GraphModel &graph, const poplar::program::Program &prog,
                   const poplar::OptionFlags &options)
    : graph_(graph), root_(prog.hostNode()) {
  for (const auto &kv : options) {
    if (kv.first == "debug.checkOutputReads") {
      if (kv.second != "true" && kv.second != "false")
        throw poplar::invalid_option("debug.checkOutputReads must be 'true' or 'false', not '" +
                                     kv.second + "'");
      checkOutputReads_ = kv.second == "true";
    } else {
      throw poplar::invalid_option("unknown engine option '" + kv.first +
                                   "' (the host knows: debug.checkOutputReads)");
    }
  }
  usedVars_.assign(graph_.vars.size(), false);
  usedComputeSets_.assign(graph_.computeSets.size(), false);
  collect(*root_);
  for (const auto &kv : graph_.hostWrites)
    for (const Chunk &c : chunksOf(kv.second))
      usedVars_[c.var] = true;
  for (const auto &kv : graph_.hostReads)
    for (const Chunk &c : chunksOf(kv.second))
      usedVars_[c.var] = true;
  for (unsigned cs = 0; cs < graph_.computeSets.size(); ++cs)
    if (usedComputeSets_[cs])
      checkVertices(cs);
  checkMapped();
  for (unsigned cs = 0; cs < graph_.computeSets.size(); ++cs)
    if (usedComputeSets_[cs])
      checkRaces(cs);
  checkMemory();
  allocate();
  bound_.resize(graph_.computeSets.size());
  for (unsigned cs = 0; cs < graph_.computeSets.size(); ++cs)
    if (usedComputeSets_[cs])
      bindComputeSet(cs);
  program_ = compile(*root_);
}

Executor::~Executor() = default;

void Executor::collect(const ProgramNode &node) {
  auto use = [&](const poplar::Tensor &t) {
    for (const Chunk &c : chunksOf(t))
      usedVars_[c.var] = true;
  };
  switch (node.kind) {
  case ProgramNode::Kind::Execute:
    if (node.computeSet >= graph_.computeSets.size())
      throw poplar::graph_program_compilation_error("Execute '" + node.name +
                                                    "' of a compute set of another graph");
    if (!usedComputeSets_[node.computeSet]) {
      usedComputeSets_[node.computeSet] = true;
      for (unsigned v : graph_.computeSets[node.computeSet].vertices)
        for (const FieldState &fs : graph_.vertices[v].fields) {
          if (fs.tensor.valid())
            use(fs.tensor);
          for (const auto &t : fs.items)
            if (t.valid())
              use(t);
        }
    }
    break;
  case ProgramNode::Kind::Copy:
    use(node.src);
    use(node.dst);
    copies_.push_back(&node);
    break;
  case ProgramNode::Kind::HostOp:
    for (const auto &t : node.op->tensors())
      use(t);
    break;
  default:
    break;
  }
  for (const auto &child : node.children)
    collect(*child.hostNode());
}

void Executor::checkMapped() {
  for (std::uint32_t var = 0; var < graph_.vars.size(); ++var) {
    if (!usedVars_[var])
      continue;
    const Variable &v = graph_.vars[var];
    v.tiles.forEach(0, v.bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
      if (tile == kUnmapped)
        throw poplar::graph_memory_allocation_error(
            graph_.describeChunk({var, b, e - b}) + " (" + v.type.toString() +
            ") is used by the program but never mapped to a tile (setTileMapping)");
    });
  }
}

void Executor::checkVertices(unsigned cs) {
  for (unsigned id : graph_.computeSets[cs].vertices) {
    const VertexInstance &v = graph_.vertices[id];
    const std::string who = graph_.describeVertex(id);
    if (v.tile == kUnmapped)
      throw poplar::graph_program_compilation_error(who + " is never mapped to a tile");
    for (std::size_t f = 0; f < v.fields.size(); ++f) {
      const FieldInfo &fi = v.cls->fields[f];
      const FieldState &fs = v.fields[f];
      if (fi.shape == FieldShape::VectorList) {
        if (!fs.sized)
          throw poplar::graph_connection_error(who + " field '" + fi.name +
                                               "' is never connected");
        for (std::size_t i = 0; i < fs.items.size(); ++i)
          if (!fs.itemSet[i])
            throw poplar::graph_connection_error(who + " field '" + fi.name + "[" +
                                                 std::to_string(i) + "]' is never connected");
      } else if (!fs.set) {
        throw poplar::graph_connection_error(
            who + " field '" + fi.name + "' is never " +
            (fi.isEdge() ? "connected" : "given a value (setInitialValue)"));
      }
      // Exchange: a vertex touches only its own tile's memory.
      auto local = [&](const poplar::Tensor &t, const std::string &name) {
        for (const Chunk &c : chunksOf(t))
          graph_.vars[c.var].tiles.forEach(
              c.begin, c.begin + c.bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
                if (tile != v.tile && tile != kUnmapped)
                  throw poplar::graph_program_compilation_error(
                      who + " field '" + name + "' " + (fi.writes() ? "writes" : "reads") + " " +
                      graph_.describeChunk({c.var, b, e - b}) + ", which is mapped to tile " +
                      std::to_string(tile) + ": exchange must be an explicit Copy onto tile " +
                      std::to_string(v.tile));
              });
      };
      if (fi.shape == FieldShape::VectorList) {
        for (std::size_t i = 0; i < fs.items.size(); ++i)
          local(fs.items[i], fi.name + "[" + std::to_string(i) + "]");
      } else if (fi.isEdge()) {
        local(fs.tensor, fi.name);
      }
    }
  }
}

void Executor::checkRaces(unsigned cs) {
  struct Access {
    std::uint32_t var, begin, end;
    unsigned vertex, field;
    bool write;
  };
  std::vector<Access> writes, reads;
  for (unsigned id : graph_.computeSets[cs].vertices) {
    const VertexInstance &v = graph_.vertices[id];
    for (unsigned f = 0; f < v.fields.size(); ++f) {
      const FieldInfo &fi = v.cls->fields[f];
      if (!fi.isEdge())
        continue;
      auto add = [&](const poplar::Tensor &t) {
        for (const Chunk &c : chunksOf(t)) {
          if (c.bytes == 0)
            continue;
          Access a{c.var, c.begin, c.begin + c.bytes, id, f, fi.writes()};
          (a.write ? writes : reads).push_back(a);
        }
      };
      if (fi.shape == FieldShape::VectorList)
        for (const auto &t : v.fields[f].items)
          add(t);
      else
        add(v.fields[f].tensor);
    }
  }
  auto byStart = [](const Access &a, const Access &b) {
    return a.var != b.var ? a.var < b.var : a.begin < b.begin;
  };
  auto fail = [&](const Access &w, const Access &o) {
    const VertexInstance &vw = graph_.vertices[w.vertex], &vo = graph_.vertices[o.vertex];
    const std::uint32_t b = std::max(w.begin, o.begin), e = std::min(w.end, o.end);
    throw poplar::graph_program_compilation_error(
        "compute set '" + graph_.computeSets[cs].name + "': " + graph_.describeVertex(w.vertex) +
        " field '" + vw.cls->fields[w.field].name + "' writes " +
        graph_.describeChunk({w.var, b, e - b}) + ", which " + graph_.describeVertex(o.vertex) +
        " field '" + vo.cls->fields[o.field].name + "' " + (o.write ? "also writes" : "reads") +
        ": the vertices of a compute set run at the same time");
  };
  std::sort(writes.begin(), writes.end(), byStart);
  for (std::size_t i = 1, last = 0; i < writes.size(); ++i) {
    const Access &w = writes[i], &p = writes[last];
    if (w.var == p.var && w.begin < p.end && w.vertex != p.vertex)
      fail(p, w);
    if (w.var != p.var || w.end > p.end)
      last = i;
  }
  for (const Access &r : reads) {
    auto it = std::lower_bound(writes.begin(), writes.end(), r, [](const Access &w, const Access &x) {
      return w.var != x.var ? w.var < x.var : w.end <= x.begin;
    });
    for (; it != writes.end() && it->var == r.var && it->begin < r.end; ++it)
      if (it->vertex != r.vertex)
        fail(*it, r);
  }
}

void Executor::checkMemory() {
  const auto usage = tileUsage(graph_, *root_);
  const std::uint64_t limit = graph_.target.getBytesPerTile(), reserved = reservedBytesPerTile();
  for (unsigned tile = 0; tile < usage.size(); ++tile) {
    const TileUsage &u = usage[tile];
    if (u.total() == 0 || u.total() + reserved <= limit)
      continue;
    // the largest variables on the tile, for the message
    std::vector<std::pair<std::uint64_t, std::uint32_t>> onTile;
    for (std::uint32_t var = 0; var < graph_.vars.size(); ++var) {
      std::uint64_t bytes = 0;
      graph_.vars[var].tiles.forEach(0, graph_.vars[var].bytes,
                                     [&](std::uint32_t b, std::uint32_t e, unsigned t) {
                                       if (t == tile)
                                         bytes += e - b;
                                     });
      if (bytes)
        onTile.push_back({bytes, var});
    }
    std::sort(onTile.rbegin(), onTile.rend());
    std::string largest;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, onTile.size()); ++i)
      largest += (i ? ", " : "") + std::string("'") + graph_.vars[onTile[i].second].name + "' " +
                 kib(onTile[i].first);
    throw poplar::graph_memory_allocation_error(
        "tile " + std::to_string(tile) + " needs " + kib(u.total() + reserved) + " (" +
        kib(u.variableBytes) + " of variables live at once, " + kib(u.vertexStateBytes) + " of state of " +
        std::to_string(u.vertices) + " vertices, " + kib(reserved) +
        " reserved for code) but a tile has " + kib(limit) + "; largest variables: " + largest);
  }
}

void Executor::allocate() {
  memory_.reserve(graph_.vars.size());
  for (std::uint32_t var = 0; var < graph_.vars.size(); ++var) {
    const Variable &v = graph_.vars[var];
    if (!usedVars_[var] || v.bytes == 0) {
      memory_.emplace_back(nullptr, std::free);
      continue;
    }
    const std::size_t size = (std::size_t(v.bytes) + kAlign - 1) / kAlign * kAlign;
    auto *p = static_cast<std::uint8_t *>(std::aligned_alloc(kAlign, size));
    if (!p)
      throw std::bad_alloc();
    memory_.emplace_back(p, std::free);
    if (v.constant) {
      std::memcpy(p, v.init.data(), v.bytes);
    } else if (typeInfo(v.type).kind == 'f' || typeInfo(v.type).kind == 'h') {
      // Device memory starts undefined: a float never written reads as NaN
      // here, so a missing zeroing shows in the results.
      fillPatternB(p, v.bytes, v.type);
    } else {
      std::memset(p, 0, v.bytes);
    }
  }
}

void Executor::bindComputeSet(unsigned cs) {
  static std::uint8_t empty[kAlign] alignas(kAlign) = {};
  for (unsigned id : graph_.computeSets[cs].vertices) {
    const VertexInstance &v = graph_.vertices[id];
    BoundVertex bv;
    bv.id = id;
    bv.cls = v.cls;
    bv.object = v.cls->create();
    bv.workers = numWorkersOf(*v.cls);
    void *obj = bv.object.get();
    auto bindData = [&](const FieldInfo &fi, const poplar::Tensor &t) -> Binding & {
      Binding b;
      b.field = &fi;
      std::vector<Chunk> chunks = chunksOf(t);
      b.bytes = std::size_t(t.numElements()) * typeSize(fi.type);
      if (b.bytes == 0) {
        b.ptr = empty;
      } else if (chunks.size() == 1 &&
                 reinterpret_cast<std::uintptr_t>(at(chunks[0])) % fi.align == 0) {
        b.ptr = at(chunks[0]);
      } else {
        const std::size_t size = (b.bytes + kAlign - 1) / kAlign * kAlign;
        b.staging.reset(static_cast<std::uint8_t *>(std::aligned_alloc(kAlign, size)));
        b.ptr = b.staging.get();
        b.chunks = std::move(chunks);
      }
      if (fi.kind == FieldKind::Output)
        bv.hasOutputs = true;
      bv.data.push_back(std::move(b));
      return bv.data.back();
    };
    for (std::size_t f = 0; f < v.fields.size(); ++f) {
      const FieldInfo &fi = v.cls->fields[f];
      const FieldState &fs = v.fields[f];
      if (fi.kind == FieldKind::State) {
        fi.setValue(obj, fs.value.data());
      } else if (fi.shape == FieldShape::VectorList) {
        auto list = fi.makeList(fs.items.size());
        for (std::size_t i = 0; i < fs.items.size(); ++i) {
          Binding &b = bindData(fi, fs.items[i]);
          fi.bindItem(list.get(), i, b.ptr, fs.items[i].numElements());
        }
        fi.bindList(obj, list.get(), fs.items.size());
        bv.lists.push_back(std::move(list));
      } else {
        Binding &b = bindData(fi, fs.tensor);
        fi.bind(obj, b.ptr, fs.tensor.numElements());
      }
    }
    const std::string sizes = v.cls->checkSizes(obj);
    if (!sizes.empty())
      throw poplar::graph_connection_error(graph_.describeVertex(id) + ": " + sizes);
    bound_[cs].push_back(std::move(bv));
  }
}

std::unique_ptr<Executor::Step> Executor::compile(const ProgramNode &node) {
  auto step = std::make_unique<Step>();
  step->kind = node.kind;
  step->name = node.name;
  step->count = node.count;
  step->computeSet = node.computeSet;
  if (node.kind == ProgramNode::Kind::Copy) {
    std::vector<Chunk> src = chunksOf(node.src), dst = chunksOf(node.dst);
    // The destination must not write an element twice.
    std::vector<Chunk> sorted = dst;
    std::sort(sorted.begin(), sorted.end(), [](const Chunk &a, const Chunk &b) {
      return a.var != b.var ? a.var < b.var : a.begin < b.begin;
    });
    for (std::size_t i = 1; i < sorted.size(); ++i)
      if (sorted[i].var == sorted[i - 1].var &&
          sorted[i].begin < sorted[i - 1].begin + sorted[i - 1].bytes)
        throw poplar::graph_program_compilation_error(
            "Copy '" + node.name + "' writes " + graph_.describeChunk(sorted[i]) +
            " more than once: its destination aliases itself");
    forEachPairedRun(src, dst,
                     [&](const Chunk &from, const Chunk &to) { step->copy.push_back({from, to}); });
  } else if (node.kind == ProgramNode::Kind::HostOp) {
    step->op = node.op.get();
  }
  for (const auto &child : node.children)
    step->children.push_back(compile(*child.hostNode()));
  return step;
}

void Executor::run() { execute(*program_); }

void Executor::execute(const Step &step) {
  switch (step.kind) {
  case ProgramNode::Kind::Sequence:
    for (const auto &c : step.children)
      execute(*c);
    return;
  case ProgramNode::Kind::Repeat:
    for (unsigned k = 0; k < step.count; ++k)
      for (const auto &c : step.children)
        execute(*c);
    return;
  case ProgramNode::Kind::Copy:
    // Copies have their own source and destination: memmove for a source
    // that overlaps the destination.
    for (const auto &p : step.copy)
      std::memmove(at(p.second), at(p.first), p.first.bytes);
    return;
  case ProgramNode::Kind::HostOp:
    step.op->run(*this);
    return;
  case ProgramNode::Kind::Execute:
    for (BoundVertex &v : bound_[step.computeSet]) {
      for (Binding &b : v.data)
        if (!b.chunks.empty())
          gather(b.chunks, b.ptr);
      if (checkOutputReads_ && v.hasOutputs)
        runVertexChecked(v);
      else
        runVertex(v);
      for (Binding &b : v.data)
        if (!b.chunks.empty() && b.field->writes())
          scatter(b.chunks, b.ptr);
      ++vertexRuns_;
    }
    return;
  }
}

void Executor::runVertex(BoundVertex &v) {
  for (unsigned w = 0; w < v.workers; ++w)
    if (!v.cls->compute(v.object.get(), w))
      throw poplar::poplar_error(graph_.describeVertex(v.id) + ": compute() returned false");
}

void Executor::runVertexChecked(BoundVertex &v) {
  // Run with the Output fields all zero, then all pattern B: a vertex that
  // only writes them computes the same both times.
  std::vector<std::vector<std::uint8_t>> original, inouts;
  for (Binding &b : v.data) {
    if (b.field->kind == FieldKind::Output)
      original.emplace_back(b.ptr, b.ptr + b.bytes);
    else if (b.field->kind == FieldKind::InOut)
      inouts.emplace_back(b.ptr, b.ptr + b.bytes);
  }
  auto prepare = [&](int patternOf /* -1: all A; -2: all B; k: B for output k only */) {
    std::size_t o = 0, io = 0;
    for (Binding &b : v.data) {
      if (b.field->kind == FieldKind::Output) {
        if (patternOf == -2 || patternOf == int(o))
          fillPatternB(b.ptr, b.bytes, b.field->type);
        else
          std::memset(b.ptr, 0, b.bytes);
        ++o;
      } else if (b.field->kind == FieldKind::InOut) {
        std::memcpy(b.ptr, inouts[io++].data(), b.bytes);
      }
    }
  };
  auto snapshot = [&]() {
    std::vector<std::vector<std::uint8_t>> s;
    for (Binding &b : v.data)
      if (b.field->writes())
        s.emplace_back(b.ptr, b.ptr + b.bytes);
    return s;
  };
  prepare(-1);
  runVertex(v);
  const auto resultA = snapshot();
  prepare(-2);
  runVertex(v);
  const auto resultB = snapshot();

  // Elements written in both runs agree; elements of an Output never
  // written still hold the two patterns (and get their old value back).
  bool consistent = true;
  {
    std::size_t k = 0, o = 0;
    for (Binding &b : v.data) {
      if (!b.field->writes())
        continue;
      const auto &a = resultA[k], &bb = resultB[k];
      if (b.field->kind == FieldKind::InOut) {
        consistent = consistent && a == bb;
      } else {
        const unsigned esz = typeSize(b.field->type);
        std::vector<std::uint8_t> patB(esz);
        fillPatternB(patB.data(), esz, b.field->type);
        for (std::size_t e = 0; e < b.bytes; e += esz) {
          if (std::memcmp(&a[e], &bb[e], esz) == 0)
            continue;
          const bool unwrittenA = std::all_of(&a[e], &a[e] + esz, [](std::uint8_t x) { return x == 0; });
          if (unwrittenA && std::memcmp(&bb[e], patB.data(), esz) == 0)
            std::memcpy(b.ptr + e, &original[o][e], esz);
          else
            consistent = false;
        }
        ++o;
      }
      ++k;
    }
  }
  if (consistent)
    return;
  // Name the Output fields whose initial contents change the results.
  std::string culprits;
  std::size_t o = 0;
  for (Binding &b : v.data) {
    if (b.field->kind != FieldKind::Output)
      continue;
    prepare(int(o));
    runVertex(v);
    if (snapshot() != resultA)
      culprits += (culprits.empty() ? "'" : ", '") + b.field->name + "'";
    ++o;
  }
  throw poplar::poplar_error(graph_.describeVertex(v.id) + " read its Output field " +
                             (culprits.empty() ? std::string("(one of them)") : culprits) +
                             " before writing it: an Output's old contents are undefined on the "
                             "device (make the field InOut if the vertex needs them)");
}

void Executor::gather(const std::vector<Chunk> &chunks, void *out) {
  auto *p = static_cast<std::uint8_t *>(out);
  for (const Chunk &c : chunks) {
    std::memcpy(p, at(c), c.bytes);
    p += c.bytes;
  }
}

void Executor::scatter(const std::vector<Chunk> &chunks, const void *in) {
  const auto *p = static_cast<const std::uint8_t *>(in);
  for (const Chunk &c : chunks) {
    std::memcpy(at(c), p, c.bytes);
    p += c.bytes;
  }
}

void Executor::writeTensor(const std::string &handle, const void *buf, const void *bufEnd) {
  auto it = graph_.hostWrites.find(handle);
  if (it == graph_.hostWrites.end())
    throw poplar::poplar_error("no host write handle '" + handle + "'");
  const std::size_t bytes = it->second.numElements() * typeSize(it->second.elementType());
  if (std::size_t(static_cast<const char *>(bufEnd) - static_cast<const char *>(buf)) != bytes)
    throw poplar::poplar_error("writeTensor '" + handle + "': the buffer holds " +
                               std::to_string(static_cast<const char *>(bufEnd) -
                                              static_cast<const char *>(buf)) +
                               " bytes, the tensor " + std::to_string(bytes));
  scatter(it->second, buf);
}

void Executor::readTensor(const std::string &handle, void *buf, void *bufEnd) {
  auto it = graph_.hostReads.find(handle);
  if (it == graph_.hostReads.end())
    throw poplar::poplar_error("no host read handle '" + handle + "'");
  const std::size_t bytes = it->second.numElements() * typeSize(it->second.elementType());
  if (std::size_t(static_cast<char *>(bufEnd) - static_cast<char *>(buf)) != bytes)
    throw poplar::poplar_error("readTensor '" + handle + "': the buffer holds " +
                               std::to_string(static_cast<char *>(bufEnd) -
                                              static_cast<char *>(buf)) +
                               " bytes, the tensor " + std::to_string(bytes));
  gather(it->second, buf);
}

} // namespace hostgraph
} // namespace snn

namespace poplar {

Engine::Engine(const Graph &graph, const program::Program &prog, const OptionFlags &options)
    : executor_(std::make_unique<snn::hostgraph::Executor>(graph.hostModel(), prog, options)) {}
Engine::Engine(Engine &&) noexcept = default;
Engine::~Engine() = default;

void Engine::run(unsigned prog, const std::string &) {
  if (prog != 0)
    throw poplar_error("the host engine has one program (index 0), not " + std::to_string(prog));
  executor_->run();
}

void Engine::writeTensor(StringRef handle, const void *buf, const void *bufEnd) {
  executor_->writeTensor(handle, buf, bufEnd);
}

void Engine::readTensor(StringRef handle, void *buf, void *bufEnd) {
  executor_->readTensor(handle, buf, bufEnd);
}

} // namespace poplar
