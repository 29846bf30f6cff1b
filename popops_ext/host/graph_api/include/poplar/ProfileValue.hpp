// Host implementation of poplar/ProfileValue.hpp: a value of the profile's
// debug information (a boolean, number, string, vector or map of them), as
// poplibs' op debug info (poputil/DebugInfo.hpp) builds them. The host keeps
// the value; its reports do not print it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace poplar {

class ProfileValue {
public:
  using Boolean = bool;
  using Number = double;
  using String = std::string;
  using Vector = std::vector<ProfileValue>;
  using Map = std::map<std::string, ProfileValue>;
  enum class Type { STRING, NUMBER, BOOLEAN, VECTOR, MAP };

  ProfileValue() : ProfileValue(Number(0.0)) {}
  ProfileValue(String init) : type_(Type::STRING), string_(std::move(init)) {}
  ProfileValue(Vector init);
  ProfileValue(Map init);
  ProfileValue(Number init) : type_(Type::NUMBER), number_(init) {}
  explicit ProfileValue(Boolean init) : type_(Type::BOOLEAN), boolean_(init) {}
  // An integer is a Number (not a Boolean); a C string a String.
  template <class T, typename = typename std::enable_if<std::is_integral<T>::value>::type>
  ProfileValue(T init) : ProfileValue(Number(init)) {}
  ProfileValue(const char *init) : ProfileValue(String(init)) {}

  Type type() const { return type_; }
  Boolean asBool() const { return check(Type::BOOLEAN), boolean_; }
  Number asDouble() const { return check(Type::NUMBER), number_; }
  const String &asString() const { return check(Type::STRING), string_; }
  const Vector &asVector() const { return check(Type::VECTOR), *vector_; }
  const Map &asMap() const { return check(Type::MAP), *map_; }

private:
  void check(Type want) const {
    if (type_ != want)
      throw std::runtime_error("ProfileValue holds another type");
  }
  Type type_;
  Boolean boolean_ = false;
  Number number_ = 0.0;
  String string_;
  std::shared_ptr<const Vector> vector_; // values are immutable: copies share them
  std::shared_ptr<const Map> map_;
};

inline ProfileValue::ProfileValue(Vector init)
    : type_(Type::VECTOR), vector_(std::make_shared<const Vector>(std::move(init))) {}
inline ProfileValue::ProfileValue(Map init)
    : type_(Type::MAP), map_(std::make_shared<const Map>(std::move(init))) {}

} // namespace poplar
