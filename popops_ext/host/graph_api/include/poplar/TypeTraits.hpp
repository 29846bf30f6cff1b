// Host implementation of poplar/TypeTraits.hpp: size, alignment and kind of
// a host type, as popops' expressions (popops/Expr.hpp: Const) keep them.
#pragma once

#include <cstddef>
#include <type_traits>

namespace poplar {

struct TypeTraits {
  std::size_t size = 0;
  std::size_t align = 0;
  bool isIntegral = false;
  bool isFloat = false;
  bool isSigned = false;

  template <typename T> static TypeTraits make() {
    static_assert(isSimpleType<T>(), "a number type");
    TypeTraits t;
    t.size = sizeof(T);
    t.align = alignof(T);
    t.isIntegral = std::is_integral<T>::value;
    t.isFloat = std::is_floating_point<T>::value;
    t.isSigned = std::is_signed<T>::value;
    return t;
  }
  template <typename T> static constexpr bool isSimpleType() {
    return std::is_integral<T>::value || std::is_floating_point<T>::value;
  }
};

} // namespace poplar
