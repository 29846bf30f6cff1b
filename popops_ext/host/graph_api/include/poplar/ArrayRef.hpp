// Host implementation of poplar/ArrayRef.hpp: a non-owning view of a
// contiguous array, built implicitly from a vector, an initializer list, a
// std::array or a single element, as Poplar's own signatures take it.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <vector>

namespace poplar {

template <typename T> class ArrayRef {
public:
  using value_type = T;
  using const_iterator = const T *;

  ArrayRef() = default;
  ArrayRef(const T *data, std::size_t size) : data_(data), size_(size) {}
  ArrayRef(const T &one) : data_(&one), size_(1) {}
  ArrayRef(const std::vector<T> &v) : data_(v.data()), size_(v.size()) {}
  template <std::size_t N> ArrayRef(const std::array<T, N> &a) : data_(a.data()), size_(N) {}
  // A braced list lives to the end of the full expression that passes it,
  // which is as long as an argument is used; g++ warns all the same.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  ArrayRef(std::initializer_list<T> list) : data_(list.begin()), size_(list.size()) {}
#pragma GCC diagnostic pop

  const T *data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T &operator[](std::size_t i) const { return data_[i]; }
  const T *begin() const { return data_; }
  const T *end() const { return data_ + size_; }
  const T &front() const { return data_[0]; }
  const T &back() const { return data_[size_ - 1]; }
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }
  operator std::vector<T>() const { return vec(); }

private:
  const T *data_ = nullptr;
  std::size_t size_ = 0;
};

} // namespace poplar
