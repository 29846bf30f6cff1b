// poplar::Graph on the host: variables, mappings, vertices and connections.
#include "Model.hpp"
#include "VertexRegistry.hpp"

#include <poplar/HalfFloat.hpp>
#include <poplar/exceptions.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace snn {
namespace hostgraph {

// Writes `value` (a C++ number of the given kind and size) as one element of `type`.
void convertScalar(const void *value, char kind, std::size_t size, const poplar::Type &type,
                   void *out) {
  double d = 0;
  long long i = 0;
  unsigned long long u = 0;
  switch (kind) {
  case 'f':
    d = size == 4 ? double(*static_cast<const float *>(value)) : *static_cast<const double *>(value);
    i = (long long)d;
    u = (unsigned long long)(d < 0 ? 0 : d);
    break;
  case 'b':
    u = *static_cast<const bool *>(value);
    i = (long long)u;
    d = double(u);
    break;
  default: {
    if (kind == 'i') {
      long long v = 0;
      switch (size) {
      case 1: v = *static_cast<const signed char *>(value); break;
      case 2: v = *static_cast<const short *>(value); break;
      case 4: v = *static_cast<const int *>(value); break;
      default: v = *static_cast<const long long *>(value); break;
      }
      i = v;
      u = (unsigned long long)v;
      d = double(v);
    } else {
      unsigned long long v = 0;
      switch (size) {
      case 1: v = *static_cast<const unsigned char *>(value); break;
      case 2: v = *static_cast<const unsigned short *>(value); break;
      case 4: v = *static_cast<const unsigned *>(value); break;
      default: v = *static_cast<const unsigned long long *>(value); break;
      }
      u = v;
      i = (long long)v;
      d = double(v);
    }
  }
  }
  const TypeInfo &ti = typeInfo(type);
  switch (ti.kind) {
  case 'f': {
    const float f = kind == 'f' ? float(d) : float(d);
    std::memcpy(out, &f, 4);
    return;
  }
  case 'h': {
    const half h = half(float(d));
    std::memcpy(out, &h, 2);
    return;
  }
  case 'b': {
    const unsigned char b = kind == 'f' ? d != 0 : u != 0;
    std::memcpy(out, &b, 1);
    return;
  }
  default: {
    const unsigned long long bits = ti.kind == 'i' ? (unsigned long long)i : u;
    std::memcpy(out, &bits, ti.size); // little-endian: the low bytes
  }
  }
}

namespace {

std::size_t product(poplar::ArrayRef<std::size_t> s) {
  std::size_t p = 1;
  for (std::size_t d : s)
    p *= d;
  return p;
}

const char *kindName(FieldKind k) {
  switch (k) {
  case FieldKind::Input: return "Input";
  case FieldKind::Output: return "Output";
  case FieldKind::InOut: return "InOut";
  default: return "state";
  }
}

} // namespace

} // namespace hostgraph
} // namespace snn

namespace poplar {

using namespace snn::hostgraph;

FieldRef VertexRef::operator[](StringRef fieldName) const {
  if (!graph_)
    throw poplar_error("field '" + fieldName.str() + "' of an invalid VertexRef");
  const GraphModel &g = graph_->hostModel();
  const VertexInstance &v = g.vertices.at(id_);
  const int f = v.cls->fieldIndex(fieldName);
  if (f < 0) {
    std::string names;
    for (const auto &fi : v.cls->fields)
      names += (names.empty() ? "" : ", ") + fi.name;
    throw graph_connection_error(g.describeVertex(id_) + " has no field '" + fieldName.str() +
                                 "' (its fields: " + names + ")");
  }
  return FieldRef(*this, unsigned(f));
}

Graph::Graph(const Target &target) : model_(std::make_unique<GraphModel>()) {
  model_->target = target;
}
Graph::Graph(Graph &&) noexcept = default;
Graph &Graph::operator=(Graph &&) noexcept = default;
Graph::~Graph() = default;

const Target &Graph::getTarget() const { return model_->target; }

bool Graph::addCodelets(StringRef src, CodeletFileType, StringRef, StringRef) {
  // The host's vertices are the registry's classes (compiled into the
  // module); the path is kept for the report.
  model_->codelets.push_back(src);
  return true;
}

Tensor Graph::addVariable(const Type &type, ArrayRef<std::size_t> shape,
                          const DebugContext &debugContext) {
  if (type.hostTypeId() == 0)
    throw poplar_error("addVariable of an invalid Type ('" + debugContext.getPathName() + "')");
  const std::uint32_t var = model_->addVariable(type, product(shape), debugContext.getPathName());
  return model_->wholeVariable(var, shape.vec());
}

Tensor Graph::addConstantValues(const Type &type, ArrayRef<std::size_t> shape, const void *values,
                                std::size_t count, char kind, std::size_t size,
                                const DebugContext &debugContext) {
  const std::size_t n = product(shape);
  if (count != 1 && count != n)
    throw poplar_error("addConstant '" + debugContext.getPathName() + "' of shape " +
                       snn::shapeString(shape.vec()) + " given " + std::to_string(count) + " values");
  const std::uint32_t var = model_->addVariable(type, n, debugContext.getPathName());
  Variable &v = model_->vars[var];
  v.constant = true;
  const unsigned esz = typeSize(type);
  v.init.resize(v.bytes);
  for (std::size_t i = 0; i < n; ++i) {
    const char *src = static_cast<const char *>(values) + (count == 1 ? 0 : i * size);
    convertScalar(src, kind, size, type, v.init.data() + i * esz);
  }
  return model_->wholeVariable(var, shape.vec());
}

Tensor Graph::clone(const Tensor &t, const DebugContext &debugContext, TensorCloneMethod) {
  // A fresh variable in the tensor's element order, each element on the tile
  // of the element it copies (for every clone method: they differ only in
  // the memory order of aliased or scattered elements, not in placement).
  const std::uint32_t var =
      model_->addVariable(t.elementType(), t.numElements(), debugContext.getPathName());
  std::uint32_t at = 0;
  t.hostView().forEachChunk([&](const Chunk &c) {
    model_->vars[c.var].tiles.forEach(c.begin, c.begin + c.bytes,
                                      [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
                                        if (tile != kUnmapped)
                                          model_->vars[var].tiles.assign(at + (b - c.begin),
                                                                         at + (e - c.begin), tile);
                                      });
    at += c.bytes;
  });
  return model_->wholeVariable(var, t.shape());
}

void Graph::setTileMapping(const Tensor &t, unsigned tileNum) {
  if (tileNum >= model_->target.getNumTiles())
    throw poplar_error("setTileMapping of " + model_->describe(t) + " to tile " +
                       std::to_string(tileNum) + " of a target with " +
                       std::to_string(model_->target.getNumTiles()) + " tiles");
  t.hostView().forEachChunk(
      [&](const Chunk &c) { model_->vars[c.var].tiles.assign(c.begin, c.begin + c.bytes, tileNum); });
}

void Graph::setTileMapping(const Tensor &t, const TileToTensorMapping &mapping) {
  const unsigned esz = typeSize(t.elementType());
  for (std::size_t tile = 0; tile < mapping.size(); ++tile) {
    if (!mapping[tile].empty() && tile >= model_->target.getNumTiles())
      throw poplar_error("tile mapping of " + model_->describe(t) + " names tile " +
                         std::to_string(tile));
    for (const Interval &iv : mapping[tile]) {
      if (iv.end() > t.numElements())
        throw index_error("tile mapping interval past the end of " + model_->describe(t));
      for (const Chunk &c : chunksOf(t.hostView(), std::uint64_t(iv.begin()) * esz,
                                     std::uint64_t(iv.end()) * esz))
        model_->vars[c.var].tiles.assign(c.begin, c.begin + c.bytes, unsigned(tile));
    }
  }
}

void Graph::setTileMapping(VertexRef v, unsigned tileNum) {
  if (tileNum >= model_->target.getNumTiles())
    throw poplar_error("setTileMapping of " + model_->describeVertex(v.getId()) + " to tile " +
                       std::to_string(tileNum));
  model_->vertices.at(v.getId()).tile = tileNum;
}

Graph::TileToTensorMapping Graph::getTileMapping(const Tensor &t, bool requireComplete) const {
  TileToTensorMapping m(model_->target.getNumTiles());
  const unsigned esz = typeSize(t.elementType());
  std::uint64_t at = 0; // flat byte offset in t
  t.hostView().forEachChunk([&](const Chunk &c) {
    model_->vars[c.var].tiles.forEach(
        c.begin, c.begin + c.bytes, [&](std::uint32_t b, std::uint32_t e, unsigned tile) {
          if (tile == kUnmapped) {
            if (requireComplete)
              throw poplar_error("getTileMapping: " + model_->describeChunk({c.var, b, e - b}) +
                                 " is not mapped to a tile");
            return;
          }
          const std::size_t first = std::size_t((at + (b - c.begin)) / esz);
          const std::size_t last = std::size_t((at + (e - c.begin)) / esz);
          auto &list = m[tile];
          if (!list.empty() && list.back().end() == first)
            list.back() = Interval(list.back().begin(), last);
          else
            list.emplace_back(first, last);
        });
    at += c.bytes;
  });
  return m;
}

ComputeSet Graph::addComputeSet(const DebugContext &debugContext) {
  model_->computeSets.push_back({debugContext.getPathName(), {}});
  return ComputeSet(unsigned(model_->computeSets.size() - 1));
}

VertexRef Graph::addVertex(ComputeSet cs, StringRef vertexType) {
  if (cs.getId() >= model_->computeSets.size())
    throw poplar_error("addVertex '" + vertexType.str() + "' to an unknown compute set");
  const VertexClass *cls = findVertexClass(vertexType);
  if (!cls) {
    std::string names;
    for (const auto &c : registeredVertices())
      names += (names.empty() ? "" : ", ") + c.name;
    throw poplar_error("unknown vertex type '" + vertexType.str() +
                       "' (the host knows: " + names + ")");
  }
  VertexInstance v;
  v.cls = cls;
  v.computeSet = cs.getId();
  v.fields.resize(cls->fields.size());
  model_->vertices.push_back(std::move(v));
  const unsigned id = unsigned(model_->vertices.size() - 1);
  model_->computeSets[cs.getId()].vertices.push_back(id);
  return VertexRef(this, id);
}

VertexRef Graph::addVertex(ComputeSet cs, StringRef vertexType,
                           ArrayRef<ConnectionDesc> connections) {
  VertexRef v = addVertex(cs, vertexType);
  for (const ConnectionDesc &c : connections) {
    if (c.isList)
      connect(v[c.field], ArrayRef<Tensor>(c.tensors));
    else
      connect(v[c.field], c.tensors.at(0));
  }
  return v;
}

void Graph::connect(FieldRef field, const Tensor &tensor) {
  const unsigned vid = field.vertex.getId();
  VertexInstance &v = model_->vertices.at(vid);
  const FieldInfo &fi = v.cls->fields.at(field.fieldId);
  FieldState &fs = v.fields[field.fieldId];
  const std::string where = model_->describeVertex(vid) + " field '" + fi.name + "'";
  if (!tensor.valid())
    throw graph_connection_error(where + ": connected to an invalid tensor");
  if (!fi.isEdge())
    throw graph_connection_error(where + " is a state field (set it with setInitialValue), "
                                 "not an edge; connected to " + model_->describe(tensor));
  if (tensor.elementType() != fi.type)
    throw graph_connection_error(where + " (" + kindName(fi.kind) + " of " + fi.type.toString() +
                                 ") connected to " + model_->describe(tensor) + " of type " +
                                 tensor.elementType().toString());
  if (fi.shape == FieldShape::VectorList) {
    if (!field.isIndexed())
      throw graph_connection_error(where + " is a list of vectors: connect it with a list of "
                                   "tensors, or setFieldSize and connect each element");
    if (!fs.sized || field.getIndex() >= fs.items.size())
      throw graph_connection_error(where + "[" + std::to_string(field.getIndex()) +
                                   "] is past the field's size " +
                                   std::to_string(fs.items.size()) + " (setFieldSize first)");
    if (fs.itemSet[field.getIndex()])
      throw graph_connection_error(where + "[" + std::to_string(field.getIndex()) +
                                   "] is connected twice");
    fs.items[field.getIndex()] = tensor;
    fs.itemSet[field.getIndex()] = true;
    return;
  }
  if (field.isIndexed())
    throw graph_connection_error(where + " is not a list; it cannot be indexed");
  if (fs.set)
    throw graph_connection_error(where + " is connected twice (to " +
                                 model_->describe(fs.tensor) + " and " +
                                 model_->describe(tensor) + ")");
  if (fi.shape == FieldShape::Scalar && tensor.numElements() != 1)
    throw graph_connection_error(where + " is a scalar " + kindName(fi.kind) + "<" +
                                 fi.type.toString() + "> but is connected to " +
                                 std::to_string(tensor.numElements()) + " elements (" +
                                 model_->describe(tensor) + ")");
  fs.tensor = tensor;
  fs.set = true;
}

void Graph::connect(FieldRef field, ArrayRef<Tensor> tensors) {
  const VertexInstance &v = model_->vertices.at(field.vertex.getId());
  const FieldInfo &fi = v.cls->fields.at(field.fieldId);
  if (fi.shape != FieldShape::VectorList) {
    if (tensors.size() != 1)
      throw graph_connection_error(model_->describeVertex(field.vertex.getId()) + " field '" +
                                   fi.name + "' takes one tensor, given a list of " +
                                   std::to_string(tensors.size()));
    return connect(field, tensors[0]);
  }
  setFieldSize(field, tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i)
    connect(field[i], tensors[i]);
}

void Graph::setFieldSize(FieldRef field, std::size_t size) {
  VertexInstance &v = model_->vertices.at(field.vertex.getId());
  const FieldInfo &fi = v.cls->fields.at(field.fieldId);
  FieldState &fs = v.fields[field.fieldId];
  if (fi.shape != FieldShape::VectorList)
    throw graph_connection_error(model_->describeVertex(field.vertex.getId()) + " field '" +
                                 fi.name + "' is not a list of vectors; its size is the size of "
                                 "the tensor connected to it");
  if (fs.sized)
    throw graph_connection_error(model_->describeVertex(field.vertex.getId()) + " field '" +
                                 fi.name + "' is sized twice");
  fs.sized = true;
  fs.items.assign(size, Tensor());
  fs.itemSet.assign(size, false);
}

void Graph::setInitialValueBytes(const FieldRef &field, const void *value, char kind,
                                 std::size_t size) {
  VertexInstance &v = model_->vertices.at(field.vertex.getId());
  const FieldInfo &fi = v.cls->fields.at(field.fieldId);
  FieldState &fs = v.fields[field.fieldId];
  if (fi.isEdge())
    throw graph_connection_error(model_->describeVertex(field.vertex.getId()) + " field '" +
                                 fi.name + "' is an edge (" + kindName(fi.kind) +
                                 "); connect a tensor to it instead of an initial value");
  fs.value.resize(typeSize(fi.type));
  convertScalar(value, kind, size, fi.type, fs.value.data());
  fs.set = true;
}

void Graph::setPerfEstimate(const VertexRef &v, std::uint64_t cycles, std::uint64_t) {
  VertexInstance &vi = model_->vertices.at(v.getId());
  vi.cycles = cycles;
  vi.estimated = true;
}

void Graph::createHostWrite(StringRef handle, const Tensor &t, bool) {
  if (!model_->hostWrites.emplace(handle, t).second)
    throw poplar_error("host write handle '" + handle.str() + "' is already used");
}

void Graph::createHostRead(StringRef handle, const Tensor &t, bool) {
  if (!model_->hostReads.emplace(handle, t).second)
    throw poplar_error("host read handle '" + handle.str() + "' is already used");
}

} // namespace poplar
