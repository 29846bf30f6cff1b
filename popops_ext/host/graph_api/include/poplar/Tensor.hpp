// Host implementation of poplar/Tensor.hpp. A tensor is a view: a shape, an
// element type and, in row-major order of its elements, a list of regions of
// the graph's variables (snn::hostgraph::View). Slices, reshapes, shuffles
// and concatenations make new views of the same variables, never copies.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <poplar/ArrayRef.hpp>
#include <poplar/Interval.hpp>
#include <poplar/Type.hpp>

namespace snn {
namespace hostgraph {
struct View;
} // namespace hostgraph
} // namespace snn

namespace poplar {

class Tensor {
public:
  Tensor() = default;

  Type elementType() const { return type_; }
  const std::vector<std::size_t> &shape() const { return shape_; }
  std::size_t dim(unsigned i) const;
  unsigned rank() const { return unsigned(shape_.size()); }
  std::size_t numElements() const;
  bool valid() const { return view_ != nullptr; }

  Tensor operator[](std::size_t i) const;
  Tensor index(ArrayRef<std::size_t> indices) const;
  Tensor slice(std::size_t begin, std::size_t end, unsigned dimension = 0) const;
  Tensor slice(const Interval &region, unsigned dimension = 0) const;
  Tensor reshape(ArrayRef<std::size_t> shape) const;
  Tensor dimShuffle(ArrayRef<unsigned> permutation) const;
  Tensor transpose() const;
  Tensor squeeze(ArrayRef<std::size_t> dims) const;
  Tensor expand(ArrayRef<std::size_t> indices) const;
  Tensor flatten() const;
  Tensor flatten(unsigned dimBegin, unsigned dimEnd) const;
  Tensor reinterpret(const Type &type) const;
  Tensor broadcast(unsigned N, unsigned dim) const;

  // Not part of the SDK's interface: the regions behind the view.
  const snn::hostgraph::View &hostView() const;
  Tensor(Type type, std::vector<std::size_t> shape,
         std::shared_ptr<const snn::hostgraph::View> view);

private:
  Type type_;
  std::vector<std::size_t> shape_;
  std::shared_ptr<const snn::hostgraph::View> view_;
};

Tensor concat(ArrayRef<Tensor> ts, unsigned dimension = 0);
Tensor concat(const Tensor &first, const Tensor &second, unsigned dimension = 0);

} // namespace poplar
