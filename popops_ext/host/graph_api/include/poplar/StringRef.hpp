// Host implementation of poplar/StringRef.hpp: a string argument that takes
// a std::string or a C string.
#pragma once

#include <string>

namespace poplar {

class StringRef {
public:
  StringRef() = default;
  StringRef(const char *s) : s_(s ? s : "") {}
  StringRef(const std::string &s) : s_(s) {}
  operator std::string() const { return s_; }
  const std::string &str() const { return s_; }
  const char *data() const { return s_.data(); }
  std::size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }

private:
  std::string s_;
};

} // namespace poplar
