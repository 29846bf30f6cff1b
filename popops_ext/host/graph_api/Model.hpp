// The host implementation's state behind the Poplar API handles: variables
// and their tile mappings, tensor views over them, vertices, compute sets and
// program nodes. Byte offsets are 32-bit: a variable lives in one IPU's
// memory (1472 x 624 KiB), far below 4 GiB.
#pragma once

#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>
#include <poplar/Tensor.hpp>
#include <poplar/Type.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ShapeString.hpp"

namespace snn {
namespace hostgraph {

struct VertexClass;
class Executor;

// ---------------------------------------------------------------- types

struct TypeInfo {
  const char *name;
  unsigned size;
  char kind; // 'f' float, 'h' half, 'i' signed, 'u' unsigned, 'b' bool
};
const TypeInfo &typeInfo(const poplar::Type &type);
inline unsigned typeSize(const poplar::Type &type) { return typeInfo(type).size; }
// Writes `value` (a C++ number: kind 'f', 'i', 'u' or 'b', of `size` bytes)
// as one element of `type` at `out`.
void convertScalar(const void *value, char kind, std::size_t size, const poplar::Type &type,
                   void *out);

// ---------------------------------------------------------------- views

// `count` blocks of `bytes` bytes of variable `var`, block k at
// begin + k * stride (stride 0: one block repeated, as broadcast makes).
struct Region {
  std::uint32_t var, begin, bytes, count;
  std::int32_t stride;
};

// A contiguous run of bytes of one variable.
struct Chunk {
  std::uint32_t var, begin, bytes;
};

struct GraphModel;

struct View {
  const GraphModel *graph = nullptr;
  std::vector<Region> regions;
  std::vector<std::uint64_t> starts; // flat byte offset of each region, then the total

  std::uint64_t totalBytes() const { return starts.empty() ? 0 : starts.back(); }
  template <typename F> void forEachChunk(F &&f) const {
    for (const Region &r : regions)
      for (std::uint32_t k = 0; k < r.count; ++k)
        f(Chunk{r.var, std::uint32_t(r.begin + std::int64_t(k) * r.stride), r.bytes});
  }
};

// Appends chunks in flat order, merging contiguous and evenly spaced ones.
class ViewBuilder {
public:
  void add(std::uint32_t var, std::uint32_t begin, std::uint32_t bytes);
  void addRegion(const Region &r);
  // Appends the flat bytes [from, to) of `view`.
  void addRange(const View &view, std::uint64_t from, std::uint64_t to);
  std::shared_ptr<const View> finish(const GraphModel *graph);

private:
  std::vector<Region> regions_;
};

// The chunks of the flat bytes [from, to) of `view`.
std::vector<Chunk> chunksOf(const View &view, std::uint64_t from, std::uint64_t to);
std::vector<Chunk> chunksOf(const poplar::Tensor &t);

// Walks two chunk lists of the same total length side by side, as a Copy moves
// bytes: f(source, destination) for each run of equal length the two share.
template <typename F>
void forEachPairedRun(const std::vector<Chunk> &src, const std::vector<Chunk> &dst, F &&f) {
  std::size_t i = 0, j = 0;
  std::uint32_t si = 0, dj = 0; // bytes of src[i] / dst[j] already paired
  while (i < src.size() && j < dst.size()) {
    const std::uint32_t n = std::min(src[i].bytes - si, dst[j].bytes - dj);
    f(Chunk{src[i].var, src[i].begin + si, n}, Chunk{dst[j].var, dst[j].begin + dj, n});
    si += n;
    dj += n;
    if (si == src[i].bytes) {
      ++i;
      si = 0;
    }
    if (dj == dst[j].bytes) {
      ++j;
      dj = 0;
    }
  }
}

// ---------------------------------------------------------------- tile mapping

constexpr unsigned kUnmapped = ~0u;

// Which tile holds each byte of a variable: sorted runs, optionally repeated
// every `period` bytes (createSliceableTensor's layout: every slice spread
// the same way, in one run per tile instead of one per tile and slice).
class TileMap {
public:
  void assign(std::uint32_t begin, std::uint32_t end, unsigned tile);
  // [0, total) mapped by `ends` (end of each run within a period, and its
  // tile), repeated every `period` bytes.
  void setPeriodic(std::uint32_t period, std::uint32_t total,
                   std::vector<std::pair<std::uint32_t, unsigned>> ends);
  // Calls f(begin, end, tile) over [begin, end) in order; tile kUnmapped for gaps.
  void forEach(std::uint32_t begin, std::uint32_t end,
               const std::function<void(std::uint32_t, std::uint32_t, unsigned)> &f) const;

private:
  struct Run {
    std::uint32_t begin, end;
    unsigned tile;
  };
  void expandPeriod(std::uint32_t total);
  void forEachPlain(std::uint32_t begin, std::uint32_t end,
                    const std::function<void(std::uint32_t, std::uint32_t, unsigned)> &f) const;
  std::vector<Run> runs_;
  std::uint32_t period_ = 0;
  std::uint32_t total_ = 0; // extent of a periodic mapping
};

// ---------------------------------------------------------------- graph

struct Variable {
  std::string name;
  poplar::Type type;
  std::uint32_t bytes = 0;
  bool constant = false;
  std::vector<std::uint8_t> init; // a constant's bytes
  TileMap tiles;
};

struct FieldState {
  bool set = false;               // connected (edge) or given a value (state)
  poplar::Tensor tensor;          // edge
  std::vector<std::uint8_t> value; // state: the initial value's bytes
  bool sized = false;              // list field: setFieldSize called
  std::vector<poplar::Tensor> items;
  std::vector<bool> itemSet;
};

struct VertexInstance {
  const VertexClass *cls = nullptr;
  unsigned computeSet = 0;
  unsigned tile = kUnmapped;
  std::vector<FieldState> fields;
  std::uint64_t cycles = 0;
  bool estimated = false;
};

struct ComputeSetInfo {
  std::string name;
  std::vector<unsigned> vertices;
};

struct GraphModel {
  poplar::Target target;
  std::vector<Variable> vars;
  std::vector<VertexInstance> vertices;
  std::vector<ComputeSetInfo> computeSets;
  std::map<std::string, poplar::Tensor> hostWrites, hostReads;
  std::vector<std::string> codelets;

  // "name[a:b)" of the variables behind a tensor, for error messages.
  std::string describe(const poplar::Tensor &t) const;
  std::string describeChunk(const Chunk &c) const;
  // "Class (compute set 'cs', tile 3, #12)".
  std::string describeVertex(unsigned v) const;
  std::uint32_t addVariable(const poplar::Type &type, std::size_t elements, std::string name);
  poplar::Tensor wholeVariable(std::uint32_t var, std::vector<std::size_t> shape) const;
};

// ---------------------------------------------------------------- programs

// Runs a popops operation on the host (see Popops.cpp).
struct HostOp {
  virtual ~HostOp() = default;
  virtual void run(Executor &exec) = 0;
  // Everything it reads and writes, for the mapping checks and the report.
  virtual std::vector<poplar::Tensor> tensors() const = 0;
  // Elements it touches, for the report's estimate of its cost.
  virtual std::size_t elements() const = 0;
  // What the report costs it by: everything it touches, unless it touches less.
  virtual std::vector<poplar::Tensor> costTensors() const { return tensors(); }
  std::string kind;
};

struct ProgramNode {
  enum class Kind { Sequence, Execute, Repeat, Copy, HostOp } kind;
  std::string name;
  std::vector<poplar::program::Program> children; // Sequence: in order; Repeat: its body
  unsigned count = 0;                             // Repeat
  unsigned computeSet = 0;                        // Execute
  const GraphModel *graph = nullptr;              // Execute
  poplar::Tensor src, dst;                        // Copy
  std::shared_ptr<HostOp> op;                     // HostOp
};

// Appends a host operation to a sequence.
void addHostOp(poplar::program::Sequence &prog, std::shared_ptr<HostOp> op,
               const std::string &name);

} // namespace hostgraph
} // namespace snn
