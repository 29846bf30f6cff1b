// Host implementation of poplar/Interval.hpp: a half-open range of elements.
#pragma once

#include <cstddef>

namespace poplar {

class Interval {
public:
  Interval() = default;
  Interval(std::size_t begin, std::size_t end) : begin_(begin), end_(end) {}
  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }
  std::size_t size() const { return end_ - begin_; }
  bool operator==(const Interval &o) const { return begin_ == o.begin_ && end_ == o.end_; }
  bool operator!=(const Interval &o) const { return !(*this == o); }
  bool operator<(const Interval &o) const {
    return begin_ != o.begin_ ? begin_ < o.begin_ : end_ < o.end_;
  }

private:
  std::size_t begin_ = 0, end_ = 0;
};

} // namespace poplar
