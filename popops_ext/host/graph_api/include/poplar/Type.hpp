// Host implementation of poplar/Type.hpp: the element types of tensors.
#pragma once

#include <iosfwd>
#include <string>

namespace poplar {

class Type {
public:
  Type() = default;
  const std::string &toString() const;
  bool operator==(const Type &o) const { return id_ == o.id_; }
  bool operator!=(const Type &o) const { return id_ != o.id_; }
  bool operator<(const Type &o) const { return id_ < o.id_; }

  // Not part of the SDK's interface: the table index the host
  // implementation keys its type properties on (sizes live in Target).
  unsigned hostTypeId() const { return id_; }
  explicit Type(unsigned id) : id_(id) {}

private:
  unsigned id_ = 0; // 0: no type (a default-constructed, invalid Type)
};

extern const Type BOOL;
extern const Type CHAR;
extern const Type UNSIGNED_CHAR;
extern const Type SIGNED_CHAR;
extern const Type SHORT;
extern const Type UNSIGNED_SHORT;
extern const Type INT;
extern const Type UNSIGNED_INT;
extern const Type LONGLONG;
extern const Type UNSIGNED_LONGLONG;
extern const Type HALF;
extern const Type FLOAT;

std::ostream &operator<<(std::ostream &os, const Type &t);

// The device type of a host type: equivalent_device_type<int>().value is INT.
template <typename T> struct equivalent_device_type {};
#define POPLAR_DECLARE_EQUIV_TYPE(T1, T2)                                                          \
  template <> struct equivalent_device_type<T1> {                                                  \
    const Type &value = T2;                                                                        \
  };
POPLAR_DECLARE_EQUIV_TYPE(bool, BOOL)
POPLAR_DECLARE_EQUIV_TYPE(char, CHAR)
POPLAR_DECLARE_EQUIV_TYPE(unsigned char, UNSIGNED_CHAR)
POPLAR_DECLARE_EQUIV_TYPE(signed char, SIGNED_CHAR)
POPLAR_DECLARE_EQUIV_TYPE(unsigned short, UNSIGNED_SHORT)
POPLAR_DECLARE_EQUIV_TYPE(short, SHORT)
POPLAR_DECLARE_EQUIV_TYPE(unsigned, UNSIGNED_INT)
POPLAR_DECLARE_EQUIV_TYPE(int, INT)
POPLAR_DECLARE_EQUIV_TYPE(unsigned long long, UNSIGNED_LONGLONG)
POPLAR_DECLARE_EQUIV_TYPE(long long, LONGLONG)
POPLAR_DECLARE_EQUIV_TYPE(float, FLOAT)

} // namespace poplar
