// The popops and poputil functions the graph builders use, as host
// operations: each appends a program node that does on the host what the
// SDK documents the function to do on the device, and maps any new tensor
// as poplibs would.
#include "Executor.hpp"
#include "Model.hpp"

#include <poplar/HalfFloat.hpp>
#include <poplar/exceptions.hpp>
#include <popops/Cast.hpp>
#include <popops/DynamicSlice.hpp>
#include <popops/ElementWise.hpp>
#include <popops/Reduce.hpp>
#include <popops/Zero.hpp>
#include <poputil/TileMapping.hpp>
#include <poputil/Util.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace snn {
namespace hostgraph {

namespace {

using poplar::Tensor;

std::size_t product(const std::vector<std::size_t> &s) {
  std::size_t p = 1;
  for (std::size_t d : s)
    p *= d;
  return p;
}

// One element as a double (exact for every integer the graphs hold).
double load(const std::uint8_t *p, const poplar::Type &type) {
  const TypeInfo &ti = typeInfo(type);
  switch (ti.kind) {
  case 'f': {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case 'h': {
    half h;
    std::memcpy(&h, p, 2);
    return float(h);
  }
  case 'b':
    return *p != 0;
  case 'i': {
    long long v = 0;
    switch (ti.size) {
    case 1: v = *reinterpret_cast<const signed char *>(p); break;
    case 2: { short s; std::memcpy(&s, p, 2); v = s; break; }
    case 4: { int s; std::memcpy(&s, p, 4); v = s; break; }
    default: std::memcpy(&v, p, 8);
    }
    return double(v);
  }
  default: {
    unsigned long long v = 0;
    std::memcpy(&v, p, ti.size);
    return double(v);
  }
  }
}

// Stores v as one element of `type`; integers wrap as the device's do.
void store(std::uint8_t *p, const poplar::Type &type, double v) {
  const TypeInfo &ti = typeInfo(type);
  switch (ti.kind) {
  case 'f': {
    const float f = float(v);
    std::memcpy(p, &f, 4);
    return;
  }
  case 'h': {
    const half h = half(float(v));
    std::memcpy(p, &h, 2);
    return;
  }
  case 'b':
    *p = v != 0;
    return;
  default: {
    const long long i = std::isfinite(v) ? (long long)v : 0;
    std::memcpy(p, &i, ti.size);
  }
  }
}

bool isFloat(const poplar::Type &t) {
  const char k = typeInfo(t).kind;
  return k == 'f' || k == 'h';
}

double binary(popops::expr::BinaryOpType op, double a, double b, const poplar::Type &type) {
  using popops::expr::BinaryOpType;
  // Float operands are rounded as the device's float unit rounds them.
  const bool f32 = typeInfo(type).kind == 'f' || typeInfo(type).kind == 'h';
  auto arith = [&](double r) { return f32 ? double(float(r)) : r; };
  switch (op) {
  case BinaryOpType::ADD: return f32 ? double(float(a) + float(b)) : a + b;
  case BinaryOpType::SUBTRACT: return f32 ? double(float(a) - float(b)) : a - b;
  case BinaryOpType::MULTIPLY: return f32 ? double(float(a) * float(b)) : a * b;
  case BinaryOpType::DIVIDE: return f32 ? double(float(a) / float(b)) : arith(std::trunc(a / b));
  case BinaryOpType::EQUAL: return a == b;
  case BinaryOpType::NOT_EQUAL: return a != b;
  case BinaryOpType::LESS_THAN: return a < b;
  case BinaryOpType::LESS_THAN_EQUAL: return a <= b;
  case BinaryOpType::GREATER_THAN: return a > b;
  case BinaryOpType::GREATER_THAN_EQUAL: return a >= b;
  }
  return 0;
}

bool isComparison(popops::expr::BinaryOpType op) {
  using popops::expr::BinaryOpType;
  return op != BinaryOpType::ADD && op != BinaryOpType::SUBTRACT &&
         op != BinaryOpType::MULTIPLY && op != BinaryOpType::DIVIDE;
}

// A fresh variable of `type` shaped as t, each element on the tile of t's.
Tensor cloneAs(poplar::Graph &graph, const Tensor &t, const poplar::Type &type,
               const std::string &name) {
  GraphModel &g = graph.hostModel();
  const std::uint32_t var = g.addVariable(type, t.numElements(), name);
  const unsigned from = typeSize(t.elementType()), to = typeSize(type);
  std::uint64_t at = 0; // element index in t
  t.hostView().forEachChunk([&](const Chunk &c) {
    g.vars[c.var].tiles.forEach(c.begin, c.begin + c.bytes,
                                [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
                                  if (tile != kUnmapped)
                                    g.vars[var].tiles.assign(
                                        std::uint32_t((at + (b - c.begin) / from) * to),
                                        std::uint32_t((at + (e - c.begin) / from) * to), tile);
                                });
    at += c.bytes / from;
  });
  return g.wholeVariable(var, t.shape());
}

bool aliases(const Tensor &t) {
  for (const Region &r : t.hostView().regions)
    if (r.count > 1 && std::uint32_t(std::abs(r.stride)) < r.bytes)
      return true;
  return false;
}

// Numpy-style: the flat index into b (shape sb) of flat element i of shape sa.
struct Broadcast {
  Broadcast(const std::vector<std::size_t> &sa, const std::vector<std::size_t> &sb) : sa(sa) {
    if (sb.size() > sa.size())
      throw poplar::poplar_error("a broadcast operand has more dimensions than the result");
    strides.assign(sa.size(), 0);
    std::size_t stride = 1;
    for (std::size_t k = 0; k < sb.size(); ++k) {
      const std::size_t da = sa.size() - 1 - k, db = sb.size() - 1 - k;
      if (sb[db] != 1 && sb[db] != sa[da])
        throw poplar::poplar_error("operand shapes do not broadcast");
      strides[da] = sb[db] == 1 ? 0 : stride;
      stride *= sb[db];
    }
  }
  std::size_t operator()(std::size_t i) const {
    std::size_t idx = 0;
    for (std::size_t d = sa.size(); d-- > 0;) {
      idx += (i % sa[d]) * strides[d];
      i /= sa[d];
    }
    return idx;
  }
  std::vector<std::size_t> sa, strides;
};

// ---------------------------------------------------------------- operations

struct Zero : HostOp {
  Tensor t;
  void run(Executor &exec) override {
    for (const Chunk &c : chunksOf(t))
      std::memset(exec.at(c), 0, c.bytes);
  }
  std::vector<Tensor> tensors() const override { return {t}; }
  std::size_t elements() const override { return t.numElements(); }
};

struct CastOp : HostOp {
  Tensor src, dst;
  void run(Executor &exec) override {
    std::vector<std::uint8_t> in(src.numElements() * typeSize(src.elementType()));
    std::vector<std::uint8_t> out(dst.numElements() * typeSize(dst.elementType()));
    exec.gather(src, in.data());
    const unsigned a = typeSize(src.elementType()), b = typeSize(dst.elementType());
    for (std::size_t i = 0; i < src.numElements(); ++i)
      store(&out[i * b], dst.elementType(), load(&in[i * a], src.elementType()));
    exec.scatter(dst, out.data());
  }
  std::vector<Tensor> tensors() const override { return {src, dst}; }
  std::size_t elements() const override { return src.numElements(); }
};

// Slices of `base` along dims 0 .. at the offsets held by `offset`: the
// chunks of each slice, cached by offset (a time loop revisits them).
struct SliceOp : HostOp {
  Tensor base, slice, offset;
  std::vector<std::size_t> dims, sizes;
  bool update = false; // dynamicUpdate: slice -> base
  std::map<std::vector<std::uint32_t>, std::vector<Chunk>> cache;

  const std::vector<Chunk> &chunksAt(Executor &exec) {
    std::vector<std::uint8_t> raw(offset.numElements() * 4);
    exec.gather(offset, raw.data());
    std::vector<std::uint32_t> at(offset.numElements());
    std::memcpy(at.data(), raw.data(), raw.size());
    auto it = cache.find(at);
    if (it != cache.end())
      return it->second;
    Tensor s = base;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      if (std::uint64_t(at[k]) + sizes[k] > base.dim(unsigned(dims[k])))
        throw poplar::poplar_error(kind + ": offset " + std::to_string(at[k]) +
                                   " of dimension " + std::to_string(dims[k]) + " (size " +
                                   std::to_string(base.dim(unsigned(dims[k]))) +
                                   ") is out of range for a slice of " +
                                   std::to_string(sizes[k]));
      s = s.slice(at[k], at[k] + sizes[k], unsigned(dims[k]));
    }
    return cache.emplace(at, chunksOf(s)).first->second;
  }
  void run(Executor &exec) override {
    const std::vector<Chunk> &inBase = chunksAt(exec);
    std::vector<std::uint8_t> buf(slice.numElements() * typeSize(slice.elementType()));
    if (update) {
      exec.gather(slice, buf.data());
      exec.scatter(inBase, buf.data());
    } else {
      exec.gather(inBase, buf.data());
      exec.scatter(slice, buf.data());
    }
  }
  std::vector<Tensor> tensors() const override { return {base, slice, offset}; }
  std::size_t elements() const override { return slice.numElements(); }
  // A tile copies only the selected slice's part of the base (poplibs'
  // DynamicSlice vertices): costed as the first slice, whose layout every slice
  // of a sliceable tensor shares.
  std::vector<Tensor> costTensors() const override {
    Tensor first = base;
    for (std::size_t k = 0; k < dims.size(); ++k)
      first = first.slice(0, sizes[k], unsigned(dims[k]));
    return {first, slice, offset};
  }
};

struct BinaryInPlace : HostOp {
  Tensor a, b;
  popops::expr::BinaryOpType op;
  void run(Executor &exec) override {
    const unsigned ea = typeSize(a.elementType()), eb = typeSize(b.elementType());
    std::vector<std::uint8_t> va(a.numElements() * ea), vb(b.numElements() * eb);
    exec.gather(a, va.data());
    exec.gather(b, vb.data());
    const Broadcast index(a.shape(), b.shape());
    for (std::size_t i = 0; i < a.numElements(); ++i)
      store(&va[i * ea], a.elementType(),
            binary(op, load(&va[i * ea], a.elementType()),
                   load(&vb[index(i) * eb], b.elementType()), a.elementType()));
    exec.scatter(a, va.data());
  }
  std::vector<Tensor> tensors() const override { return {a, b}; }
  std::size_t elements() const override { return a.numElements(); }
};

// An expression compiled from popops::expr classes.
struct Node {
  enum { Hole, Constant, CastTo, Binary } what;
  unsigned index = 0;
  double value = 0;
  poplar::Type type;
  popops::expr::BinaryOpType op{};
  std::unique_ptr<Node> a, b;
};

std::unique_ptr<Node> compileExpr(const popops::expr::Expr &e, const std::vector<Tensor> &ts) {
  namespace pe = popops::expr;
  auto n = std::make_unique<Node>();
  if (auto *p = dynamic_cast<const pe::PlaceHolder *>(&e)) {
    if (p->index < 1 || p->index > ts.size())
      throw poplar::poplar_error("popops::map: placeholder _" + std::to_string(p->index) +
                                 " but " + std::to_string(ts.size()) + " tensors");
    n->what = Node::Hole;
    n->index = p->index - 1;
    n->type = ts[n->index].elementType();
  } else if (auto *c = dynamic_cast<const pe::Const *>(&e)) {
    n->what = Node::Constant;
    n->value = c->value;
    n->type = c->type;
  } else if (auto *c = dynamic_cast<const pe::Cast *>(&e)) {
    n->what = Node::CastTo;
    n->type = c->bType;
    n->a = compileExpr(*c->a, ts);
  } else if (auto *b = dynamic_cast<const pe::BinaryOp *>(&e)) {
    n->what = Node::Binary;
    n->op = b->type;
    n->a = compileExpr(*b->a, ts);
    n->b = compileExpr(*b->b, ts);
    if (n->a->type != n->b->type)
      throw poplar::poplar_error("popops::map: a binary operator on " + n->a->type.toString() +
                                 " and " + n->b->type.toString());
    n->type = isComparison(b->type) ? poplar::BOOL : n->a->type;
  } else {
    throw poplar::poplar_error("popops::map: an expression the host does not implement");
  }
  return n;
}

double evaluate(const Node &n, const std::vector<double> &holes) {
  switch (n.what) {
  case Node::Hole: return holes[n.index];
  case Node::Constant: return n.value;
  case Node::CastTo: {
    const double v = evaluate(*n.a, holes);
    if (n.type == poplar::BOOL)
      return v != 0;
    if (isFloat(n.type))
      return typeInfo(n.type).kind == 'h' ? double(float(half(float(v)))) : double(float(v));
    return std::trunc(v);
  }
  default:
    return binary(n.op, evaluate(*n.a, holes), evaluate(*n.b, holes), n.a->type);
  }
}

struct MapOp : HostOp {
  std::vector<Tensor> ins;
  Tensor out;
  std::unique_ptr<Node> expr;
  void run(Executor &exec) override {
    std::vector<std::vector<std::uint8_t>> data;
    std::vector<Broadcast> index;
    for (const Tensor &t : ins) {
      data.emplace_back(t.numElements() * typeSize(t.elementType()));
      exec.gather(t, data.back().data());
      index.emplace_back(out.shape(), t.shape());
    }
    const unsigned eo = typeSize(out.elementType());
    std::vector<std::uint8_t> result(out.numElements() * eo);
    std::vector<double> holes(ins.size());
    for (std::size_t i = 0; i < out.numElements(); ++i) {
      for (std::size_t k = 0; k < ins.size(); ++k)
        holes[k] = load(&data[k][index[k](i) * typeSize(ins[k].elementType())],
                        ins[k].elementType());
      store(&result[i * eo], out.elementType(), evaluate(*expr, holes));
    }
    exec.scatter(out, result.data());
  }
  std::vector<Tensor> tensors() const override {
    std::vector<Tensor> all = ins;
    all.push_back(out);
    return all;
  }
  std::size_t elements() const override { return out.numElements(); }
};

struct ReduceOp : HostOp {
  Tensor in, out;
  std::vector<std::size_t> dims;
  popops::Operation op;
  void run(Executor &exec) override {
    const unsigned ei = typeSize(in.elementType()), eo = typeSize(out.elementType());
    std::vector<std::uint8_t> vin(in.numElements() * ei), vout(out.numElements() * eo);
    exec.gather(in, vin.data());
    // Partials in float, summed in index order.
    std::vector<float> acc(out.numElements());
    std::vector<bool> seen(out.numElements(), false);
    const auto &s = in.shape();
    std::vector<std::size_t> keptStride(s.size(), 0);
    std::size_t stride = 1;
    for (std::size_t d = s.size(); d-- > 0;)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
        keptStride[d] = stride;
        stride *= s[d];
      }
    for (std::size_t i = 0; i < in.numElements(); ++i) {
      std::size_t o = 0, rest = i;
      for (std::size_t d = s.size(); d-- > 0;) {
        o += (rest % s[d]) * keptStride[d];
        rest /= s[d];
      }
      const float v = float(load(&vin[i * ei], in.elementType()));
      float &a = acc[o];
      if (!seen[o]) {
        a = op == popops::Operation::SQUARE_ADD ? v * v : v;
        seen[o] = true;
        continue;
      }
      switch (op) {
      case popops::Operation::ADD: a += v; break;
      case popops::Operation::SQUARE_ADD: a += v * v; break;
      case popops::Operation::MUL: a *= v; break;
      case popops::Operation::MIN: a = std::min(a, v); break;
      case popops::Operation::MAX: a = std::max(a, v); break;
      default: throw poplar::poplar_error("popops::reduce: the host implements ADD, SQUARE_ADD, "
                                          "MUL, MIN and MAX");
      }
    }
    for (std::size_t o = 0; o < out.numElements(); ++o)
      store(&vout[o * eo], out.elementType(), seen[o] ? acc[o] : 0.0);
    exec.scatter(out, vout.data());
  }
  std::vector<Tensor> tensors() const override { return {in, out}; }
  std::size_t elements() const override { return in.numElements(); }
};

template <typename Op> std::shared_ptr<Op> op(const char *kind) {
  auto o = std::make_shared<Op>();
  o->kind = kind;
  return o;
}

void checkSliceArgs(const char *what, const Tensor &t, const Tensor &offset,
                    const std::vector<std::size_t> &dims, const std::vector<std::size_t> &sizes) {
  if (dims.size() != sizes.size() || offset.numElements() != dims.size())
    throw poplar::poplar_error(std::string(what) + ": dims, sizes and offset must have one entry "
                               "per sliced dimension");
  if (typeSize(offset.elementType()) != 4 || isFloat(offset.elementType()))
    throw poplar::poplar_error(std::string(what) + ": the offset must be a 32-bit integer tensor");
  for (std::size_t k = 0; k < dims.size(); ++k)
    if (dims[k] >= t.rank() || sizes[k] > t.dim(unsigned(dims[k])))
      throw poplar::poplar_error(std::string(what) + ": a slice of " + std::to_string(sizes[k]) +
                                 " along dimension " + std::to_string(dims[k]) +
                                 " does not fit the tensor");
}

} // namespace
} // namespace hostgraph
} // namespace snn

namespace popops {

using namespace snn::hostgraph;
using poplar::Tensor;

void zero(poplar::Graph &, const Tensor &t, poplar::program::Sequence &prog,
          const poplar::DebugContext &debugContext) {
  auto o = op<Zero>("zero");
  o->t = t;
  addHostOp(prog, o, debugContext.getPathName());
}

Tensor cast(poplar::Graph &graph, const Tensor &src, const poplar::Type &dstType,
            poplar::program::Sequence &prog, const poplar::DebugContext &debugContext) {
  auto o = op<CastOp>("cast");
  o->src = src;
  o->dst = cloneAs(graph, src, dstType, debugContext.getPathName());
  addHostOp(prog, o, debugContext.getPathName());
  return o->dst;
}

Tensor createSliceableTensor(poplar::Graph &graph, const poplar::Type &type,
                             const std::vector<std::size_t> &shape,
                             const std::vector<std::size_t> &dims,
                             const std::vector<std::size_t> &sizes, std::size_t minGrainSize,
                             const poplar::DebugContext &debugContext) {
  if (dims != std::vector<std::size_t>{0} || sizes.size() != 1 || shape.empty())
    throw poplar::poplar_error("createSliceableTensor: the host implements slices along "
                               "dimension 0 only");
  GraphModel &g = graph.hostModel();
  const std::uint32_t var = g.addVariable(type, product(shape), debugContext.getPathName());
  // Every slice spread over the tiles from tile 0 in runs of at least
  // minGrainSize elements (poplibs' layout), mapped by one periodic rule.
  const std::size_t perSlice = product(shape) / std::max<std::size_t>(1, shape[0]);
  if (perSlice != 0) {
    const std::size_t numTiles = g.target.getNumTiles();
    const std::size_t perTile =
        std::max<std::size_t>({(perSlice + numTiles - 1) / numTiles, minGrainSize, 1});
    const unsigned esz = typeSize(type);
    std::vector<std::pair<std::uint32_t, unsigned>> ends;
    for (std::size_t k = 0; k * perTile < perSlice; ++k)
      ends.push_back({std::uint32_t(std::min(perSlice, (k + 1) * perTile) * esz), unsigned(k)});
    g.vars[var].tiles.setPeriodic(std::uint32_t(perSlice * esz), g.vars[var].bytes,
                                  std::move(ends));
  }
  return g.wholeVariable(var, shape);
}

Tensor dynamicSlice(poplar::Graph &graph, const Tensor &t, const Tensor &offset,
                    const std::vector<std::size_t> &dims, const std::vector<std::size_t> &sizes,
                    poplar::program::Sequence &prog, const poplar::DebugContext &debugContext,
                    const poplar::OptionFlags &) {
  checkSliceArgs("dynamicSlice", t, offset, dims, sizes);
  // The result is mapped as the base's first slice, so that each tile
  // slices what it holds.
  Tensor first = t;
  for (std::size_t k = 0; k < dims.size(); ++k)
    first = first.slice(0, sizes[k], unsigned(dims[k]));
  auto o = op<SliceOp>("dynamicSlice");
  o->base = t;
  o->offset = offset;
  o->dims = dims;
  o->sizes = sizes;
  o->slice = cloneAs(graph, first, t.elementType(), debugContext.getPathName());
  addHostOp(prog, o, debugContext.getPathName());
  return o->slice;
}

void dynamicUpdate(poplar::Graph &, const Tensor &t, const Tensor &s, const Tensor &offset,
                   const std::vector<std::size_t> &dims, const std::vector<std::size_t> &sizes,
                   poplar::program::Sequence &prog, const poplar::DebugContext &debugContext,
                   const poplar::OptionFlags &) {
  checkSliceArgs("dynamicUpdate", t, offset, dims, sizes);
  std::vector<std::size_t> shape = t.shape();
  for (std::size_t k = 0; k < dims.size(); ++k)
    shape[dims[k]] = sizes[k];
  if (s.shape() != shape || s.elementType() != t.elementType())
    throw poplar::poplar_error("dynamicUpdate '" + debugContext.getPathName() +
                               "': the update's shape or type does not match the slice");
  auto o = op<SliceOp>("dynamicUpdate");
  o->base = t;
  o->slice = s;
  o->offset = offset;
  o->dims = dims;
  o->sizes = sizes;
  o->update = true;
  addHostOp(prog, o, debugContext.getPathName());
}

namespace {
void binaryInPlace(const char *kind, expr::BinaryOpType type, const Tensor &A, const Tensor &B,
                   poplar::program::Sequence &prog, const poplar::DebugContext &dc) {
  if (A.elementType() != B.elementType())
    throw poplar::poplar_error(std::string(kind) + " '" + dc.getPathName() + "' of " +
                               A.elementType().toString() + " and " + B.elementType().toString());
  if (aliases(A))
    throw poplar::poplar_error(std::string(kind) + " '" + dc.getPathName() +
                               "': the in-place operand aliases itself");
  Broadcast(A.shape(), B.shape()); // throws when B does not broadcast to A
  auto o = op<BinaryInPlace>(kind);
  o->a = A;
  o->b = B;
  o->op = type;
  addHostOp(prog, o, dc.getPathName());
}
} // namespace

void addInPlace(poplar::Graph &, const Tensor &A, const Tensor &B, poplar::program::Sequence &prog,
                const poplar::DebugContext &debugContext, const poplar::OptionFlags &) {
  binaryInPlace("addInPlace", expr::BinaryOpType::ADD, A, B, prog, debugContext);
}

void subInPlace(poplar::Graph &, const Tensor &A, const Tensor &B, poplar::program::Sequence &prog,
                const poplar::DebugContext &debugContext, const poplar::OptionFlags &) {
  binaryInPlace("subInPlace", expr::BinaryOpType::SUBTRACT, A, B, prog, debugContext);
}

Tensor map(poplar::Graph &graph, const expr::Expr &expr, const std::vector<Tensor> &ts,
           poplar::program::Sequence &prog, const poplar::DebugContext &debugContext,
           const poplar::OptionFlags &) {
  if (ts.empty())
    throw poplar::poplar_error("popops::map '" + debugContext.getPathName() + "' of no tensors");
  auto o = op<MapOp>("map");
  o->ins = ts;
  o->expr = compileExpr(expr, ts);
  // The result takes the shape every operand broadcasts to, mapped as the
  // first operand of that shape with no aliases (poplibs clones one), else
  // spread linearly.
  std::vector<std::size_t> shape;
  for (const Tensor &t : ts)
    if (t.rank() > shape.size() || (t.rank() == shape.size() && t.numElements() > product(shape)))
      shape = t.shape();
  const Tensor *like = nullptr;
  for (const Tensor &t : ts) {
    Broadcast(shape, t.shape());
    if (!like && t.shape() == shape && !aliases(t))
      like = &t;
  }
  if (like) {
    o->out = cloneAs(graph, *like, o->expr->type, debugContext.getPathName());
  } else {
    o->out = graph.addVariable(o->expr->type, shape, debugContext);
    poputil::mapTensorLinearly(graph, o->out);
  }
  addHostOp(prog, o, debugContext.getPathName());
  return o->out;
}

Tensor reduce(poplar::Graph &graph, const Tensor &in, const poplar::Type &outType,
              const std::vector<std::size_t> &dims, ReduceParams params,
              poplar::program::Sequence &prog, const poplar::DebugContext &debugContext,
              const poplar::OptionFlags &) {
  if (params.update || params.useScale)
    throw poplar::poplar_error("popops::reduce: the host implements neither update nor scale");
  std::vector<std::size_t> shape;
  for (std::size_t d = 0; d < in.rank(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end())
      shape.push_back(in.dim(unsigned(d)));
  for (std::size_t d : dims)
    if (d >= in.rank())
      throw poplar::poplar_error("popops::reduce over dimension " + std::to_string(d) +
                                 " of a tensor of rank " + std::to_string(in.rank()));
  auto o = op<ReduceOp>("reduce");
  o->in = in;
  o->dims = dims;
  o->op = params.op;
  o->out = graph.addVariable(outType, shape, debugContext);
  poputil::mapTensorLinearly(graph, o->out);
  addHostOp(prog, o, debugContext.getPathName());
  return o->out;
}

} // namespace popops

namespace poputil {

void mapTensorLinearly(poplar::Graph &graph, const poplar::Tensor &t) {
  const poplar::Target &target = graph.getTarget();
  const std::size_t n = t.numElements();
  const std::size_t size = target.getTypeSize(t.elementType());
  const std::size_t grain = std::max<std::size_t>(1, target.getVectorWidth(t.elementType()));
  const std::size_t minElements = (128 + size - 1) / size;
  const std::size_t grains = (n + grain - 1) / grain, numTiles = target.getNumTiles();
  const std::size_t perTile = std::max((grains + numTiles - 1) / numTiles,
                                       (minElements + grain - 1) / grain) * grain;
  poplar::Graph::TileToTensorMapping mapping(numTiles);
  for (std::size_t k = 0; k * perTile < n; ++k)
    mapping[k].emplace_back(k * perTile, std::min(n, (k + 1) * perTile));
  graph.setTileMapping(t, mapping);
}

poplar::Tensor duplicate(poplar::Graph &graph, const poplar::Tensor &in,
                         poplar::program::Sequence &p, const poplar::DebugContext &debugContext,
                         poplar::TensorCloneMethod method) {
  poplar::Tensor out = graph.clone(in, debugContext, method);
  p.add(poplar::program::Copy(in, out, false, debugContext));
  return out;
}

} // namespace poputil
