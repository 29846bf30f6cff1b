// Host stand-in for the subset of the Poplar vertex API that codelets/ uses,
// so that g++ compiles the very same vertex source as popc. Fields are plain
// (pointer, size) views that the host executor binds before each compute().
#pragma once
#include <cstddef>

namespace poplar {

class Vertex {};

// A MultiVertex's compute(workerId) shares its work out by numWorkers(). The
// emulator runs it as one worker (shim::runWorkers) that does the whole
// vertex's work; the host graph (popops_ext/host/graph_api) builds with
// SNN_HOST_NUM_WORKERS=6, the worker contexts of an ipu2 tile, and runs
// compute(w) for each, as a tile does.
#ifndef SNN_HOST_NUM_WORKERS
#define SNN_HOST_NUM_WORKERS 1
#endif
class MultiVertex {
public:
  static constexpr unsigned numWorkers() { return SNN_HOST_NUM_WORKERS; }
};

enum class VectorLayout { SPAN, ONE_PTR, COMPACT_PTR, SCALED_PTR32, SCALED_PTR64 };

// Align: the minimum alignment (bytes) Poplar gives the connected memory. The
// host's kernels load unaligned, so it is only checked to be a power of two.
template <typename T, VectorLayout Layout = VectorLayout::SPAN,
          unsigned Align = alignof(T), bool Interleaved = false>
class Vector {
  static_assert(Align != 0 && (Align & (Align - 1)) == 0, "alignment: a power of two");

public:
  using value_type = T;
  void bind(T *ptr, std::size_t size) {
    ptr_ = ptr;
    size_ = size;
  }
  T &operator[](std::size_t i) const { return ptr_[i]; }
  std::size_t size() const { return size_; }
  T *data() const { return ptr_; }
  T *begin() const { return ptr_; }
  T *end() const { return ptr_ + size_; }

private:
  T *ptr_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {

// A scalar field: a pointer into tensor memory.
template <typename T> class ScalarField {
public:
  void bind(T *ptr) { ptr_ = ptr; }
  T &operator*() const { return *ptr_; }
  operator T &() const { return *ptr_; }

private:
  T *ptr_ = nullptr;
};

} // namespace detail

template <typename T> class Input : public detail::ScalarField<const T> {};
template <typename T> class Output : public detail::ScalarField<T> {};
template <typename T> class InOut : public detail::ScalarField<T> {};

// Edges to vectors: const for Input, writable for Output/InOut.
template <typename T, VectorLayout L, unsigned A, bool I>
class Input<Vector<T, L, A, I>> : public Vector<const T, L, A, I> {};
template <typename T, VectorLayout L, unsigned A, bool I>
class Output<Vector<T, L, A, I>> : public Vector<T, L, A, I> {};
template <typename T, VectorLayout L, unsigned A, bool I>
class InOut<Vector<T, L, A, I>> : public Vector<T, L, A, I> {};

} // namespace poplar

namespace shim {

// A MultiVertex run as Poplar runs it: compute(workerId) for every worker.
template <typename V> bool runWorkers(V &vertex) {
  bool ok = true;
  for (unsigned w = 0; w < V::numWorkers(); ++w)
    ok = vertex.compute(w) && ok;
  return ok;
}

} // namespace shim
