// Host implementation of poplar/GraphElements.hpp: handles to compute sets,
// vertices and their fields.
#pragma once

#include <cstddef>
#include <string>

#include <poplar/StringRef.hpp>

namespace poplar {

class Graph;

class ComputeSet {
public:
  ComputeSet() = default;
  explicit ComputeSet(unsigned id) : id_(id) {}
  unsigned getId() const { return id_; }

private:
  unsigned id_ = ~0u;
};

inline bool operator==(const ComputeSet &a, const ComputeSet &b) { return a.getId() == b.getId(); }

class FieldRef;

class VertexRef {
public:
  VertexRef() = default;
  VertexRef(Graph *graph, unsigned id) : graph_(graph), id_(id) {}
  FieldRef operator[](StringRef fieldName) const;
  unsigned getId() const { return id_; }
  Graph *getGraph() const { return graph_; }

private:
  Graph *graph_ = nullptr;
  unsigned id_ = ~0u;
};

class FieldRef {
public:
  FieldRef() = default;
  FieldRef(VertexRef vertex, unsigned fieldId) : vertex(vertex), fieldId(fieldId) {}
  FieldRef operator[](std::size_t i) const {
    FieldRef f = *this;
    f.index = i;
    f.indexed = true;
    return f;
  }
  bool isIndexed() const { return indexed; }
  std::size_t getIndex() const { return index; }

  VertexRef vertex;
  unsigned fieldId = ~0u;
  std::size_t index = 0;
  bool indexed = false;
};

} // namespace poplar
