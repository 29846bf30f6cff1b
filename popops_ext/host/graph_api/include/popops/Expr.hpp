// Host implementation of the part of popops/Expr.hpp that the graph builders
// use: placeholders, constants, casts and binary operators, evaluated
// element by element by popops::map on the host.
#pragma once

#include <memory>

#include <poplar/Type.hpp>
#include <popops/ExprOp.hpp>

namespace popops {
namespace expr {

class Expr {
public:
  virtual ~Expr() = default;
  virtual std::unique_ptr<Expr> clone() const = 0;
};

class Const : public Expr {
public:
  Const(float v) : value(v), type(poplar::FLOAT) {}
  Const(int v) : value(v), type(poplar::INT) {}
  Const(unsigned v) : value(v), type(poplar::UNSIGNED_INT) {}
  std::unique_ptr<Expr> clone() const override { return std::make_unique<Const>(*this); }
  double value;
  poplar::Type type;
};

class Cast : public Expr {
public:
  Cast(const Expr &a, const poplar::Type bType) : a(a.clone()), bType(bType) {}
  Cast(const Cast &other) : Cast(*other.a, other.bType) {}
  std::unique_ptr<Expr> clone() const override { return std::make_unique<Cast>(*this); }
  std::unique_ptr<Expr> a;
  poplar::Type bType;
};

class PlaceHolder : public Expr {
public:
  PlaceHolder(unsigned index) : index(index) {}
  std::unique_ptr<Expr> clone() const override { return std::make_unique<PlaceHolder>(*this); }
  unsigned index; // 1-based, as _1, _2, ...
};

const PlaceHolder _1(1);
const PlaceHolder _2(2);
const PlaceHolder _3(3);
const PlaceHolder _4(4);

class BinaryOp : public Expr {
public:
  BinaryOp(BinaryOpType type, const Expr &a, const Expr &b)
      : type(type), a(a.clone()), b(b.clone()) {}
  BinaryOp(const BinaryOp &other) : BinaryOp(other.type, *other.a, *other.b) {}
  std::unique_ptr<Expr> clone() const override { return std::make_unique<BinaryOp>(*this); }
  BinaryOpType type;
  std::unique_ptr<Expr> a, b;
};

#define SNN_HOST_BINARY_EXPR(Name, Op)                                                           \
  class Name : public BinaryOp {                                                                 \
  public:                                                                                        \
    Name(const Expr &a, const Expr &b) : BinaryOp(BinaryOpType::Op, a, b) {}                     \
  };
SNN_HOST_BINARY_EXPR(Add, ADD)
SNN_HOST_BINARY_EXPR(Sub, SUBTRACT)
SNN_HOST_BINARY_EXPR(Mul, MULTIPLY)
SNN_HOST_BINARY_EXPR(Divide, DIVIDE)
SNN_HOST_BINARY_EXPR(Equal, EQUAL)
SNN_HOST_BINARY_EXPR(NotEqual, NOT_EQUAL)
SNN_HOST_BINARY_EXPR(Lt, LESS_THAN)
SNN_HOST_BINARY_EXPR(Lte, LESS_THAN_EQUAL)
SNN_HOST_BINARY_EXPR(Gt, GREATER_THAN)
SNN_HOST_BINARY_EXPR(Gte, GREATER_THAN_EQUAL)
#undef SNN_HOST_BINARY_EXPR

} // namespace expr
} // namespace popops
