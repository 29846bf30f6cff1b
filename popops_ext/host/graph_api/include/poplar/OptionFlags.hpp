// Host implementation of poplar/OptionFlags.hpp: string options.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include <poplar/StringRef.hpp>

namespace poplar {

class OptionFlags {
public:
  using initializer_list = std::initializer_list<std::pair<const std::string, std::string>>;
  OptionFlags() = default;
  OptionFlags(initializer_list list) : values_(list) {}
  void set(StringRef option, StringRef value) { values_[option] = std::string(value); }
  void set(initializer_list list) {
    for (const auto &kv : list)
      values_[kv.first] = kv.second;
  }
  const std::string &at(StringRef option) const { return values_.at(option); }
  void clear() { values_.clear(); }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

private:
  std::map<std::string, std::string> values_;
};

} // namespace poplar
