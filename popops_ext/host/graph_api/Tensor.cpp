// Element types, tensor views and the view operations of poplar::Tensor.
#include "Model.hpp"

#include <poplar/exceptions.hpp>

#include <algorithm>
#include <numeric>
#include <ostream>

namespace snn {
namespace hostgraph {

namespace {

const TypeInfo kTypes[] = {
    {"<invalid>", 0, '?'},
    {"bool", 1, 'b'},
    {"char", 1, 'i'},
    {"unsigned char", 1, 'u'},
    {"signed char", 1, 'i'},
    {"short", 2, 'i'},
    {"unsigned short", 2, 'u'},
    {"int", 4, 'i'},
    {"unsigned int", 4, 'u'},
    {"long long", 8, 'i'},
    {"unsigned long long", 8, 'u'},
    {"half", 2, 'h'},
    {"float", 4, 'f'},
};

std::size_t product(const std::vector<std::size_t> &s, std::size_t from = 0,
                    std::size_t to = std::size_t(-1)) {
  std::size_t p = 1;
  for (std::size_t i = from; i < std::min(to, s.size()); ++i)
    p *= s[i];
  return p;
}

} // namespace

const TypeInfo &typeInfo(const poplar::Type &type) {
  const unsigned id = type.hostTypeId();
  if (id >= sizeof(kTypes) / sizeof(kTypes[0]))
    throw poplar::poplar_error("unknown element type id " + std::to_string(id));
  return kTypes[id];
}

// ---------------------------------------------------------------- ViewBuilder

void ViewBuilder::add(std::uint32_t var, std::uint32_t begin, std::uint32_t bytes) {
  if (bytes == 0)
    return;
  if (!regions_.empty()) {
    Region &cur = regions_.back();
    if (cur.var == var && cur.count == 1 && begin == cur.begin + cur.bytes) {
      cur.bytes += bytes;
      return;
    }
    if (cur.var == var && cur.bytes == bytes) {
      const std::int64_t step = std::int64_t(begin) - std::int64_t(cur.begin);
      if (cur.count == 1 && step >= INT32_MIN && step <= INT32_MAX) {
        cur.stride = std::int32_t(step);
        cur.count = 2;
        return;
      }
      if (cur.count > 1 && step == std::int64_t(cur.count) * cur.stride) {
        ++cur.count;
        return;
      }
    }
  }
  regions_.push_back(Region{var, begin, bytes, 1, 0});
}

void ViewBuilder::addRegion(const Region &r) {
  if (r.count <= 2 || r.bytes == 0) {
    for (std::uint32_t k = 0; k < r.count; ++k)
      add(r.var, std::uint32_t(r.begin + std::int64_t(k) * r.stride), r.bytes);
    return;
  }
  regions_.push_back(r);
}

void ViewBuilder::addRange(const View &view, std::uint64_t from, std::uint64_t to) {
  if (from >= to)
    return;
  // The region holding byte `from`.
  std::size_t i = std::size_t(std::upper_bound(view.starts.begin(), view.starts.end(), from) -
                              view.starts.begin()) - 1;
  while (from < to) {
    const Region &r = view.regions[i];
    const std::uint64_t local = from - view.starts[i];
    std::uint32_t block = std::uint32_t(local / r.bytes);
    std::uint32_t within = std::uint32_t(local % r.bytes);
    const std::uint64_t regionEnd = view.starts[i + 1];
    const std::uint64_t stop = std::min(to, regionEnd);
    while (from < stop) {
      if (within == 0 && stop - from >= 2ull * r.bytes) {
        // whole blocks at once
        const std::uint32_t n = std::uint32_t((stop - from) / r.bytes);
        addRegion(Region{r.var, std::uint32_t(r.begin + std::int64_t(block) * r.stride), r.bytes,
                         n, r.stride});
        from += std::uint64_t(n) * r.bytes;
        block += n;
        continue;
      }
      const std::uint32_t n = std::uint32_t(std::min<std::uint64_t>(r.bytes - within, stop - from));
      add(r.var, std::uint32_t(r.begin + std::int64_t(block) * r.stride + within), n);
      from += n;
      within = 0;
      ++block;
    }
    ++i;
  }
}

std::shared_ptr<const View> ViewBuilder::finish(const GraphModel *graph) {
  auto v = std::make_shared<View>();
  v->graph = graph;
  v->regions = std::move(regions_);
  regions_.clear();
  v->starts.resize(v->regions.size() + 1);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < v->regions.size(); ++i) {
    v->starts[i] = at;
    at += std::uint64_t(v->regions[i].bytes) * v->regions[i].count;
  }
  v->starts.back() = at;
  return v;
}

std::vector<Chunk> chunksOf(const View &view, std::uint64_t from, std::uint64_t to) {
  ViewBuilder b;
  b.addRange(view, from, to);
  auto v = b.finish(view.graph);
  std::vector<Chunk> out;
  v->forEachChunk([&](const Chunk &c) { out.push_back(c); });
  return out;
}

std::vector<Chunk> chunksOf(const poplar::Tensor &t) {
  std::vector<Chunk> out;
  if (t.valid())
    t.hostView().forEachChunk([&](const Chunk &c) { out.push_back(c); });
  return out;
}

} // namespace hostgraph
} // namespace snn

namespace poplar {

using snn::hostgraph::View;
using snn::hostgraph::ViewBuilder;

#define SNN_HOST_TYPE(NAME, ID) const Type NAME(ID);
SNN_HOST_TYPE(BOOL, 1)
SNN_HOST_TYPE(CHAR, 2)
SNN_HOST_TYPE(UNSIGNED_CHAR, 3)
SNN_HOST_TYPE(SIGNED_CHAR, 4)
SNN_HOST_TYPE(SHORT, 5)
SNN_HOST_TYPE(UNSIGNED_SHORT, 6)
SNN_HOST_TYPE(INT, 7)
SNN_HOST_TYPE(UNSIGNED_INT, 8)
SNN_HOST_TYPE(LONGLONG, 9)
SNN_HOST_TYPE(UNSIGNED_LONGLONG, 10)
SNN_HOST_TYPE(HALF, 11)
SNN_HOST_TYPE(FLOAT, 12)
#undef SNN_HOST_TYPE

const std::string &Type::toString() const {
  static std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (unsigned i = 0; i <= 12; ++i)
      n.push_back(snn::hostgraph::typeInfo(Type(i)).name);
    return n;
  }();
  return names.at(id_);
}

std::ostream &operator<<(std::ostream &os, const Type &t) { return os << t.toString(); }

Tensor::Tensor(Type type, std::vector<std::size_t> shape, std::shared_ptr<const View> view)
    : type_(type), shape_(std::move(shape)), view_(std::move(view)) {}

const View &Tensor::hostView() const {
  if (!view_)
    throw poplar_error("use of an invalid (default-constructed) Tensor");
  return *view_;
}

std::size_t Tensor::dim(unsigned i) const {
  if (i >= shape_.size())
    throw index_error("dimension " + std::to_string(i) + " of a tensor of rank " +
                      std::to_string(shape_.size()));
  return shape_[i];
}

std::size_t Tensor::numElements() const { return snn::hostgraph::product(shape_); }

Tensor Tensor::slice(std::size_t begin, std::size_t end, unsigned dimension) const {
  const View &v = hostView();
  if (dimension >= shape_.size() || begin > end || end > shape_[dimension])
    throw index_error("slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") of dimension " + std::to_string(dimension) + " of a tensor of shape " +
                      snn::shapeString(shape_));
  const std::uint64_t esz = snn::hostgraph::typeSize(type_);
  const std::uint64_t inner = snn::hostgraph::product(shape_, dimension + 1) * esz;
  const std::uint64_t outer = snn::hostgraph::product(shape_, 0, dimension);
  const std::uint64_t row = shape_[dimension] * inner;
  ViewBuilder b;
  for (std::uint64_t o = 0; o < outer; ++o)
    b.addRange(v, o * row + begin * inner, o * row + end * inner);
  std::vector<std::size_t> shape = shape_;
  shape[dimension] = end - begin;
  return Tensor(type_, std::move(shape), b.finish(v.graph));
}

Tensor Tensor::slice(const Interval &region, unsigned dimension) const {
  return slice(region.begin(), region.end(), dimension);
}

Tensor Tensor::operator[](std::size_t i) const {
  if (shape_.empty())
    throw index_error("indexing a scalar tensor");
  Tensor t = slice(i, i + 1, 0);
  t.shape_.erase(t.shape_.begin());
  return t;
}

Tensor Tensor::index(ArrayRef<std::size_t> indices) const {
  Tensor t = *this;
  for (std::size_t i : indices)
    t = t[i];
  return t;
}

Tensor Tensor::reshape(ArrayRef<std::size_t> shape) const {
  std::vector<std::size_t> s = shape.vec();
  if (snn::hostgraph::product(s) != numElements())
    throw index_error("reshape of a tensor of shape " + snn::shapeString(shape_) +
                      " to " + snn::shapeString(s));
  return Tensor(type_, std::move(s), view_);
}

Tensor Tensor::dimShuffle(ArrayRef<unsigned> permutation) const {
  const View &v = hostView();
  const std::size_t r = shape_.size();
  std::vector<bool> seen(r, false);
  if (permutation.size() != r)
    throw index_error("dimShuffle needs a permutation of " + std::to_string(r) + " dimensions");
  for (unsigned p : permutation) {
    if (p >= r || seen[p])
      throw index_error("dimShuffle: not a permutation of the tensor's dimensions");
    seen[p] = true;
  }
  const std::uint64_t esz = snn::hostgraph::typeSize(type_);
  std::vector<std::uint64_t> srcStride(r, 1);
  for (std::size_t d = r; d-- > 1;)
    srcStride[d - 1] = srcStride[d] * shape_[d];
  std::vector<std::size_t> shape(r);
  for (std::size_t d = 0; d < r; ++d)
    shape[d] = shape_[permutation[d]];
  ViewBuilder b;
  const std::size_t n = numElements();
  if (n != 0) {
    // Walk the new order with a counter over its dimensions; the innermost
    // new dimension is a run when it is the source's innermost too.
    std::vector<std::size_t> idx(r, 0);
    const bool innerRun = r > 0 && permutation[r - 1] == r - 1;
    const std::size_t innerLen = r > 0 ? shape[r - 1] : 1;
    const std::size_t step = innerRun ? innerLen : 1;
    for (std::size_t done = 0; done < n; done += step) {
      std::uint64_t src = 0;
      for (std::size_t d = 0; d < r; ++d)
        src += idx[d] * srcStride[permutation[d]];
      b.addRange(v, src * esz, (src + step) * esz);
      // advance the counter by `step` elements
      std::size_t d = r;
      std::size_t carry = step;
      while (d-- > 0 && carry) {
        idx[d] += carry;
        carry = idx[d] / shape[d];
        idx[d] %= shape[d];
      }
    }
  }
  return Tensor(type_, std::move(shape), b.finish(v.graph));
}

Tensor Tensor::transpose() const {
  if (shape_.size() != 2)
    throw index_error("transpose of a tensor of rank " + std::to_string(shape_.size()));
  return dimShuffle({1, 0});
}

Tensor Tensor::squeeze(ArrayRef<std::size_t> dims) const {
  std::vector<std::size_t> s;
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    const bool drop = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (drop && shape_[d] != 1)
      throw index_error("squeeze of dimension " + std::to_string(d) + " of size " +
                        std::to_string(shape_[d]));
    if (!drop)
      s.push_back(shape_[d]);
  }
  for (std::size_t d : dims)
    if (d >= shape_.size())
      throw index_error("squeeze of dimension " + std::to_string(d) + " of a tensor of rank " +
                        std::to_string(shape_.size()));
  return Tensor(type_, std::move(s), view_);
}

Tensor Tensor::expand(ArrayRef<std::size_t> indices) const {
  std::vector<std::size_t> s = shape_;
  std::vector<std::size_t> sorted = indices.vec();
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i : sorted) {
    if (i > s.size())
      throw index_error("expand at " + std::to_string(i) + " of a tensor of rank " +
                        std::to_string(s.size()));
    s.insert(s.begin() + std::ptrdiff_t(i), 1);
  }
  return Tensor(type_, std::move(s), view_);
}

Tensor Tensor::flatten() const { return reshape({numElements()}); }

Tensor Tensor::flatten(unsigned dimBegin, unsigned dimEnd) const {
  if (dimBegin >= dimEnd || dimEnd > shape_.size())
    throw index_error("flatten of dimensions [" + std::to_string(dimBegin) + ", " +
                      std::to_string(dimEnd) + ") of a tensor of rank " +
                      std::to_string(shape_.size()));
  std::vector<std::size_t> s(shape_.begin(), shape_.begin() + dimBegin);
  s.push_back(snn::hostgraph::product(shape_, dimBegin, dimEnd));
  s.insert(s.end(), shape_.begin() + dimEnd, shape_.end());
  return Tensor(type_, std::move(s), view_);
}

Tensor Tensor::reinterpret(const Type &type) const {
  const unsigned from = snn::hostgraph::typeSize(type_), to = snn::hostgraph::typeSize(type);
  std::vector<std::size_t> s = shape_;
  if (from != to) {
    if (s.empty() || (s.back() * from) % to != 0)
      throw index_error("reinterpret of a tensor of shape " + snn::shapeString(s) +
                        " from " + type_.toString() + " to " + type.toString());
    s.back() = s.back() * from / to;
    for (const auto &r : hostView().regions)
      if (r.bytes % to != 0)
        throw index_error("reinterpret to " + type.toString() +
                          " splits an element across variables");
  }
  return Tensor(type, std::move(s), view_);
}

Tensor Tensor::broadcast(unsigned N, unsigned dim) const {
  const View &v = hostView();
  if (dim >= shape_.size())
    throw index_error("broadcast along dimension " + std::to_string(dim) +
                      " of a tensor of rank " + std::to_string(shape_.size()));
  const std::uint64_t esz = snn::hostgraph::typeSize(type_);
  const std::uint64_t block = snn::hostgraph::product(shape_, dim) * esz;
  const std::uint64_t outer = snn::hostgraph::product(shape_, 0, dim);
  ViewBuilder b;
  for (std::uint64_t o = 0; o < outer; ++o)
    for (unsigned k = 0; k < N; ++k)
      b.addRange(v, o * block, (o + 1) * block);
  std::vector<std::size_t> s = shape_;
  s[dim] *= N;
  return Tensor(type_, std::move(s), b.finish(v.graph));
}

Tensor concat(ArrayRef<Tensor> ts, unsigned dimension) {
  if (ts.empty())
    throw index_error("concat of no tensors");
  const Tensor &first = ts[0];
  const std::vector<std::size_t> &s0 = first.shape();
  if (dimension >= s0.size())
    throw index_error("concat along dimension " + std::to_string(dimension) +
                      " of tensors of rank " + std::to_string(s0.size()));
  std::vector<std::size_t> shape = s0;
  shape[dimension] = 0;
  for (const Tensor &t : ts) {
    bool same = t.rank() == s0.size() && t.elementType() == first.elementType();
    for (std::size_t d = 0; same && d < s0.size(); ++d)
      same = d == dimension || t.shape()[d] == s0[d];
    if (!same)
      throw index_error("concat of tensors of shapes " + snn::shapeString(s0) + " (" +
                        first.elementType().toString() + ") and " +
                        snn::shapeString(t.shape()) + " (" +
                        t.elementType().toString() + ") along dimension " +
                        std::to_string(dimension));
    shape[dimension] += t.shape()[dimension];
  }
  const std::uint64_t esz = snn::hostgraph::typeSize(first.elementType());
  const std::uint64_t outer = snn::hostgraph::product(s0, 0, dimension);
  const std::uint64_t inner = snn::hostgraph::product(s0, dimension + 1) * esz;
  ViewBuilder b;
  for (std::uint64_t o = 0; o < outer; ++o)
    for (const Tensor &t : ts) {
      const std::uint64_t row = t.shape()[dimension] * inner;
      b.addRange(t.hostView(), o * row, (o + 1) * row);
    }
  return Tensor(first.elementType(), std::move(shape), b.finish(first.hostView().graph));
}

Tensor concat(const Tensor &first, const Tensor &second, unsigned dimension) {
  return concat({first, second}, dimension);
}

} // namespace poplar
