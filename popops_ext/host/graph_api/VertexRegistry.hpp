// Host-only registry of the vertex classes a graph can name in addVertex
// ("SpikeMatmul<float>"): how to create one, which fields it has (name, edge
// direction, element type, vector alignment) and how to bind each field to
// memory before compute(). The codelets stay plain Poplar C++; their
// registration lives in Codelets.cpp. A registration is checked against the
// class's layout (registeredVertices() throws if a member was left out).
#pragma once

#include <poplar/HalfFloat.hpp>
#include <poplar/Type.hpp>
#include <poplar/Vertex.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace snn {
namespace hostgraph {

enum class FieldKind { Input, Output, InOut, State };
enum class FieldShape { Scalar, Vector, VectorList }; // VectorList: Vector<Input<Vector<T>>>

struct FieldInfo {
  std::string name;
  FieldKind kind = FieldKind::State;
  FieldShape shape = FieldShape::Scalar;
  poplar::Type type;
  unsigned align = 1;        // bytes the vertex may assume its data is aligned to
  unsigned stateBytes = 4;   // vertex-state bytes of the field (the edge's pointer/size)
  unsigned itemStateBytes = 0; // VectorList: vertex-state bytes of each inner vector
  std::size_t offset = 0, size = 0, memberAlign = 1; // of the member in the class
  // Scalar or Vector: binds the member to n elements at data.
  std::function<void(void *vertex, void *data, std::size_t n)> bind;
  // VectorList: an array of n inner vectors, each bound with bindItem, then
  // the member bound to the array.
  std::function<std::shared_ptr<void>(std::size_t n)> makeList;
  std::function<void(void *list, std::size_t i, void *data, std::size_t n)> bindItem;
  std::function<void(void *vertex, void *list, std::size_t n)> bindList;
  // State: copies an initial value into the member.
  std::function<void(void *vertex, const void *value)> setValue;

  bool isEdge() const { return kind != FieldKind::State; }
  bool writes() const { return kind == FieldKind::Output || kind == FieldKind::InOut; }
};

struct VertexClass {
  std::string name;
  bool multiVertex = false;
  std::size_t size = 0, align = 1;
  std::vector<FieldInfo> fields;
  std::function<std::shared_ptr<void>()> create;
  std::function<bool(void *vertex, unsigned worker)> compute;
  // The vertex's own size contract, checked once its fields are bound:
  // an empty string when it holds, else what is wrong.
  std::function<std::string(const void *vertex)> checkSizes;

  int fieldIndex(const std::string &field) const;
};

// Every vertex class the host can run; throws if a registration is broken.
const std::vector<VertexClass> &registeredVertices();
const VertexClass *findVertexClass(const std::string &name);
unsigned numWorkersOf(const VertexClass &cls);

// ---------------------------------------------------------------- building registrations

template <typename T> poplar::Type typeOf();
template <> inline poplar::Type typeOf<float>() { return poplar::FLOAT; }
template <> inline poplar::Type typeOf<half>() { return poplar::HALF; }
template <> inline poplar::Type typeOf<int>() { return poplar::INT; }
template <> inline poplar::Type typeOf<unsigned>() { return poplar::UNSIGNED_INT; }
template <> inline poplar::Type typeOf<bool>() { return poplar::BOOL; }
template <> inline poplar::Type typeOf<short>() { return poplar::SHORT; }
template <> inline poplar::Type typeOf<unsigned short>() { return poplar::UNSIGNED_SHORT; }
template <> inline poplar::Type typeOf<unsigned char>() { return poplar::UNSIGNED_CHAR; }
template <> inline poplar::Type typeOf<signed char>() { return poplar::SIGNED_CHAR; }
template <> inline poplar::Type typeOf<char>() { return poplar::CHAR; }

constexpr unsigned spanBytes(poplar::VectorLayout layout) {
  // SPAN holds a pointer and a size; the others a (possibly scaled) pointer
  // with the size elsewhere or fixed.
  return layout == poplar::VectorLayout::SPAN ? 8 : 4;
}

template <typename M> struct FieldTraits; // a member type the host cannot bind

template <typename T> struct ScalarStateTraits {
  static constexpr FieldKind kind = FieldKind::State;
  static constexpr FieldShape shape = FieldShape::Scalar;
  using Element = T;
  static constexpr unsigned align = alignof(T), stateBytes = sizeof(T) < 4 ? 4 : sizeof(T);
};
template <> struct FieldTraits<unsigned> : ScalarStateTraits<unsigned> {};
template <> struct FieldTraits<int> : ScalarStateTraits<int> {};
template <> struct FieldTraits<float> : ScalarStateTraits<float> {};
template <> struct FieldTraits<bool> : ScalarStateTraits<bool> {};

template <FieldKind K, typename T> struct ScalarEdgeTraits {
  static constexpr FieldKind kind = K;
  static constexpr FieldShape shape = FieldShape::Scalar;
  using Element = T;
  static constexpr unsigned align = alignof(T), stateBytes = 4;
};
template <typename T> struct FieldTraits<poplar::Input<T>> : ScalarEdgeTraits<FieldKind::Input, T> {};
template <typename T>
struct FieldTraits<poplar::Output<T>> : ScalarEdgeTraits<FieldKind::Output, T> {};
template <typename T> struct FieldTraits<poplar::InOut<T>> : ScalarEdgeTraits<FieldKind::InOut, T> {};

template <FieldKind K, typename T, poplar::VectorLayout L, unsigned A> struct VectorEdgeTraits {
  static constexpr FieldKind kind = K;
  static constexpr FieldShape shape = FieldShape::Vector;
  using Element = T;
  static constexpr unsigned align = A, stateBytes = spanBytes(L);
};
template <typename T, poplar::VectorLayout L, unsigned A, bool I>
struct FieldTraits<poplar::Input<poplar::Vector<T, L, A, I>>>
    : VectorEdgeTraits<FieldKind::Input, T, L, A> {};
template <typename T, poplar::VectorLayout L, unsigned A, bool I>
struct FieldTraits<poplar::Output<poplar::Vector<T, L, A, I>>>
    : VectorEdgeTraits<FieldKind::Output, T, L, A> {};
template <typename T, poplar::VectorLayout L, unsigned A, bool I>
struct FieldTraits<poplar::InOut<poplar::Vector<T, L, A, I>>>
    : VectorEdgeTraits<FieldKind::InOut, T, L, A> {};

template <FieldKind K, typename Inner, typename T, poplar::VectorLayout L, unsigned A,
          poplar::VectorLayout OL>
struct ListTraits {
  static constexpr FieldKind kind = K;
  static constexpr FieldShape shape = FieldShape::VectorList;
  using Element = T;
  using Item = Inner;
  static constexpr unsigned align = A, itemBytes = spanBytes(L), stateBytes = spanBytes(OL);
};
template <typename T, poplar::VectorLayout L, unsigned A, bool I, poplar::VectorLayout OL,
          unsigned OA, bool OI>
struct FieldTraits<poplar::Vector<poplar::Input<poplar::Vector<T, L, A, I>>, OL, OA, OI>>
    : ListTraits<FieldKind::Input, poplar::Input<poplar::Vector<T, L, A, I>>, T, L, A, OL> {};
template <typename T, poplar::VectorLayout L, unsigned A, bool I, poplar::VectorLayout OL,
          unsigned OA, bool OI>
struct FieldTraits<poplar::Vector<poplar::Output<poplar::Vector<T, L, A, I>>, OL, OA, OI>>
    : ListTraits<FieldKind::Output, poplar::Output<poplar::Vector<T, L, A, I>>, T, L, A, OL> {};

template <typename V, typename M> FieldInfo field(const char *name, M V::*member) {
  using Tr = FieldTraits<M>;
  using E = typename Tr::Element;
  FieldInfo f;
  f.name = name;
  f.kind = Tr::kind;
  f.shape = Tr::shape;
  f.type = typeOf<typename std::remove_const<E>::type>();
  f.align = Tr::align;
  f.stateBytes = Tr::stateBytes;
  f.size = sizeof(M);
  f.memberAlign = alignof(M);
  {
    V probe;
    f.offset = std::size_t(reinterpret_cast<const char *>(&(probe.*member)) -
                           reinterpret_cast<const char *>(&probe));
  }
  if constexpr (Tr::kind == FieldKind::State) {
    f.setValue = [member](void *v, const void *value) {
      static_cast<V *>(v)->*member = *static_cast<const E *>(value);
    };
  } else if constexpr (Tr::shape == FieldShape::Scalar) {
    f.bind = [member](void *v, void *data, std::size_t) {
      (static_cast<V *>(v)->*member).bind(static_cast<E *>(data));
    };
  } else if constexpr (Tr::shape == FieldShape::Vector) {
    f.bind = [member](void *v, void *data, std::size_t n) {
      (static_cast<V *>(v)->*member).bind(static_cast<E *>(data), n);
    };
  } else {
    using Item = typename Tr::Item;
    f.itemStateBytes = Tr::itemBytes;
    f.makeList = [](std::size_t n) -> std::shared_ptr<void> {
      return std::shared_ptr<Item>(new Item[n ? n : 1], std::default_delete<Item[]>());
    };
    f.bindItem = [](void *list, std::size_t i, void *data, std::size_t n) {
      static_cast<Item *>(list)[i].bind(static_cast<E *>(data), n);
    };
    f.bindList = [member](void *v, void *list, std::size_t n) {
      (static_cast<V *>(v)->*member).bind(static_cast<Item *>(list), n);
    };
  }
  return f;
}

template <typename V>
VertexClass vertexClass(std::string name, std::vector<FieldInfo> fields,
                        std::function<std::string(const V &)> checkSizes) {
  VertexClass c;
  c.name = std::move(name);
  c.multiVertex = std::is_base_of<poplar::MultiVertex, V>::value;
  c.size = sizeof(V);
  c.align = alignof(V);
  c.fields = std::move(fields);
  c.create = [] { return std::shared_ptr<void>(new V(), [](void *p) { delete static_cast<V *>(p); }); };
  if constexpr (std::is_base_of<poplar::MultiVertex, V>::value)
    c.compute = [](void *v, unsigned worker) { return static_cast<V *>(v)->compute(worker); };
  else
    c.compute = [](void *v, unsigned) { return static_cast<V *>(v)->compute(); };
  c.checkSizes = [checkSizes](const void *v) { return checkSizes(*static_cast<const V *>(v)); };
  return c;
}

} // namespace hostgraph
} // namespace snn
